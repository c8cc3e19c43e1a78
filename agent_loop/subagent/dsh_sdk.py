"""The ``dsh`` (dsh-sdk) subagent provider: a child ``dsh serve --stdio`` driven over JSON-RPC.

One run = one child process = one fresh child session = one prompt. Lifecycle and stages (seed 002):

``initialize``   workspace resolution, spawning the child, the ``initialize`` handshake
                 (categories: configuration, protocol, transport, unknown)
``session-run``  ``session/prompt``, the ``session/event`` notifications, the final child reason
                 (child-error, child-disposed, child-unknown, missing-terminal, protocol, transport, unknown)
``shutdown``     the bounded ``shutdown`` request and the release of the process (unknown)

Child ``turn/end`` kinds map to stop reasons: ``completed``/``max-tokens``/``aborted`` keep theirs with
no diagnostic; ``disposed`` (or ``aborted`` with reason ``disposed``) -> aborted + child-disposed;
``rejected``/``blocked`` -> refusal; ``error`` -> error + child-error (``stop reason: error``);
``interrupted`` -> error without a diagnostic; anything else -> error + child-unknown (the value is never
copied). A prompt response without a ``turn/end`` -> missing-terminal. :class:`ProtocolError` (bad frame
or JSON-RPC error response) -> protocol, :class:`TransportClosed` -> transport — classified by type, the
messages are never read. When the transport fails the child is given a bounded wait to exit, and the
observed exit code or signal joins the line. Local cancellation settles ``aborted`` at once, without a
diagnostic. Output is the child's assistant text; on failure it is the partial output, kept apart from
the diagnostic.

Startup publishes no run until the handshake completed: a startup failure rolls the child back (the
teardown ladder) and returns an already-settled failed run; a cancelled startup rolls back and re-raises.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from dsh.agent_loop.events import AssistantMessage, LlmRetry, StepStart, TextDelta, TurnEnd, from_wire
from dsh.agent_loop.jsonrpc import JsonRpcConnection, ProtocolError, TransportClosed
from dsh.agent_loop.subagent import (
    ParentContext,
    SubagentConfigError,
    config_command,
    config_env,
    config_positive_int,
    config_seconds,
    config_string,
    provider_or_problem,
    reject_unknown_keys,
)
from dsh.agent_loop.subagent.diagnostics import join_lines, subagent_failure
from dsh.agent_loop.subagent.process import ExitStatus, ManagedProcess, ProcessStartError
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult

__all__ = ["DEFAULT_COMMAND", "DshSdkProvider", "DshSdkRun", "DshSettings", "from_config"]

log = logging.getLogger(__name__)

DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "dsh.agent_loop.serve", "--stdio")
API_KEY_ENV = "DEEPSEEK_API_KEY"
_CANCEL_NOTIFY_TIMEOUT = 0.5
_MAX_OUTPUT_CHARS = 1_000_000  # a runaway child cannot grow the parent's memory without bound


@dataclass(frozen=True, slots=True)
class DshSettings:
    command: tuple[str, ...] = DEFAULT_COMMAND
    env: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    max_tokens: int | None = None
    permission: str = "reject"
    startup_timeout: float = 30.0  # spawn + initialize handshake
    shutdown_timeout: float = 5.0
    exit_wait: float = 2.0  # bounded wait for the child's exit after its transport failed
    eof_grace: float = 2.0
    term_grace: float = 2.0


_CONFIG_KEYS = frozenset(
    {"provider", "command", "args", "env", "model", "base_url", "max_tokens", "permission", "description",
     "startup_timeout", "shutdown_timeout", "exit_wait", "eof_grace", "term_grace"}
)  # fmt: skip


def from_config(name: str, config: Mapping[str, Any], parent: ParentContext | None = None) -> DshSdkProvider:
    """``[subagents.NAME]`` with ``provider = "dsh"``; model, base URL and key inherited from ``parent``.

    Never raises: a bad table gives a provider whose runs fail with ``stage: initialize; category:
    configuration`` (the problem, which names only the key, goes to the host log now).
    """
    return provider_or_problem(name, lambda: _settings(name, config, parent or ParentContext()), DshSdkProvider, log)


def _settings(name: str, config: Mapping[str, Any], parent: ParentContext) -> DshSettings:
    reject_unknown_keys(name, config, _CONFIG_KEYS)
    permission = config.get("permission", "reject")
    if permission not in ("allow", "reject"):
        raise SubagentConfigError(name, 'permission must be "allow" or "reject"')
    max_tokens = config_positive_int(name, config, "max_tokens")
    defaults = DshSettings()

    def seconds(key: str, default: float) -> float:
        return config_seconds(name, config, key, default)

    return DshSettings(
        command=tuple(config_command(name, config, DEFAULT_COMMAND)),
        env=config_env(name, config),
        model=config_string(name, config, "model", parent.model),
        base_url=config_string(name, config, "base_url", parent.base_url),
        api_key=parent.api_key,
        max_tokens=max_tokens,
        permission=permission,
        startup_timeout=seconds("startup_timeout", defaults.startup_timeout),
        shutdown_timeout=seconds("shutdown_timeout", defaults.shutdown_timeout),
        exit_wait=seconds("exit_wait", defaults.exit_wait),
        eof_grace=seconds("eof_grace", defaults.eof_grace),
        term_grace=seconds("term_grace", defaults.term_grace),
    )


class DshSdkProvider:
    """Starts child dsh runs. ``name`` is the configured subagent name (shown in diagnostics)."""

    def __init__(self, name: str, settings: DshSettings | None = None, *, problem: str | None = None) -> None:
        self.name = name
        self.settings = settings or DshSettings()
        self.problem = problem  # host-only: why every run fails with ``configuration``

    async def start(self, request: SubagentRequest) -> DshSdkRun:
        """Spawn the child and finish the handshake; a failure returns a settled failed run."""
        run = DshSdkRun(self.name, self.settings, request)
        if self.problem is not None:
            run._fail_configuration()
        else:
            await run._start()
        return run


_REFUSAL_KINDS = frozenset({"rejected", "blocked"})


class DshSdkRun:
    """One child session. ``result()`` never raises for child failures; ``dispose()`` is idempotent."""

    def __init__(self, provider: str, settings: DshSettings, request: SubagentRequest) -> None:
        self._provider = provider
        self._settings = settings
        self._request = request
        self._process: ManagedProcess | None = None
        self._conn: JsonRpcConnection | None = None
        self._settled: SubagentResult | None = None
        self._terminal: Mapping[str, Any] | None = None  # the child's turn/end reason
        self._committed: list[str] = []  # assistant message contents of finished steps
        self._streaming: list[str] = []  # text deltas of the step in flight
        self._committed_chars = 0
        self._streaming_chars = 0
        self._prompt_sent = False
        self._cancel_requested = False
        self._prompt_scope: anyio.CancelScope | None = None
        self._result_lock = anyio.Lock()
        self._disposed = False
        self._dispose_done = anyio.Event()
        self._dispose_note: str | None = None

    # -- observation -----------------------------------------------------------------------------

    def partial_output(self) -> str:
        """The child's assistant text so far (committed steps plus the step streaming now)."""
        parts = [*self._committed]
        streaming = "".join(self._streaming)
        if streaming:
            parts.append(streaming)
        return "\n".join(parts)

    @property
    def exit_status(self) -> ExitStatus | None:
        return self._process.exit_status if self._process is not None else None

    def _failure(self, stage: str, category: str, *, stop_reason: str | None = None, exited: bool = True) -> str:
        return subagent_failure(
            self._provider,
            stage,
            category,
            stop_reason=stop_reason,
            exit_status=self.exit_status if exited else None,
        )

    def _log(self, stage: str, category: str, exc: BaseException | None = None) -> None:
        # Host log: closed facts and the exception's type only — never its message or the child's stderr.
        kind = type(exc).__name__ if exc is not None else "-"
        log.warning("subagent %s: %s failed (%s; %s)", self._provider, stage, category, kind)

    # -- startup ---------------------------------------------------------------------------------

    def _fail_configuration(self) -> None:
        self._log("initialize", "configuration")
        self._settle(SubagentResult("", "error", self._failure("initialize", "configuration")))
        self._disposed = True
        self._dispose_done.set()

    async def _start(self) -> None:
        try:
            failure = await self._spawn_and_initialize()
        except BaseException:
            await self._release(graceful=False)  # cancelled mid-startup: roll back, then re-raise
            raise
        if failure is None:
            return
        note = await self._release(graceful=False)
        self._settle(SubagentResult("", "error", join_lines(failure, note)))
        self._disposed = True
        self._dispose_done.set()

    async def _spawn_and_initialize(self) -> str | None:
        """None when the handshake completed, else the initialize-stage failure line."""
        settings = self._settings
        cwd = self._request.cwd
        if not cwd or not os.path.isdir(cwd):
            self._log("initialize", "configuration")
            return self._failure("initialize", "configuration")
        env = {**settings.env, **self._request.env}
        if settings.api_key:
            env[API_KEY_ENV] = settings.api_key
        try:
            process = ManagedProcess(settings.command, env=env, cwd=cwd)
        except ValueError as exc:
            self._log("initialize", "configuration", exc)
            return self._failure("initialize", "configuration")
        try:
            await process.start()
        except ProcessStartError as exc:
            self._log("initialize", "configuration", exc)
            return self._failure("initialize", "configuration")
        self._process = process
        assert process.stdout is not None and process.stdin is not None
        self._conn = JsonRpcConnection(
            process.stdout, process.stdin, on_notification=self._on_notification, name=f"subagent {self._provider}"
        )
        await self._conn.start()
        params: dict[str, Any] = {"cwd": cwd, "permission": settings.permission}
        if settings.model:
            params["model"] = settings.model
        if settings.base_url:
            params["base_url"] = settings.base_url
        if settings.max_tokens is not None:
            params["max_tokens"] = settings.max_tokens
        try:
            with anyio.fail_after(settings.startup_timeout):
                result = await self._conn.request("initialize", params)
            if not isinstance(result, Mapping):
                raise ProtocolError("initialize result is not an object")
        except ProtocolError as exc:
            self._log("initialize", "protocol", exc)
            return self._failure("initialize", "protocol")
        except TransportClosed as exc:
            self._log("initialize", "transport", exc)
            await process.wait_exit(settings.exit_wait)
            return self._failure("initialize", "transport")
        except Exception as exc:  # the initialize deadline, or anything unforeseen
            self._log("initialize", "unknown", exc)
            return self._failure("initialize", "unknown")
        return None

    # -- notifications ---------------------------------------------------------------------------

    def _on_notification(self, method: str, params: Any) -> None:
        if method != "session/event" or not isinstance(params, Mapping):
            return
        wire = params.get("event")
        if not isinstance(wire, Mapping):
            return
        event = from_wire(wire)
        if isinstance(event, TextDelta):
            if self._output_room() > 0:
                self._streaming.append(event.text[: self._output_room()])
                self._streaming_chars += len(self._streaming[-1])
        elif isinstance(event, StepStart | LlmRetry):
            self._clear_streaming()  # a retried attempt streams its text again
        elif isinstance(event, AssistantMessage):
            self._clear_streaming()
            if event.content and self._output_room() > 0:
                self._committed.append(event.content[: self._output_room()])
                self._committed_chars += len(self._committed[-1])
        elif isinstance(event, TurnEnd) and self._prompt_sent and self._terminal is None:
            self._terminal = event.reason.to_dict()

    def _output_room(self) -> int:
        return _MAX_OUTPUT_CHARS - self._committed_chars - self._streaming_chars

    def _clear_streaming(self) -> None:
        self._streaming.clear()
        self._streaming_chars = 0

    # -- the run ---------------------------------------------------------------------------------

    async def result(self) -> SubagentResult:
        async with self._result_lock:
            if self._settled is None:
                self._settle(await self._run_prompt())
            assert self._settled is not None
            return self._settled

    def _settle(self, result: SubagentResult) -> None:
        if self._settled is None:
            self._settled = result

    async def _run_prompt(self) -> SubagentResult:
        conn, process = self._conn, self._process
        if conn is None or process is None or self._disposed:
            return SubagentResult(self.partial_output(), "aborted")
        outcome: list[Any] = []
        try:
            with anyio.CancelScope() as scope:
                self._prompt_scope = scope
                if self._cancel_requested:
                    scope.cancel()
                self._prompt_sent = True
                outcome = await self._prompt_until_settled(conn, process)
        except BaseException:
            # The caller is being cancelled: tell the child, briefly, then let the cancellation through.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_NOTIFY_TIMEOUT):
                try:
                    await conn.notify("session/cancel")
                except (TransportClosed, ProtocolError):
                    pass
            raise
        finally:
            self._prompt_scope = None
        if self._cancel_requested and not outcome:
            return SubagentResult(self.partial_output(), "aborted")
        if outcome[0] == "error" and isinstance(outcome[1], TransportClosed):
            # Classified by the observed exit, not by the transport error that arrives first.
            await process.wait_exit(self._settings.exit_wait)
        return self._classify(outcome)

    async def _prompt_until_settled(self, conn: JsonRpcConnection, process: ManagedProcess) -> list[Any]:
        """``["response", value]``, ``["error", exc]`` or ``["exited"]`` (exit seen, stdout still held open)."""
        outcome: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                try:
                    outcome[:] = ["response", await conn.request("session/prompt", {"prompt": self._request.prompt})]
                except Exception as exc:
                    outcome[:] = ["error", exc]
                tg.cancel_scope.cancel()

            async def watch_exit() -> None:
                await process.wait_exit()
                # The reader may still hold the child's last frames; give it the bounded exit wait.
                with anyio.move_on_after(self._settings.exit_wait):
                    await conn.wait_closed()
                    await anyio.sleep_forever()  # ``ask`` settles now and cancels the group
                if not outcome:
                    outcome[:] = ["exited"]
                tg.cancel_scope.cancel()

            tg.start_soon(ask)
            tg.start_soon(watch_exit)
        return outcome

    def _classify(self, outcome: list[Any]) -> SubagentResult:
        output = self.partial_output()
        stop_reason = self._terminal_kind()
        if outcome[0] == "exited":
            self._log("session-run", "transport")
            return SubagentResult(output, "error", self._failure("session-run", "transport", stop_reason=stop_reason))
        if outcome[0] == "error":
            exc = outcome[1]
            if isinstance(exc, ProtocolError):
                self._log("session-run", "protocol", exc)
                return SubagentResult(
                    output, "error", self._failure("session-run", "protocol", stop_reason=stop_reason)
                )
            if isinstance(exc, TransportClosed):
                self._log("session-run", "transport", exc)
                return SubagentResult(
                    output, "error", self._failure("session-run", "transport", stop_reason=stop_reason)
                )
            self._log("session-run", "unknown", exc)
            return SubagentResult(output, "error", self._failure("session-run", "unknown", stop_reason=stop_reason))
        response = outcome[1]
        if not isinstance(response, Mapping):
            self._log("session-run", "protocol")
            return SubagentResult(output, "error", self._failure("session-run", "protocol", stop_reason=stop_reason))
        if self._terminal is None:
            self._log("session-run", "missing-terminal")
            return SubagentResult(output, "error", self._failure("session-run", "missing-terminal"))
        return self._from_terminal(output, self._terminal)

    def _terminal_kind(self) -> str | None:
        kind = self._terminal.get("kind") if self._terminal is not None else None
        return kind if isinstance(kind, str) else None

    def _from_terminal(self, output: str, reason: Mapping[str, Any]) -> SubagentResult:
        kind = reason.get("kind")
        if kind == "completed":
            return SubagentResult(output, "completed")
        if kind == "max-tokens":
            return SubagentResult(output, "max-tokens")
        if kind == "disposed" or (kind == "aborted" and reason.get("reason") == "disposed"):
            self._log("session-run", "child-disposed")
            return SubagentResult(
                output, "aborted", self._failure("session-run", "child-disposed", stop_reason=str(kind))
            )
        if kind == "aborted":
            return SubagentResult(output, "aborted")
        if kind in _REFUSAL_KINDS:
            return SubagentResult(output, "refusal")
        if kind == "error":
            self._log("session-run", "child-error")
            return SubagentResult(output, "error", self._failure("session-run", "child-error", stop_reason="error"))
        if kind == "interrupted":
            return SubagentResult(output, "error")  # only log repair writes it; a fresh session never should
        self._log("session-run", "child-unknown")
        return SubagentResult(output, "error", self._failure("session-run", "child-unknown"))

    # -- cancellation and disposal ---------------------------------------------------------------

    async def cancel(self) -> None:
        """Local cancellation: the run settles ``aborted`` at once, with no diagnostic."""
        if self._settled is not None or self._cancel_requested:
            return
        self._cancel_requested = True
        if self._prompt_scope is not None:
            self._prompt_scope.cancel()
        conn = self._conn
        if conn is not None and not conn.closed:
            with anyio.move_on_after(_CANCEL_NOTIFY_TIMEOUT):
                try:
                    await conn.notify("session/cancel")
                except (TransportClosed, ProtocolError):
                    pass

    async def dispose(self) -> str | None:
        """Shut the child down (bounded), then the teardown ladder. Idempotent; shielded from cancellation.

        Returns the safe shutdown fact when the shutdown failed (``stage: shutdown; category: unknown``),
        else ``None``. It is host-logged either way; callers may append it to a failed result.
        """
        if self._disposed:
            await self._dispose_done.wait()
            return self._dispose_note
        self._disposed = True
        if self._settled is None and self._prompt_scope is not None:
            self._cancel_requested = True  # disposing a running prompt is a local cancellation
            self._prompt_scope.cancel()
        try:
            with anyio.CancelScope(shield=True):
                self._dispose_note = await self._release()
        finally:
            self._dispose_done.set()
        return self._dispose_note

    async def _release(self, *, graceful: bool = True) -> str | None:
        """``shutdown`` (bounded, ``graceful`` only) while the child is alive, close the connection, then
        the teardown ladder. A startup rollback is not graceful: a child that failed its handshake is
        not asked for anything more."""
        with anyio.CancelScope(shield=True):
            conn, process = self._conn, self._process
            failed = False
            if graceful and conn is not None and process is not None and not conn.closed and not process.exited:
                try:
                    with anyio.fail_after(self._settings.shutdown_timeout):
                        await conn.request("shutdown")
                except Exception as exc:
                    self._log("shutdown", "unknown", exc)
                    failed = True
            if conn is not None:
                await conn.aclose()
            if process is not None:
                try:
                    teardown = await process.terminate(self._settings.eof_grace, self._settings.term_grace)
                except Exception as exc:
                    self._log("shutdown", "unknown", exc)
                    failed = True
                else:
                    if teardown.tier == "unreaped":
                        self._log("shutdown", "unknown")
                        failed = True
            return self._failure("shutdown", "unknown", exited=False) if failed else None
