"""The ACP subagent provider: a configured Agent Client Protocol agent driven over stdio.

One run = spawn the configured command as a :class:`ManagedProcess`, ``initialize``, ``session/new``,
one ``session/prompt``; the output is the concatenated agent message chunks. The official SDK
(``agent-client-protocol``, ``import acp``) speaks the protocol on our own streams — imported lazily,
only when a run starts. (We do not use ``acp.spawn_agent_process``: it hands the child part of the
parent environment and never drains stderr.)

Failures never raise: they settle ``error`` (or keep the shared stop reason) with a fixed diagnostic
built only from closed facts (the :class:`Stage` and :class:`Category` enums):

==============  =========================================================================
stage           categories
==============  =========================================================================
initialize      configuration (bad config, workspace, SDK missing), transport, timeout, process-exit
new-session     agent-error (a JSON-RPC error answer, also to ``session/set_mode``), protocol
                (malformed answer, missing/blank session id), configuration (``mode`` not advertised),
                transport, timeout, process-exit
prompt          agent-error (a JSON-RPC error answer), remote-limit (``max_turn_requests``), unknown
                (unknown stop reason, malformed answer), transport, timeout — or only the permission line
process         process-start (spawn failed), process-exit (died before the prompt's answer)
teardown        process-unreaped (after a failure, the ladder could not observe the child's exit)
==============  =========================================================================

``agent-error`` carries the error's integer code (``error code: <n>``); its message and data stay in
the cause. Under ``permission = "reject"`` a session that advertises modes is put into one that asks
(``mode`` in the table chooses explicitly); tool calls that still run without a permission request
give the run a host-side warning line (:func:`~dsh.agent_loop.subagent.diagnostics.mode_warning`).

A child that dies while a request is in flight is classified by its observed exit (waited for,
bounded), not by the transport error that usually arrives first. The host log gets the same facts
plus the cause's exception *type names*; exception messages and stderr can carry child-controlled text,
so they are never logged (stderr stays in the process's in-memory ring). The SDK's own root-logger
records are sanitized the same way (:func:`install_sdk_log_guard`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from dsh.agent_loop.process import DEFAULT_EOF_GRACE, DEFAULT_TERM_GRACE, ManagedProcess, ProcessStartError
from dsh.agent_loop.subagent import (
    ParentContext,
    SubagentConfigError,
    config_command,
    config_env,
    config_number,
    config_seconds,
    config_string,
    diagnostics,
    reject_unknown_keys,
)
from dsh.agent_loop.subagent.diagnostics import Failure, mode_warning, permission_line
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.run import Outcome, Provider, Run, configured

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT",
    "PERMISSION_POLICIES",
    "AcpInitializeRun",
    "AcpRun",
    "AcpSettings",
    "Category",
    "Stage",
    "from_config",
    "install_sdk_log_guard",
]

log = logging.getLogger(__name__)

PERMISSION_POLICIES = ("allow", "reject")
DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_EXIT_WAIT = 2.0  # how long a transport failure waits for the child's exit to classify it
_ANSWER_AFTER_EXIT_GRACE = 0.5  # a response written just before exit is still in the pipe
_NOTIFY_TIMEOUT = 1.0
_CLOSE_TIMEOUT = 1.0


class Stage(diagnostics.Stage):
    INITIALIZE = "initialize"
    NEW_SESSION = "new-session"
    PROMPT = "prompt"
    PROCESS = "process"
    TEARDOWN = "teardown"


class Category(diagnostics.Category):
    CONFIGURATION = "configuration"
    TRANSPORT = "transport"
    PROTOCOL = "protocol"
    AGENT_ERROR = "agent-error"
    PROCESS_START = "process-start"
    PROCESS_EXIT = "process-exit"
    REMOTE_LIMIT = "remote-limit"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    PROCESS_UNREAPED = "process-unreaped"


# ACP stop reason -> shared stop reason. ``max_turn_requests`` and unknown values are errors.
_STOP_REASONS = {"end_turn": "completed", "max_tokens": "max-tokens", "refusal": "refusal", "cancelled": "aborted"}

# What each kind of fault means at each stage (the closed categories, plus ``timeout``).
_CATEGORY: dict[Stage, dict[str, Category]] = {
    Stage.INITIALIZE: {"error-answer": Category.TRANSPORT, "malformed": Category.TRANSPORT,
                       "closed": Category.TRANSPORT, "timeout": Category.TIMEOUT},
    Stage.NEW_SESSION: {"error-answer": Category.AGENT_ERROR, "malformed": Category.PROTOCOL,
                        "closed": Category.TRANSPORT, "timeout": Category.TIMEOUT},
    Stage.PROMPT: {"error-answer": Category.AGENT_ERROR, "malformed": Category.UNKNOWN,
                   "closed": Category.TRANSPORT, "timeout": Category.TIMEOUT},
}  # fmt: skip
# Where a child death during a request is reported: the handshake stages own theirs; after it, ``process``.
_EXIT_STAGE = {Stage.INITIALIZE: Stage.INITIALIZE, Stage.NEW_SESSION: Stage.NEW_SESSION, Stage.PROMPT: Stage.PROCESS}

_CONFIG_KEYS = frozenset(
    {"provider", "command", "args", "env", "permission", "startup_timeout", "prompt_timeout",
     "eof_grace", "term_grace", "exit_wait", "description", "label", "mode"}
)  # fmt: skip


# -- configuration ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcpSettings:
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    permission: str = "reject"
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    prompt_timeout: float | None = None
    eof_grace: float = DEFAULT_EOF_GRACE
    term_grace: float = DEFAULT_TERM_GRACE
    exit_wait: float = DEFAULT_EXIT_WAIT
    mode: str | None = None  # a session mode id the agent must advertise; None: chosen by the policy


def from_config(name: str, config: Mapping[str, Any], parent: ParentContext | None = None) -> Provider[AcpSettings]:
    """``[subagents.NAME]`` with ``provider = "acp"``. Nothing is inherited from ``parent``.

    Never raises: a bad table gives runs that fail with ``stage: initialize; category:
    configuration`` (the problem, which names only the table and key, goes to the host log now).
    """
    return configured(name, AcpRun, lambda: _settings(name, config))


def _settings(name: str, config: Mapping[str, Any]) -> AcpSettings:
    if config.get("provider", "acp") != "acp":
        raise SubagentConfigError(name, "provider must be acp")
    reject_unknown_keys(name, config, _CONFIG_KEYS)
    permission = config_string(name, config, "permission", "reject")
    if permission not in PERMISSION_POLICIES:
        raise SubagentConfigError(name, 'permission must be "allow" or "reject"')

    def seconds(key: str, default: float) -> float:
        return config_seconds(name, config, key, default)

    return AcpSettings(
        command=tuple(config_command(name, config)),
        env=config_env(name, config),
        permission=permission,
        startup_timeout=seconds("startup_timeout", DEFAULT_STARTUP_TIMEOUT),
        prompt_timeout=config_number(name, config, "prompt_timeout", None),
        eof_grace=seconds("eof_grace", DEFAULT_EOF_GRACE),
        term_grace=seconds("term_grace", DEFAULT_TERM_GRACE),
        exit_wait=seconds("exit_wait", DEFAULT_EXIT_WAIT),
        mode=config_string(name, config, "mode", None),
    )


# -- one run ------------------------------------------------------------------------------------------


class AcpRun(Run[AcpSettings]):
    """Spawn, ``initialize``, ``session/new``, one ``session/prompt``; then the teardown ladder."""

    configuration = Failure(Stage.INITIALIZE, Category.CONFIGURATION)

    def __init__(self, provider: Provider[AcpSettings], request: SubagentRequest) -> None:
        super().__init__(provider, request)
        self._client = _PermissionClient(self.settings.permission if self.settings else "reject")

    def partial_output(self) -> str:
        return "".join(self._client.chunks)

    async def execute(self) -> Outcome:
        try:
            import acp  # the SDK is heavy: only when an ACP run really starts
        except ImportError as exc:
            return Outcome("error", failure=replace(self.configuration, cause=exc))
        install_sdk_log_guard()
        cwd = _resolve_workspace(self.request.cwd)
        if cwd is None:
            return Outcome("error", failure=self.configuration)
        settings = self.settings
        try:
            proc = ManagedProcess(
                settings.command,
                env={**settings.env, **(self.request.env or {})},
                cwd=cwd,
                eof_grace=settings.eof_grace,
                term_grace=settings.term_grace,
            )
        except ValueError as exc:
            return Outcome("error", failure=replace(self.configuration, cause=exc))
        try:
            await proc.start()
        except ProcessStartError as exc:
            return Outcome("error", failure=Failure(Stage.PROCESS, Category.PROCESS_START, cause=exc))
        conn: Any = None
        try:
            # The SDK's Client protocol lists every optional method; its router answers method-not-found for
            # the ones a client lacks (acp/router.py looks them up by name): a partial client is expected.
            conn = acp.connect_to_agent(self._client, proc.stdin, proc.stdout)  # type: ignore[arg-type]
            outcome = await self._session(acp, proc, conn, cwd)
        finally:
            with anyio.CancelScope(shield=True):
                teardown = await proc.terminate()
                await _close_connection(conn)
            log.info("acp subagent %s: teardown tier %s, exit %s",
                     diagnostics.safe_token(self.name), teardown.tier, teardown.exit_status)  # fmt: skip
        if teardown.tier == "unreaped" and outcome.failure is not None:
            outcome = replace(outcome, teardown=Failure(Stage.TEARDOWN, Category.PROCESS_UNREAPED))
        return outcome

    async def _session(self, acp: Any, proc: ManagedProcess, conn: Any, cwd: str) -> Outcome:
        settings, client = self.settings, self._client
        answer = await self._initialize(acp, proc, conn)
        if isinstance(answer, Failure):
            return Outcome("error", failure=answer)
        session = await self._call(
            proc, lambda: conn.new_session(cwd=cwd, mcp_servers=[]), Stage.NEW_SESSION, settings.startup_timeout
        )
        if isinstance(session, Failure):
            return Outcome("error", failure=session)
        session_id = getattr(session, "session_id", None)
        if not isinstance(session_id, str) or not session_id.strip():
            return Outcome("error", failure=Failure(Stage.NEW_SESSION, Category.PROTOCOL))
        client.session_id = session_id
        chosen = await self._choose_mode(proc, conn, session_id, getattr(session, "modes", None))
        if isinstance(chosen, Failure):
            return Outcome("error", failure=chosen)
        try:
            response = await self._call(
                proc,
                lambda: conn.prompt(session_id=session_id, prompt=[acp.text_block(self.request.prompt)]),
                Stage.PROMPT,
                settings.prompt_timeout,
            )
        except anyio.get_cancelled_exc_class():
            # Local cancellation: answer any further permission request "cancelled", tell the agent.
            client.cancelling = client.frozen = True
            with anyio.CancelScope(shield=True):
                await _notify_cancel(conn, session_id)
            raise
        except Exception as exc:  # a bug of ours or the SDK's: still a settled, safe result
            response = Failure(Stage.PROMPT, Category.UNKNOWN, cause=exc)
        client.frozen = True
        if isinstance(response, Failure):
            if response.category is Category.TIMEOUT:
                await _notify_cancel(conn, session_id)
            outcome = Outcome("error", self.partial_output(), response, note=client.permission_fact())
        else:
            outcome = self._from_stop_reason(getattr(response, "stop_reason", None))
        if client.ran_unasked:
            outcome = replace(outcome, warning=mode_warning(self.name, client.mode))
        return outcome

    async def _initialize(self, acp: Any, proc: ManagedProcess, conn: Any) -> Any:
        """``initialize``: the agent's answer, or the :class:`Failure` it came to."""
        return await self._call(
            proc,
            lambda: conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_capabilities=acp.schema.ClientCapabilities(),
                client_info=acp.schema.Implementation(name="dsh", version="0.1.0"),
            ),
            Stage.INITIALIZE,
            self.settings.startup_timeout,
        )

    async def _choose_mode(self, proc: ManagedProcess, conn: Any, session_id: str, modes: Any) -> Failure | None:
        """Put the session in the configured mode, or under ``reject`` in one that asks (docs/subagents.md)."""
        client, wanted = self._client, self.settings.mode
        advertised = [m.id for m in getattr(modes, "available_modes", None) or [] if isinstance(m.id, str)]
        current = getattr(modes, "current_mode_id", None)
        client.mode = current if isinstance(current, str) else None
        if wanted is not None:
            if wanted not in advertised:
                return Failure(Stage.NEW_SESSION, Category.CONFIGURATION)
        elif client.policy == "reject":
            wanted = _asking_mode(modes)
        if wanted is None or wanted == client.mode:
            return None
        answer = await self._call(
            proc,
            lambda: conn.set_session_mode(session_id=session_id, mode_id=wanted),
            Stage.NEW_SESSION,
            self.settings.startup_timeout,
        )
        if isinstance(answer, Failure):
            return answer
        client.mode = wanted
        return None

    def _from_stop_reason(self, stop_reason: object) -> Outcome:
        output, permission = self.partial_output(), self._client.permission_fact()
        shared = _STOP_REASONS.get(stop_reason) if isinstance(stop_reason, str) else None
        if shared == "completed":
            return Outcome("completed", output)
        if shared is not None:  # max-tokens, refusal, remote aborted: the stop reason says it all
            return Outcome(shared, output, note=permission)
        if stop_reason == "max_turn_requests":
            failure = Failure(Stage.PROMPT, Category.REMOTE_LIMIT, stop_reason="max_turn_requests")
            return Outcome("error", output, failure, note=permission)
        return Outcome("error", output, Failure(Stage.PROMPT, Category.UNKNOWN), note=permission)

    async def _call(
        self, proc: ManagedProcess, request: Callable[[], Awaitable[Any]], stage: Stage, timeout: float | None
    ) -> Any:
        """One SDK request while watching the child: its answer, or the :class:`Failure` it came to."""
        answers: list[tuple[bool, Any]] = []  # (answered, value or exception)
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    try:
                        answers.append((True, await request()))
                    except Exception as exc:  # classified below, by type
                        answers.append((False, exc))
                    tg.cancel_scope.cancel()

                async def watch_exit() -> None:
                    await proc.wait_exit()
                    # The child is gone; an answer it wrote just before dying may still be in the pipe.
                    await anyio.sleep(_ANSWER_AFTER_EXIT_GRACE)
                    tg.cancel_scope.cancel()

                tg.start_soon(ask)
                tg.start_soon(watch_exit)
        if answers and answers[0][0]:
            return answers[0][1]
        cause: BaseException | None = answers[0][1] if answers else None
        # No answer: the deadline passed, or the child died without one.
        fault = _fault_of(cause) if cause is not None else "timeout"
        if fault == "closed" or proc.exited:
            # Classify by the observed exit, not by the transport error that usually arrives first.
            status = proc.exit_status or await proc.wait_exit(self.settings.exit_wait)
            if status is not None:
                return Failure(_EXIT_STAGE[stage], Category.PROCESS_EXIT, exit_status=status, cause=cause)
        category = _CATEGORY[stage][fault]
        code = getattr(cause, "code", None) if category is Category.AGENT_ERROR else None
        return Failure(stage, category, error_code=code if isinstance(code, int) else None, cause=cause)


class AcpInitializeRun(AcpRun):
    """Spawn and ``initialize`` only, then the same teardown: ``dsh doctor``'s check of an ACP subagent.

    Failures are the run's own (same stages, categories and lines). On success :attr:`agent_info` holds
    the ``(name, version)`` the agent answered with, as sent (child text: the caller sanitizes it).
    """

    agent_info: tuple[str, str] | None = None

    async def _session(self, acp: Any, proc: ManagedProcess, conn: Any, cwd: str) -> Outcome:
        answer = await self._initialize(acp, proc, conn)
        if isinstance(answer, Failure):
            return Outcome("error", failure=answer)
        info = getattr(answer, "agent_info", None)
        name, version = getattr(info, "name", None), getattr(info, "version", None)
        self.agent_info = (name if isinstance(name, str) else "", version if isinstance(version, str) else "")
        return Outcome("completed")


# Mode ids that ask before acting (claude-agent-acp's "default" is "Always ask before making changes").
_ASKING_MODE_IDS = ("default", "ask", "manual", "read-only")


def _asking_mode(modes: Any) -> str | None:
    """The advertised mode to use under ``reject``: a known asking id, else one described as asking."""
    available: list[tuple[str, object]] = [
        (mode_id, getattr(m, "description", None))
        for m in getattr(modes, "available_modes", None) or []
        if isinstance(mode_id := getattr(m, "id", None), str)
    ]
    for known in _ASKING_MODE_IDS:
        for mode_id, _ in available:
            if mode_id.lower() == known:
                return mode_id
    for mode_id, description in available:
        if isinstance(description, str) and " ask" in f" {description.lower()}":
            return mode_id
    return None


async def _notify_cancel(conn: Any, session_id: str) -> None:
    with anyio.move_on_after(_NOTIFY_TIMEOUT), contextlib.suppress(Exception):
        await conn.cancel(session_id=session_id)


def _fault_of(exc: BaseException) -> str:
    import acp
    import pydantic

    if isinstance(exc, acp.RequestError):
        return "error-answer"
    if isinstance(exc, pydantic.ValidationError | TypeError | KeyError | AttributeError):
        return "malformed"
    if isinstance(exc, ConnectionError | OSError | EOFError):
        return "closed"
    return "malformed"


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


async def _close_connection(conn: Any) -> None:
    if conn is None:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
        try:
            await conn.close()
        except Exception as exc:  # the SDK's own cleanup: host log only
            log.debug("acp connection close failed: %s", type(exc).__name__)


# -- the permission client ------------------------------------------------------------------------


# Tool kinds that only look (no change, no command): running them unasked is not worth a warning.
_HARMLESS_KINDS = frozenset({"read", "search", "think"})


class _PermissionClient:
    """The ACP ``Client`` side: collects message chunks and answers permission requests by policy."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.session_id: str | None = None
        self.chunks: list[str] = []
        self._message_id: str | None = None  # of the last chunk: distinct messages are set apart
        self.mode: str | None = None  # the session's current mode id, as the agent reports it
        self.ran_unasked = False  # under reject: a tool call ran without a permission request
        self._asked: set[str] = set()
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
            text = getattr(content, "text", None)
            if getattr(content, "type", None) == "text" and isinstance(text, str):
                message_id = getattr(update, "message_id", None)
                message_id = message_id if isinstance(message_id, str) else None
                # Chunks of one message join verbatim; a new message starts on a new paragraph.
                if self.chunks and message_id != self._message_id and self.chunks[-1]:
                    self.chunks.append("\n\n")
                self._message_id = message_id
                self.chunks.append(text)
        elif kind in ("tool_call", "tool_call_update"):
            call_id = update.tool_call_id
            tool_kind = getattr(update, "kind", None)
            if isinstance(tool_kind, str):
                self._tool_kinds[call_id] = tool_kind
            status = getattr(update, "status", None)
            if (
                self.policy == "reject"
                and status in ("in_progress", "completed")
                and call_id not in self._asked
                and self._tool_kinds.get(call_id) not in _HARMLESS_KINDS
            ):
                self.ran_unasked = True
        elif kind == "current_mode_update":
            mode = getattr(update, "current_mode_id", None)
            if isinstance(mode, str):
                self.mode = mode

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **_: Any) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        # The request may carry only changed fields; the kind then comes from the earlier tool_call.
        kind = tool_call.kind or self._tool_kinds.get(tool_call.tool_call_id) or "other"
        self._asked.add(tool_call.tool_call_id)
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
