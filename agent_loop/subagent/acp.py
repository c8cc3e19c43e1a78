"""The ACP subagent provider: a configured Agent Client Protocol agent driven over stdio.

One run = spawn the configured command as a :class:`ManagedProcess`, ``initialize``, ``session/new``,
one ``session/prompt``; the output is the concatenated agent message chunks. The official SDK
(``agent-client-protocol``, ``import acp``) speaks the protocol on our own streams; everything that
touches it is in :mod:`~dsh.agent_loop.subagent._acp_sdk`, typed by the SDK's own models and imported
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

``agent-error`` carries the error's integer code (``error code: <n>``, named for the codes the protocols
define); its message and data stay host-side (the run's record for ``/why``, and dsh.log). Under
``permission = "reject"`` a session that advertises modes is put into one that asks (``mode`` in the
table chooses explicitly); tool calls that still run without a permission request give the run a
host-side warning line (:func:`~dsh.agent_loop.subagent.diagnostics.mode_warning`).

A child that dies while a request is in flight is classified by its observed exit (waited for,
bounded), not by the transport error that usually arrives first. The host log gets the same facts
plus the cause's exception *type names*; the agent's own words (an error's message and data, the last
lines of its stderr) only in the one masked, bounded record of a failed run (:mod:`~dsh.agent_loop.subagent.run`).
The SDK's own root-logger records are sanitized (:func:`~dsh.agent_loop.subagent._acp_sdk.install_sdk_log_guard`).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from dsh.agent_loop.process import DEFAULT_EOF_GRACE, DEFAULT_TERM_GRACE, ManagedProcess, ProcessStartError
from dsh.agent_loop.subagent import ConfigTable, ParentContext, SubagentConfigError, diagnostics
from dsh.agent_loop.subagent.diagnostics import Failure, mode_warning
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.run import ChildExited, Outcome, Provider, Run, before_exit, configured

if TYPE_CHECKING:  # the SDK loads only when a run starts (AcpRun.execute)
    from acp.schema import SessionModeState

    from dsh.agent_loop.subagent._acp_sdk import AcpConnection, PermissionClient

__all__ = [
    "AUTH_REQUIRED",
    "DEFAULT_STARTUP_TIMEOUT",
    "PERMISSION_POLICIES",
    "AcpInitializeRun",
    "AcpRun",
    "AcpSettings",
    "Category",
    "Stage",
    "from_config",
]

log = logging.getLogger(__name__)

PERMISSION_POLICIES = ("allow", "reject")
DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_EXIT_WAIT = 2.0  # how long a transport failure waits for the child's exit to classify it
_ANSWER_AFTER_EXIT_GRACE = 0.5  # a response written just before exit is still in the pipe
_Answer = TypeVar("_Answer")  # what one SDK request answers with (the SDK's own pydantic model)


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
    table = ConfigTable.checked(name, config, _CONFIG_KEYS)
    permission = table.choice("permission", "reject", frozenset(PERMISSION_POLICIES))
    return AcpSettings(
        command=tuple(table.command()),
        env=table.env(),
        permission=permission,
        startup_timeout=table.seconds("startup_timeout", DEFAULT_STARTUP_TIMEOUT),
        prompt_timeout=table.number("prompt_timeout"),
        eof_grace=table.seconds("eof_grace", DEFAULT_EOF_GRACE),
        term_grace=table.seconds("term_grace", DEFAULT_TERM_GRACE),
        exit_wait=table.seconds("exit_wait", DEFAULT_EXIT_WAIT),
        mode=table.string("mode"),
    )


# -- one run ------------------------------------------------------------------------------------------


class AcpRun(Run[AcpSettings]):
    """Spawn, ``initialize``, ``session/new``, one ``session/prompt``; then the teardown ladder."""

    configuration = Failure(Stage.INITIALIZE, Category.CONFIGURATION)

    def __init__(self, provider: Provider[AcpSettings], request: SubagentRequest) -> None:
        super().__init__(provider, request)
        self._client: PermissionClient | None = None  # once the SDK is loaded

    def partial_output(self) -> str:
        return "".join(self._client.chunks) if self._client is not None else ""

    async def execute(self) -> Outcome:
        try:
            from dsh.agent_loop.subagent._acp_sdk import (  # heavy SDK: only when a run starts (docs/architecture.md)
                AcpConnection,
                PermissionClient,
                install_sdk_log_guard,
            )
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
        self.process = proc  # a failed run keeps the last lines of its stderr host-side
        self._client = PermissionClient(settings.permission)
        conn: AcpConnection | None = None
        try:
            conn = AcpConnection(self._client, proc, self.frame_tap())
            outcome = await self._session(proc, conn, self._client, cwd)
        finally:
            with anyio.CancelScope(shield=True):
                teardown = await proc.terminate()
                if conn is not None:
                    await conn.close()
            log.info("acp subagent %s: teardown tier %s, exit %s",
                     diagnostics.safe_token(self.name), teardown.tier, teardown.exit_status)  # fmt: skip
        if teardown.tier == "unreaped" and outcome.failure is not None:
            outcome = replace(outcome, teardown=Failure(Stage.TEARDOWN, Category.PROCESS_UNREAPED))
        return outcome

    async def _session(self, proc: ManagedProcess, conn: AcpConnection, client: PermissionClient, cwd: str) -> Outcome:
        settings = self.settings
        answer = await self._call(proc, conn, conn.initialize, Stage.INITIALIZE, settings.startup_timeout)
        if isinstance(answer, Failure):
            return Outcome("error", failure=answer)
        session = await self._call(
            proc, conn, lambda: conn.new_session(cwd), Stage.NEW_SESSION, settings.startup_timeout
        )
        if isinstance(session, Failure):
            return Outcome("error", failure=session)
        session_id = session.session_id
        if not session_id.strip():
            return Outcome("error", failure=Failure(Stage.NEW_SESSION, Category.PROTOCOL))
        client.session_id = session_id
        chosen = await self._choose_mode(proc, conn, client, session_id, session.modes)
        if isinstance(chosen, Failure):
            return Outcome("error", failure=chosen)
        try:
            response = await self._call(
                proc, conn, lambda: conn.prompt(session_id, self.request.prompt), Stage.PROMPT, settings.prompt_timeout
            )
        except anyio.get_cancelled_exc_class():
            # Local cancellation: answer any further permission request "cancelled", tell the agent.
            client.cancelling = client.frozen = True
            with anyio.CancelScope(shield=True):
                await conn.cancel(session_id)
            raise
        except Exception as exc:  # a bug of ours or the SDK's: still a settled, safe result
            response = Failure(Stage.PROMPT, Category.UNKNOWN, cause=exc)
        client.frozen = True
        if isinstance(response, Failure):
            if response.category is Category.TIMEOUT:
                await conn.cancel(session_id)
            outcome = Outcome("error", self.partial_output(), response, note=client.permission_fact())
        else:
            outcome = self._from_stop_reason(response.stop_reason, client)
        if client.ran_unasked:
            outcome = replace(outcome, warning=mode_warning(self.name, client.mode))
        return outcome

    async def _choose_mode(
        self, proc: ManagedProcess, conn: AcpConnection, client: PermissionClient, session_id: str,
        modes: SessionModeState | None,
    ) -> Failure | None:  # fmt: skip
        """Put the session in the configured mode, or under ``reject`` in one that asks (docs/subagents.md)."""
        wanted = self.settings.mode
        client.mode = modes.current_mode_id if modes is not None else None
        if wanted is not None:
            if modes is None or wanted not in (m.id for m in modes.available_modes):
                return Failure(Stage.NEW_SESSION, Category.CONFIGURATION)
        elif client.policy == "reject":
            wanted = _asking_mode(modes)
        if wanted is None or wanted == client.mode:
            return None
        mode_id = wanted
        answer = await self._call(
            proc, conn, lambda: conn.set_mode(session_id, mode_id), Stage.NEW_SESSION, self.settings.startup_timeout
        )
        if isinstance(answer, Failure):
            return answer
        client.mode = wanted
        return None

    def _from_stop_reason(self, stop_reason: str, client: PermissionClient) -> Outcome:
        output, permission = self.partial_output(), client.permission_fact()
        shared = _STOP_REASONS.get(stop_reason)
        if shared == "completed":
            return Outcome("completed", output)
        if shared is not None:  # max-tokens, refusal, remote aborted: the stop reason says it all
            return Outcome(shared, output, note=permission)
        if stop_reason == "max_turn_requests":
            failure = Failure(Stage.PROMPT, Category.REMOTE_LIMIT, stop_reason="max_turn_requests")
            return Outcome("error", output, failure, note=permission)
        return Outcome("error", output, Failure(Stage.PROMPT, Category.UNKNOWN), note=permission)

    async def _call(
        self, proc: ManagedProcess, conn: AcpConnection, request: Callable[[], Awaitable[_Answer]], stage: Stage,
        timeout: float | None,
    ) -> _Answer | Failure:  # fmt: skip
        """One SDK request while watching the child: its answer, or the :class:`Failure` it came to."""
        cause: Exception | None = None
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            try:
                return await before_exit(proc, request, _ANSWER_AFTER_EXIT_GRACE)
            except ChildExited:
                pass
            except Exception as exc:  # classified below, by type
                cause = exc
        # No answer: the deadline passed, the child died without one, or the request failed.
        fault = conn.fault_of(cause) if cause is not None else "timeout"
        if fault == "closed" or proc.exited:
            # Classify by the observed exit, not by the transport error that usually arrives first.
            status = proc.exit_status or await proc.wait_exit(self.settings.exit_wait)
            if status is not None:
                return Failure(_EXIT_STAGE[stage], Category.PROCESS_EXIT, exit_status=status, cause=cause)
        category = _CATEGORY[stage][fault]
        if category is not Category.AGENT_ERROR:
            return Failure(stage, category, cause=cause)
        return Failure(stage, category, error_code=conn.error_code(cause), cause=cause, words=conn.error_words(cause))


AUTH_REQUIRED = -32000  # ACP's "authentication required" error code


class AcpInitializeRun(AcpRun):
    """Spawn, ``initialize`` and ``session/new`` (never a prompt), then the same teardown: ``dsh doctor``'s
    check of an ACP subagent.

    Failures are the run's own (same stages, categories and lines). Once ``initialize`` answered,
    :attr:`agent_info` holds the ``(name, version)`` the agent sent and :attr:`auth_methods` the ``(id,
    name)`` of each authentication method it advertised (child text: the caller sanitizes it);
    :attr:`auth_required` says the agent answered either request with ``-32000``.
    """

    agent_info: tuple[str, str] | None = None
    auth_methods: tuple[tuple[str, str], ...] = ()
    auth_required = False

    async def _session(self, proc: ManagedProcess, conn: AcpConnection, client: PermissionClient, cwd: str) -> Outcome:
        timeout = self.settings.startup_timeout
        answer = await self._call(proc, conn, conn.initialize, Stage.INITIALIZE, timeout)
        if isinstance(answer, Failure):
            return self._failed(conn, answer)
        info = answer.agent_info
        self.agent_info = (info.name, info.version) if info is not None else ("", "")
        self.auth_methods = tuple((method.id, method.name) for method in answer.auth_methods or ())
        session = await self._call(proc, conn, lambda: conn.new_session(cwd), Stage.NEW_SESSION, timeout)
        if isinstance(session, Failure):
            return self._failed(conn, session)
        return Outcome("completed")

    def _failed(self, conn: AcpConnection, failure: Failure) -> Outcome:
        # The code of any error answer (at initialize the line shows none: its category is transport).
        self.auth_required = conn.error_code(failure.cause) == AUTH_REQUIRED
        return Outcome("error", failure=failure)


# Mode ids that ask before acting (claude-agent-acp's "default" is "Always ask before making changes").
_ASKING_MODE_IDS = ("default", "ask", "manual", "read-only")


def _asking_mode(modes: SessionModeState | None) -> str | None:
    """The advertised mode to use under ``reject``: a known asking id, else one described as asking."""
    available = modes.available_modes if modes is not None else []
    for known in _ASKING_MODE_IDS:
        for mode in available:
            if mode.id.lower() == known:
                return mode.id
    for mode in available:
        if mode.description is not None and " ask" in f" {mode.description.lower()}":
            return mode.id
    return None


def _resolve_workspace(cwd: object) -> str | None:
    if not isinstance(cwd, str) or not cwd:
        return None
    path = os.path.abspath(cwd)
    return path if os.path.isdir(path) else None
