"""The ACP subagent provider: a configured Agent Client Protocol agent driven over stdio.

One run = spawn the configured command as a :class:`ManagedProcess`, ``initialize``, ``session/new``,
one ``session/prompt``; the output is the concatenated agent message chunks. The official SDK
(``agent-client-protocol``, ``import acp``) speaks the protocol on our own streams — imported lazily,
only when a run starts. (We do not use ``acp.spawn_agent_process``: it hands the child part of the
parent environment and never drains stderr.)

Failures never raise: they settle ``error`` (or keep the shared stop reason) with a fixed diagnostic
built only from closed facts (DESIGN §7, seed 002):

==============  =========================================================================
stage           categories
==============  =========================================================================
initialize      configuration (bad config, workspace, SDK missing), transport, timeout, process-exit
new-session     protocol (error answer, missing/blank session id), transport, timeout, process-exit
prompt          remote-limit (``max_turn_requests``), unknown (unknown stop reason, error answer),
                transport, timeout — or only the permission line
process         process-start (spawn failed), process-exit (died before the prompt's answer)
teardown        process-unreaped (startup rollback could not observe the child's exit)
==============  =========================================================================

A child that dies while a request is in flight is classified by its observed exit (waited for,
bounded), not by the transport error that usually arrives first. The host log gets the same facts
plus the cause's exception *type names*; exception messages and stderr can carry child-controlled text,
so they are never logged (stderr stays in the process's in-memory ring). The SDK's own root-logger
records are sanitized the same way (:func:`install_sdk_log_guard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Literal

import anyio

from dsh.agent_loop.subagent.diagnostics import join_lines, permission_line, safe_token, subagent_failure
from dsh.agent_loop.subagent.process import (
    DEFAULT_EOF_GRACE,
    DEFAULT_TERM_GRACE,
    ExitStatus,
    ManagedProcess,
    ProcessStartError,
    Teardown,
    finish_shielded,
)
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.llm.errors import HarnessError, chain_links, error_chain

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT",
    "PERMISSION_POLICIES",
    "AcpProvider",
    "install_sdk_log_guard",
    "provider_from_config",
]

log = logging.getLogger(__name__)

PERMISSION_POLICIES = ("allow", "reject")
DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_EXIT_WAIT = 2.0  # how long a transport failure waits for the child's exit to classify it
_ANSWER_AFTER_EXIT_GRACE = 0.5  # a response written just before exit is still in the pipe
_NOTIFY_TIMEOUT = 1.0
_CLOSE_TIMEOUT = 1.0

# ACP stop reason -> shared stop reason. ``max_turn_requests`` and unknown values are errors.
_STOP_REASONS = {"end_turn": "completed", "max_tokens": "max-tokens", "refusal": "refusal", "cancelled": "aborted"}

_Stage = Literal["initialize", "new-session", "prompt"]
_Fault = Literal["error-answer", "malformed", "closed", "timeout"]
# What each kind of fault means at each stage (seed 002's closed categories, plus ``timeout``).
_CATEGORY: dict[str, dict[str, str]] = {
    "initialize": {"error-answer": "transport", "malformed": "transport", "closed": "transport", "timeout": "timeout"},
    "new-session": {"error-answer": "protocol", "malformed": "protocol", "closed": "transport", "timeout": "timeout"},
    "prompt": {"error-answer": "unknown", "malformed": "unknown", "closed": "transport", "timeout": "timeout"},
}
# Where a child death during a request is reported: the handshake stages own theirs; after it, ``process``.
_EXIT_STAGE = {"initialize": "initialize", "new-session": "new-session", "prompt": "process"}

_CONFIG_KEYS = frozenset(
    {"provider", "command", "args", "env", "permission", "startup_timeout", "prompt_timeout",
     "eof_grace", "term_grace", "description", "label"}
)  # fmt: skip


class _Failure(Exception):
    """A classified failure: only closed facts. The raw cause is chained for the host log."""

    def __init__(
        self, stage: str, category: str, *, stop_reason: str | None = None, exit_status: ExitStatus | None = None
    ) -> None:
        super().__init__(f"{stage}: {category}")
        self.stage = stage
        self.category = category
        self.stop_reason = stop_reason
        self.exit_status = exit_status

    def line(self, provider: str) -> str:
        return subagent_failure(provider, self.stage, self.category, self.stop_reason, self.exit_status)


# -- configuration ----------------------------------------------------------------------------------


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError("timeouts must be positive numbers of seconds")
    return float(value)


def provider_from_config(name: str, config: Mapping[str, Any]) -> AcpProvider:
    """``[subagents.NAME]`` with ``provider = "acp"`` -> provider. Never raises: a bad table yields a
    provider whose runs fail with ``stage: initialize; category: configuration``."""
    return AcpProvider.from_config(name, config)


class AcpProvider:
    """Runs a configured ACP agent command once per request."""

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        permission: str = "reject",
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        prompt_timeout: float | None = None,
        *,
        eof_grace: float = DEFAULT_EOF_GRACE,
        term_grace: float = DEFAULT_TERM_GRACE,
        exit_wait: float = DEFAULT_EXIT_WAIT,
    ) -> None:
        self.name = name
        self._problem: str | None = None  # host-only reason why every run fails with configuration
        self._command, self._args, self._env, self.permission = "", [], {}, "reject"
        self._startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
        self._prompt_timeout: float | None = None
        self._eof_grace, self._term_grace = DEFAULT_EOF_GRACE, DEFAULT_TERM_GRACE
        self._exit_wait = DEFAULT_EXIT_WAIT
        try:
            if not isinstance(command, str) or not command.strip():
                raise ValueError("command must be a non-empty string")
            if isinstance(args, str | bytes) or not all(isinstance(arg, str) for arg in args):
                raise ValueError("args must be a list of strings")
            env = dict(env or {})
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                raise ValueError("env must map strings to strings")
            if permission not in PERMISSION_POLICIES:
                raise ValueError("permission must be 'allow' or 'reject'")
            self._startup_timeout = _seconds(startup_timeout)
            self._prompt_timeout = None if prompt_timeout is None else _seconds(prompt_timeout)
            self._eof_grace, self._term_grace = _seconds(eof_grace), _seconds(term_grace)
            self._exit_wait = _seconds(exit_wait)
        except (ValueError, TypeError) as exc:
            self._problem = str(exc)
            return
        self._command, self._args, self._env, self.permission = command, list(args), env, permission

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> AcpProvider:
        """Read a ``[subagents.NAME]`` table the way every provider does (``dsh.agent_loop.subagent``'s
        shared parsers). Never raises: a bad table gives runs that fail with ``initialize`` +
        ``configuration`` (the reason goes to the host log)."""
        from dsh.agent_loop.subagent import config_command, config_env, config_number, config_seconds, config_string

        try:
            if not isinstance(config, Mapping):
                raise ValueError("the subagent table must be a table")
            if config.get("provider", "acp") != "acp":
                raise ValueError("provider must be 'acp'")
            unknown = set(config) - _CONFIG_KEYS
            if unknown:
                raise ValueError(f"unknown keys: {sorted(unknown)}")
            argv = config_command(name, config)
            provider = cls(
                name,
                argv[0],
                argv[1:],
                config_env(name, config),
                config_string(name, config, "permission", "reject") or "reject",
                config_seconds(name, config, "startup_timeout", DEFAULT_STARTUP_TIMEOUT),
                config_number(name, config, "prompt_timeout", None),
                eof_grace=config_seconds(name, config, "eof_grace", DEFAULT_EOF_GRACE),
                term_grace=config_seconds(name, config, "term_grace", DEFAULT_TERM_GRACE),
            )
        except (HarnessError, ValueError, TypeError, AttributeError) as exc:
            provider = cls(name, "")
            provider._problem = str(exc)
        return provider

    # -- start ----------------------------------------------------------------------------------

    async def start(self, request: SubagentRequest) -> _AcpRun | _SettledRun:
        """Spawn and handshake. A startup failure returns an already-settled ``error`` run, with the
        child rolled back to quiescence first; a cancelled caller gets the cancellation (after rollback)."""
        if self._problem is not None:
            log.info("acp subagent %s: configuration problem: %s", safe_token(self.name), self._problem)
            return self._failed(_Failure("initialize", "configuration"))
        try:
            import acp  # the SDK is heavy: only when an ACP run really starts
        except ImportError as exc:
            log.info("acp subagent %s: the agent-client-protocol package is missing: %s", safe_token(self.name), exc)
            return self._failed(_Failure("initialize", "configuration"))
        install_sdk_log_guard()
        cwd = _resolve_workspace(request.cwd)
        if cwd is None:
            log.info("acp subagent %s: the workspace is not a directory", safe_token(self.name))
            return self._failed(_Failure("initialize", "configuration"))
        try:
            proc = ManagedProcess(
                [self._command, *self._args],
                env={**self._env, **(request.env or {})},
                cwd=cwd,
                eof_grace=self._eof_grace,
                term_grace=self._term_grace,
            )
        except ValueError as exc:
            log.info("acp subagent %s: bad child environment: %s", safe_token(self.name), exc)
            return self._failed(_Failure("initialize", "configuration"))
        try:
            await proc.start()
        except ProcessStartError as exc:
            log.info("acp subagent %s: %s", safe_token(self.name), error_chain(exc))
            return self._failed(_Failure("process", "process-start"))

        client = _PermissionClient(self.permission)
        conn: Any = None
        try:
            conn = acp.connect_to_agent(client, proc.stdin, proc.stdout)
            await self._call(
                proc,
                conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_capabilities=acp.schema.ClientCapabilities(),
                    client_info=acp.schema.Implementation(name="dsh", version="0.1.0"),
                ),
                "initialize",
                self._startup_timeout,
            )
            session = await self._call(
                proc, conn.new_session(cwd=cwd, mcp_servers=[]), "new-session", self._startup_timeout
            )
            session_id = session.session_id
            if not isinstance(session_id, str) or not session_id.strip():
                raise _Failure("new-session", "protocol")
        except _Failure as failure:
            self._log_failure(failure, proc)
            teardown = await _rollback(proc, conn)
            lines = [failure.line(self.name)]
            if teardown.tier == "unreaped":
                lines.append(subagent_failure(self.name, "teardown", "process-unreaped"))
            return _SettledRun(SubagentResult("", "error", join_lines(*lines)))
        except BaseException:
            await _rollback(proc, conn)  # cancelled (or a bug): never leave the child behind
            raise
        client.session_id = session_id
        run = _AcpRun(self, proc, conn, client, session_id)
        run.begin(acp.text_block(request.prompt))
        return run

    def _failed(self, failure: _Failure) -> _SettledRun:
        return _SettledRun(SubagentResult("", "error", failure.line(self.name)))

    def _log_failure(self, failure: _Failure, proc: ManagedProcess) -> None:
        # Only type names: the messages (and stderr) can carry child-controlled text.
        log.info(
            "acp subagent %s: %s/%s (cause: %s; exit: %s; %d stderr bytes seen)",
            safe_token(self.name),
            failure.stage,
            failure.category,
            _cause_types(failure.__cause__),
            proc.exit_status,
            proc.stderr_bytes_seen,
        )

    async def _call(self, proc: ManagedProcess, request: Awaitable[Any], stage: _Stage, timeout: float | None) -> Any:
        """Await one SDK request while watching the child; classify every way it can go wrong."""
        task: asyncio.Future[Any] = asyncio.ensure_future(request)
        exited = asyncio.ensure_future(proc.wait_exit())
        try:
            with anyio.move_on_after(timeout if timeout is not None else math.inf):
                await asyncio.wait({task, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and exited.done():
                # The child is gone; an answer it wrote just before dying may still be in the pipe.
                await asyncio.wait({task}, timeout=_ANSWER_AFTER_EXIT_GRACE)
            if task.done() and not task.cancelled() and task.exception() is None:
                return task.result()
            cause: BaseException | None = None
            fault: _Fault = "timeout"  # no answer: the deadline passed, or the child died without one
            if task.done() and not task.cancelled():
                cause = task.exception()
                fault = _fault_of(cause)
            if fault == "closed" or proc.exited:
                # Classify by the observed exit, not by the transport error that usually arrives first.
                status = proc.exit_status or await proc.wait_exit(self._exit_wait)
                if status is not None:
                    raise _Failure(_EXIT_STAGE[stage], "process-exit", exit_status=status) from cause
            raise _Failure(stage, _CATEGORY[stage][fault]) from cause
        finally:
            for pending in (task, exited):
                if not pending.done():
                    pending.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(task, exited, return_exceptions=True)


def _fault_of(exc: BaseException | None) -> _Fault:
    import acp
    import pydantic

    if isinstance(exc, acp.RequestError):
        return "error-answer"
    if isinstance(exc, pydantic.ValidationError | TypeError | KeyError | AttributeError):
        return "malformed"
    if isinstance(exc, ConnectionError | OSError | EOFError | asyncio.IncompleteReadError):
        return "closed"
    return "malformed"


def _cause_types(exc: BaseException | None) -> str:
    """``ConnectionError <- OSError``: the type names of a cause chain, never its messages."""
    if exc is None:
        return "none"
    return " <- ".join(link.type_name for link in chain_links(exc))


class _SdkLogGuard(logging.Filter):
    """Sanitize the ACP SDK's own log records (it logs on the root logger, with tracebacks).

    Its messages and tracebacks can quote child-controlled text (a malformed frame, a method name), and
    with no handler configured Python's last-resort handler would print them over the REPL. Records
    from the SDK's files keep their fixed template and the exception type only, demoted to DEBUG.
    """

    def __init__(self, package_dir: str) -> None:
        super().__init__("acp-sdk-guard")
        self._package_dir = package_dir

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.pathname.startswith(self._package_dir):
            return True
        template = record.msg if isinstance(record.msg, str) else "log record"
        exc = record.exc_info[1] if record.exc_info else None
        record.msg = f"acp SDK: {template}" + (f" ({type(exc).__name__})" if exc is not None else "")
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record.levelno = logging.DEBUG
        record.levelname = "DEBUG"
        return True


def install_sdk_log_guard() -> None:
    """Attach :class:`_SdkLogGuard` to the root logger once (the SDK logs only there)."""
    import acp

    root = logging.getLogger()
    if any(isinstance(existing, _SdkLogGuard) for existing in root.filters):
        return
    root.addFilter(_SdkLogGuard(os.path.dirname(os.path.abspath(acp.__file__)) + os.sep))


def _resolve_workspace(cwd: object) -> str | None:
    if not isinstance(cwd, str) or not cwd:
        return None
    path = os.path.abspath(cwd)
    return path if os.path.isdir(path) else None


async def _rollback(proc: ManagedProcess, conn: Any) -> Teardown:
    with anyio.CancelScope(shield=True):
        teardown = await proc.terminate()
        await _close_connection(conn)
    return teardown


async def _close_connection(conn: Any) -> None:
    if conn is None:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
        try:
            await conn.close()
        except Exception as exc:  # the SDK's own cleanup: host log only
            log.debug("acp connection close failed: %s", _cause_types(exc))


# -- the permission client ------------------------------------------------------------------------


class _PermissionClient:
    """The ACP ``Client`` side: collects message chunks and answers permission requests by policy."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.session_id: str | None = None
        self.chunks: list[str] = []
        self.frozen = False  # set at settlement: later updates no longer change the result
        self.cancelling = False
        self._tool_kinds: dict[str, str] = {}
        # (request kind, decision) of the most recent permission request, for the permission line.
        self.last_decision: tuple[str, str] | None = None

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if self.frozen or (self.session_id is not None and session_id != self.session_id):
            return
        kind = getattr(update, "session_update", None)
        if kind == "agent_message_chunk":
            content = getattr(update, "content", None)
            if getattr(content, "type", None) == "text" and isinstance(content.text, str):
                self.chunks.append(content.text)
        elif kind in ("tool_call", "tool_call_update"):
            tool_kind = getattr(update, "kind", None)
            if isinstance(tool_kind, str):
                self._tool_kinds[update.tool_call_id] = tool_kind

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **_: Any) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        # The request may carry only changed fields; the kind then comes from the earlier tool_call.
        kind = tool_call.kind or self._tool_kinds.get(tool_call.tool_call_id) or "other"
        if self.cancelling or self.frozen:
            self.last_decision = (kind, "cancelled")
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        wanted = ("allow_once", "allow_always") if self.policy == "allow" else ("reject_once", "reject_always")
        for option_kind in wanted:
            for option in options:
                if option.kind == option_kind:
                    self.last_decision = (kind, "allowed" if self.policy == "allow" else "rejected")
                    return RequestPermissionResponse(
                        outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
                    )
        # No option matches the policy: decline to choose.
        self.last_decision = (kind, "cancelled")
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def permission_fact(self) -> str | None:
        if self.last_decision is None:
            return None
        kind, decision = self.last_decision
        return permission_line(self.policy, kind, decision)


# -- runs -----------------------------------------------------------------------------------------


class _SettledRun:
    """A run that failed before it was published: its result is fixed and it owns nothing."""

    def __init__(self, result: SubagentResult) -> None:
        self._result = result

    async def result(self) -> SubagentResult:
        return self._result

    async def cancel(self) -> None:
        return None

    async def dispose(self) -> None:
        return None


class _AcpRun:
    """A published run: one prompt in flight on a live session."""

    def __init__(
        self, provider: AcpProvider, proc: ManagedProcess, conn: Any, client: _PermissionClient, session_id: str
    ) -> None:
        self._provider = provider
        self._name = provider.name
        self._proc = proc
        self._conn = conn
        self._client = client
        self._session_id = session_id
        self._settled: asyncio.Future[SubagentResult] = asyncio.get_running_loop().create_future()
        self._driver: asyncio.Task[None] | None = None
        self._dispose_task: asyncio.Task[None] | None = None

    def begin(self, prompt_block: Any) -> None:
        self._driver = asyncio.ensure_future(self._drive(prompt_block))

    async def result(self) -> SubagentResult:
        return await asyncio.shield(self._settled)

    async def cancel(self) -> None:
        """Local cancellation: settle ``aborted`` now (no diagnostic), then tell the agent."""
        if self._settled.done():
            return
        self._client.cancelling = True
        self._settle("aborted", None)
        with anyio.move_on_after(_NOTIFY_TIMEOUT), contextlib.suppress(Exception):
            await self._conn.cancel(session_id=self._session_id)

    async def dispose(self) -> None:
        if self._dispose_task is None:
            self._dispose_task = asyncio.ensure_future(self._dispose())
        await finish_shielded(self._dispose_task)

    async def _dispose(self) -> None:
        if not self._settled.done():
            self._client.cancelling = True
            self._settle("aborted", None)  # disposed before it finished: a local end
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()
            await asyncio.gather(self._driver, return_exceptions=True)
        teardown = await self._proc.terminate()
        await _close_connection(self._conn)
        # Fixed teardown facts for the host; the settled result is not changed after the fact.
        log.info(
            "acp subagent %s: teardown tier %s, exit %s", safe_token(self._name), teardown.tier, teardown.exit_status
        )

    def _settle(self, stop_reason: str, diagnostic: str | None) -> None:
        if self._settled.done():
            return
        self._client.frozen = True
        self._settled.set_result(SubagentResult("".join(self._client.chunks), stop_reason, diagnostic))

    async def _drive(self, prompt_block: Any) -> None:
        provider = self._provider
        try:
            response = await provider._call(
                self._proc,
                self._conn.prompt(session_id=self._session_id, prompt=[prompt_block]),
                "prompt",
                provider._prompt_timeout,
            )
        except _Failure as failure:
            if self._settled.done():
                return  # locally cancelled meanwhile: the agent's reaction does not matter
            provider._log_failure(failure, self._proc)
            if failure.category == "timeout":
                with anyio.move_on_after(_NOTIFY_TIMEOUT), contextlib.suppress(Exception):
                    await self._conn.cancel(session_id=self._session_id)
            self._settle("error", join_lines(failure.line(self._name), self._client.permission_fact()))
            return
        except Exception as exc:  # a bug of ours or the SDK's: still a settled, safe result
            log.info("acp subagent %s: prompt failed unexpectedly: %s", safe_token(self._name), _cause_types(exc))
            self._settle("error", subagent_failure(self._name, "prompt", "unknown"))
            return
        self._settle_stop_reason(getattr(response, "stop_reason", None))

    def _settle_stop_reason(self, stop_reason: object) -> None:
        permission = self._client.permission_fact()
        shared = _STOP_REASONS.get(stop_reason) if isinstance(stop_reason, str) else None
        if shared == "completed":
            self._settle("completed", None)
        elif shared is not None:  # max-tokens, refusal, remote aborted: the stop reason says it all
            self._settle(shared, permission)
        elif stop_reason == "max_turn_requests":
            line = subagent_failure(self._name, "prompt", "remote-limit", stop_reason="max_turn_requests")
            self._settle("error", join_lines(line, permission))
        else:
            self._settle("error", join_lines(subagent_failure(self._name, "prompt", "unknown"), permission))
