"""The ``dsh`` (dsh-sdk) subagent provider: a child ``dsh serve --stdio`` driven over JSON-RPC.

One run = one child process = one fresh child session = one prompt. Lifecycle and stages:

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

Everything happens inside :meth:`DshSdkRun.execute`: after the prompt (or a local cancellation) the
child is asked to ``shutdown`` (bounded), then the teardown ladder runs. A failed shutdown is host-logged;
it joins the diagnostic of a failed run only (success and local cancellation carry none). After a local
cancellation (``/kill``) the ``shutdown`` gets 250 ms: unanswered, the child's process group is signalled at
once (SIGTERM, then SIGKILL), so a killed job is gone in well under a second.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from dsh.agent_loop.events import AssistantMessage, LlmRetry, StepStart, TextDelta, TurnEnd, from_wire
from dsh.agent_loop.jsonrpc import JsonRpcConnection, ProtocolError, TransportClosed
from dsh.agent_loop.process import ManagedProcess, ProcessStartError
from dsh.agent_loop.subagent import ConfigTable, ParentContext, diagnostics
from dsh.agent_loop.subagent.diagnostics import Failure
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.run import Outcome, Provider, Run, configured

__all__ = ["DEFAULT_COMMAND", "Category", "DshSdkRun", "DshSettings", "Stage", "from_config"]

log = logging.getLogger(__name__)

DEFAULT_COMMAND: tuple[str, ...] = (sys.executable, "-m", "dsh.repl.serve", "--stdio")
API_KEY_ENV = "DEEPSEEK_API_KEY"
_CANCEL_NOTIFY_TIMEOUT = 0.5
_CANCEL_SHUTDOWN_WAIT = 0.25  # after a local cancel the job must be gone well under a second (docs/subagents.md)
_MAX_OUTPUT_CHARS = 1_000_000  # a runaway child cannot grow the parent's memory without bound


class Stage(diagnostics.Stage):
    INITIALIZE = "initialize"
    SESSION_RUN = "session-run"
    SHUTDOWN = "shutdown"


class Category(diagnostics.Category):
    CONFIGURATION = "configuration"
    PROTOCOL = "protocol"
    TRANSPORT = "transport"
    UNKNOWN = "unknown"
    CHILD_ERROR = "child-error"
    CHILD_DISPOSED = "child-disposed"
    CHILD_UNKNOWN = "child-unknown"
    MISSING_TERMINAL = "missing-terminal"


@dataclass(frozen=True, slots=True)
class DshSettings:
    command: tuple[str, ...] = DEFAULT_COMMAND
    env: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    max_tokens: int | None = None
    dialect: str | None = None  # the parent's, when the child talks to the parent's endpoint
    max_parallel: int = 0  # the parent's bound on model requests at once (0: none)
    # The parent's request gate directory, asked for at each run (made on the first): the child's requests and the
    # parent's then share ``max_parallel`` (dsh.llm.request_gate). None: a child on another endpoint, or no client.
    request_gate: Callable[[], str | None] | None = None
    permission: str = "reject"
    system_prompt: str | None = None  # the child's system prompt (an agent file's body), sent with initialize
    startup_timeout: float = 30.0  # spawn + initialize handshake
    shutdown_timeout: float = 5.0
    exit_wait: float = 2.0  # bounded wait for the child's exit after its transport failed
    eof_grace: float = 2.0
    term_grace: float = 2.0


_CONFIG_KEYS = frozenset(
    {"provider", "command", "args", "env", "model", "base_url", "max_tokens", "permission", "description",
     "system_prompt", "startup_timeout", "shutdown_timeout", "exit_wait", "eof_grace", "term_grace"}
)  # fmt: skip


def from_config(name: str, config: Mapping[str, Any], parent: ParentContext | None = None) -> Provider[DshSettings]:
    """``[subagents.NAME]`` with ``provider = "dsh"``; model, base URL and key inherited from ``parent``.

    Never raises: a bad table gives a provider whose runs fail with ``stage: initialize; category:
    configuration`` (the problem, which names only the key, goes to the host log now).
    """
    return configured(name, DshSdkRun, lambda: _settings(name, config, parent or ParentContext()))


def _settings(name: str, config: Mapping[str, Any], parent: ParentContext) -> DshSettings:
    table = ConfigTable.checked(name, config, _CONFIG_KEYS)
    permission = table.choice("permission", "reject", frozenset({"allow", "reject"}))
    max_tokens = table.positive_int("max_tokens")
    defaults = DshSettings()
    return DshSettings(
        command=tuple(table.command(DEFAULT_COMMAND)),
        env=table.env(),
        model=table.string("model", parent.model),
        base_url=table.string("base_url", parent.base_url),
        api_key=parent.api_key,
        max_tokens=max_tokens,
        dialect=parent.dialect if "base_url" not in config else None,
        max_parallel=parent.max_parallel,
        request_gate=parent.request_gate if "base_url" not in config else None,
        permission=permission,
        system_prompt=table.string("system_prompt"),
        startup_timeout=table.seconds("startup_timeout", defaults.startup_timeout),
        shutdown_timeout=table.seconds("shutdown_timeout", defaults.shutdown_timeout),
        exit_wait=table.seconds("exit_wait", defaults.exit_wait),
        eof_grace=table.seconds("eof_grace", defaults.eof_grace),
        term_grace=table.seconds("term_grace", defaults.term_grace),
    )


_REFUSAL_KINDS = frozenset({"rejected", "blocked"})


class DshSdkRun(Run[DshSettings]):
    """One child session: spawn, ``initialize``, ``session/prompt``, ``shutdown``, the teardown ladder."""

    configuration = Failure(Stage.INITIALIZE, Category.CONFIGURATION)

    def __init__(self, provider: Provider[DshSettings], request: SubagentRequest) -> None:
        super().__init__(provider, request)
        self._terminal: Mapping[str, Any] | None = None  # the child's turn/end reason
        self._committed: list[str] = []  # assistant message contents of finished steps
        self._streaming: list[str] = []  # text deltas of the step in flight
        self._committed_chars = 0
        self._streaming_chars = 0
        self._prompt_sent = False

    def partial_output(self) -> str:
        """The child's assistant text so far (committed steps plus the step streaming now)."""
        parts = [*self._committed]
        streaming = "".join(self._streaming)
        if streaming:
            parts.append(streaming)
        return "\n".join(parts)

    def _failure(self, stage: Stage, category: Category, *, stop_reason: str | None = None,
                 cause: BaseException | None = None) -> Failure:  # fmt: skip
        exit_status = self.process.exit_status if self.process is not None else None
        return Failure(stage, category, stop_reason=stop_reason, exit_status=exit_status, cause=cause)

    # -- the run ---------------------------------------------------------------------------------

    async def execute(self) -> Outcome:
        settings, request = self.settings, self.request
        cwd = request.cwd
        if not cwd or not os.path.isdir(cwd):
            return Outcome("error", failure=self.configuration)
        env = {**settings.env, **request.env}
        if settings.api_key:
            env[API_KEY_ENV] = settings.api_key
        try:
            process = ManagedProcess(
                settings.command, env=env, cwd=cwd, eof_grace=settings.eof_grace, term_grace=settings.term_grace
            )
            await process.start()
        except (ValueError, ProcessStartError) as exc:
            return Outcome("error", failure=Failure(Stage.INITIALIZE, Category.CONFIGURATION, cause=exc))
        self.process = process
        assert process.stdout is not None and process.stdin is not None
        shutdown_failed = False
        try:
            async with JsonRpcConnection(
                process.stdout, process.stdin, on_notification=self._on_notification, name=f"subagent {self.name}",
                on_frame=self.frame_tap(),
            ) as conn:
                failure = await self._initialize(conn, process)
                if failure is not None:
                    return Outcome("error", failure=failure)  # a child that failed its handshake: no shutdown
                try:
                    outcome = await self._prompt(conn, process)
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        await self._notify_cancel(conn)
                        await self._stop_after_cancel(conn, process)
                    raise
                shutdown_failed = not await self._shutdown(conn, process)
        finally:
            with anyio.CancelScope(shield=True):
                teardown = await process.terminate()
        if shutdown_failed or teardown.tier == "unreaped":
            log.warning("subagent %s: shutdown failed (tier %s)", diagnostics.safe_token(self.name), teardown.tier)
            outcome = Outcome(outcome.stop_reason, outcome.output, outcome.failure,
                              Failure(Stage.SHUTDOWN, Category.UNKNOWN), outcome.note)  # fmt: skip
        return outcome

    async def _initialize(self, conn: JsonRpcConnection, process: ManagedProcess) -> Failure | None:
        """None when the handshake completed, else the initialize-stage failure."""
        settings = self.settings
        params: dict[str, Any] = {"cwd": self.request.cwd, "permission": settings.permission}
        if settings.model:
            params["model"] = settings.model
        if settings.base_url:
            params["base_url"] = settings.base_url
        if settings.max_tokens is not None:
            params["max_tokens"] = settings.max_tokens
        params.update({"system_prompt": settings.system_prompt} if settings.system_prompt else {})
        params.update({"dialect": settings.dialect} if settings.dialect else {})
        params.update({"max_parallel": settings.max_parallel} if settings.max_parallel else {})
        gate = settings.request_gate() if settings.request_gate is not None else None
        params.update({"request_gate": gate} if gate else {})
        try:
            with anyio.fail_after(settings.startup_timeout):
                result = await conn.request("initialize", params)
            if not isinstance(result, Mapping):
                raise ProtocolError("initialize result is not an object")
        except ProtocolError as exc:
            return self._failure(Stage.INITIALIZE, Category.PROTOCOL, cause=exc)
        except TransportClosed as exc:
            await process.wait_exit(settings.exit_wait)
            return self._failure(Stage.INITIALIZE, Category.TRANSPORT, cause=exc)
        except Exception as exc:  # the initialize deadline, or anything unforeseen
            return self._failure(Stage.INITIALIZE, Category.UNKNOWN, cause=exc)
        return None

    async def _stop_after_cancel(self, conn: JsonRpcConnection, process: ManagedProcess) -> None:
        """A local cancel (``/kill``): the polite ``shutdown`` gets a short window, then the group is signalled."""
        if await self._shutdown(conn, process, _CANCEL_SHUTDOWN_WAIT):
            return
        log.info("subagent %s: no answer to shutdown within %d ms of a cancel; signalling its process group",
                 diagnostics.safe_token(self.name), int(_CANCEL_SHUTDOWN_WAIT * 1000))  # fmt: skip
        await process.terminate(eof_grace=0.0)  # SIGTERM (and SIGCONT) to the group now; the ladder goes on

    async def _shutdown(self, conn: JsonRpcConnection, process: ManagedProcess, timeout: float | None = None) -> bool:
        """The bounded ``shutdown`` request while the child is alive. False when it failed."""
        if conn.closed or process.exited:
            return True
        try:
            with anyio.fail_after(self.settings.shutdown_timeout if timeout is None else timeout):
                await conn.request("shutdown")
        except Exception as exc:
            log.info("subagent %s: shutdown request failed (%s)", diagnostics.safe_token(self.name),
                     type(exc).__name__)  # fmt: skip
            return False
        return True

    async def _notify_cancel(self, conn: JsonRpcConnection) -> None:
        with anyio.move_on_after(_CANCEL_NOTIFY_TIMEOUT):
            try:
                await conn.notify("session/cancel")
            except (TransportClosed, ProtocolError):
                pass

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

    async def _prompt(self, conn: JsonRpcConnection, process: ManagedProcess) -> Outcome:
        self._prompt_sent = True
        outcome = await self._prompt_until_settled(conn, process)
        if outcome[0] == "error" and isinstance(outcome[1], TransportClosed):
            # Classified by the observed exit, not by the transport error that arrives first.
            await process.wait_exit(self.settings.exit_wait)
        return self._classify(outcome)

    async def _prompt_until_settled(self, conn: JsonRpcConnection, process: ManagedProcess) -> list[Any]:
        """``["response", value]``, ``["error", exc]`` or ``["exited"]`` (exit seen, stdout still held open)."""
        outcome: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                try:
                    outcome[:] = ["response", await conn.request("session/prompt", {"prompt": self.request.prompt})]
                except Exception as exc:
                    outcome[:] = ["error", exc]
                tg.cancel_scope.cancel()

            async def watch_exit() -> None:
                await process.wait_exit()
                # The reader may still hold the child's last frames; give it the bounded exit wait.
                with anyio.move_on_after(self.settings.exit_wait):
                    await conn.wait_closed()
                    await anyio.sleep_forever()  # ``ask`` settles now and cancels the group
                if not outcome:
                    outcome[:] = ["exited"]
                tg.cancel_scope.cancel()

            tg.start_soon(ask)
            tg.start_soon(watch_exit)
        return outcome

    def _classify(self, outcome: list[Any]) -> Outcome:
        output = self.partial_output()
        stop_reason = self._terminal_kind()

        def failed(category: Category, cause: BaseException | None = None, reason: str | None = stop_reason) -> Outcome:
            return Outcome("error", output, self._failure(Stage.SESSION_RUN, category, stop_reason=reason, cause=cause))

        if outcome[0] == "exited":
            return failed(Category.TRANSPORT)
        if outcome[0] == "error":
            exc = outcome[1]
            if isinstance(exc, ProtocolError):
                return failed(Category.PROTOCOL, exc)
            if isinstance(exc, TransportClosed):
                return failed(Category.TRANSPORT, exc)
            return failed(Category.UNKNOWN, exc)
        if not isinstance(outcome[1], Mapping):
            return failed(Category.PROTOCOL)
        if self._terminal is None:
            return failed(Category.MISSING_TERMINAL, reason=None)
        return self._from_terminal(output, self._terminal)

    def _terminal_kind(self) -> str | None:
        kind = self._terminal.get("kind") if self._terminal is not None else None
        return kind if isinstance(kind, str) else None

    def _from_terminal(self, output: str, reason: Mapping[str, Any]) -> Outcome:
        kind = reason.get("kind")
        if kind == "completed":
            return Outcome("completed", output)
        if kind == "max-tokens":
            return Outcome("max-tokens", output)
        if kind == "disposed" or (kind == "aborted" and reason.get("reason") == "disposed"):
            failure = self._failure(Stage.SESSION_RUN, Category.CHILD_DISPOSED, stop_reason=str(kind))
            return Outcome("aborted", output, failure)
        if kind == "aborted":
            return Outcome("aborted", output)
        if kind in _REFUSAL_KINDS:
            return Outcome("refusal", output)
        if kind == "error":
            failure = self._failure(Stage.SESSION_RUN, Category.CHILD_ERROR, stop_reason="error")
            return Outcome("error", output, dataclasses.replace(failure, words=_turn_end_words(reason)))
        if kind == "interrupted":
            return Outcome("error", output)  # only log repair writes it; a fresh session never should
        return Outcome("error", output, self._failure(Stage.SESSION_RUN, Category.CHILD_UNKNOWN))


def _turn_end_words(reason: Mapping[str, Any]) -> tuple[tuple[str, object], ...]:
    """The child's own account of its failed turn (its ``turn/end``: code, HTTP status, request id, the message),
    for ``/why`` and dsh.log only: the run masks and bounds it (docs/subagents.md, "The agent's own words")."""
    facts = [str(reason.get("code") or "unknown")]
    status, request_id, message = reason.get("status"), reason.get("request_id"), reason.get("message")
    if isinstance(status, int) and not isinstance(status, bool):
        facts.append(f"HTTP {status}")
    if isinstance(request_id, str) and request_id:
        facts.append(f"request id {request_id}")
    text = f"error ({', '.join(facts)})"
    if isinstance(message, str) and message.strip():
        text += f": {message}"
    return (("turn end", text),)
