"""The ACP SDK side of the ``acp`` provider, typed: imported only when an ACP run starts (the SDK is heavy).

:class:`AcpConnection` makes the requests the run needs on the SDK's ``ClientSideConnection`` and answers
with the SDK's own pydantic models, validated by the SDK (a malformed answer raises
``pydantic.ValidationError``, which :meth:`AcpConnection.fault_of` calls ``malformed``).
:class:`PermissionClient` is the ``Client`` side: message chunks and permission requests, told apart
by the SDK's update classes. :class:`SdkLogGuard` keeps the SDK's root-logger records free of child text.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable

import acp
import anyio
import pydantic
from acp import schema
from acp.connection import StreamDirection, StreamEvent

from dsh.agent_loop.frames import FrameTap
from dsh.agent_loop.process import ManagedProcess
from dsh.agent_loop.subagent.diagnostics import permission_line

__all__ = ["AcpConnection", "PermissionClient", "SdkLogGuard", "install_sdk_log_guard"]

log = logging.getLogger(__name__)

_NOTIFY_TIMEOUT = 1.0
_CLOSE_TIMEOUT = 1.0
# Tool kinds that only look (no change, no command): running them unasked is not worth a warning.
_HARMLESS_KINDS = frozenset({"read", "search", "think"})


def _observer(frames: FrameTap) -> Callable[[StreamEvent], None]:
    """The SDK's stream observer, telling ``frames`` of each message (its size is not known here)."""

    def observe(event: StreamEvent) -> None:
        frames("sent" if event.direction == StreamDirection.OUTGOING else "received", event.message, None)

    return observe


class AcpConnection:
    """One client connection to the agent on ``proc``'s pipes, with the requests of one run."""

    def __init__(self, client: PermissionClient, proc: ManagedProcess, frames: FrameTap | None = None) -> None:
        # The SDK's Client protocol lists every optional method; its router answers method-not-found for
        # the ones a client lacks (acp/router.py looks them up by name): a partial client is expected.
        observers = [_observer(frames)] if frames is not None else None
        self._conn = acp.connect_to_agent(client, proc.stdin, proc.stdout,  # type: ignore[arg-type]
                                          observers=observers)

    async def initialize(self) -> schema.InitializeResponse:
        return await self._conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(),
            client_info=schema.Implementation(name="dsh", version="0.1.0"),
        )

    async def new_session(self, cwd: str) -> schema.NewSessionResponse:
        return await self._conn.new_session(cwd=cwd, mcp_servers=[])

    async def set_mode(self, session_id: str, mode_id: str) -> schema.SetSessionModeResponse | None:
        return await self._conn.set_session_mode(session_id=session_id, mode_id=mode_id)

    async def prompt(self, session_id: str, text: str) -> schema.PromptResponse:
        return await self._conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``, bounded; a failure to tell the agent changes nothing for us."""
        with anyio.move_on_after(_NOTIFY_TIMEOUT), contextlib.suppress(Exception):
            await self._conn.cancel(session_id=session_id)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            try:
                await self._conn.close()
            except Exception as exc:  # the SDK's own cleanup: host log only
                log.debug("acp connection close failed: %s", type(exc).__name__)

    @staticmethod
    def fault_of(exc: BaseException) -> str:
        """The kind of a request's failure: ``error-answer``, ``malformed`` or ``closed``."""
        if isinstance(exc, acp.RequestError):
            return "error-answer"
        if isinstance(exc, pydantic.ValidationError | TypeError | KeyError | AttributeError):
            return "malformed"
        if isinstance(exc, ConnectionError | OSError | EOFError):
            return "closed"
        return "malformed"

    @staticmethod
    def error_code(exc: BaseException | None) -> int | None:
        """The JSON-RPC error code of an error answer (its message and data stay in the cause)."""
        # The SDK builds the error from the wire without checking the code's type.
        return exc.code if isinstance(exc, acp.RequestError) and isinstance(exc.code, int) else None

    @staticmethod
    def error_words(exc: BaseException | None) -> tuple[tuple[str, object], ...]:
        """An error answer's own words (its message and data), for the host side only: never a diagnostic."""
        if not isinstance(exc, acp.RequestError):
            return ()
        message: tuple[tuple[str, object], ...] = (("error message", str(exc)),)
        return message if exc.data is None else (*message, ("error data", exc.data))


class PermissionClient:
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

    async def session_update(self, session_id: str, update: object, **_: object) -> None:
        if self.frozen or (self.session_id is not None and session_id != self.session_id):
            return
        if isinstance(update, schema.AgentMessageChunk):
            if isinstance(update.content, schema.TextContentBlock):
                self._message_chunk(update.content.text, update.message_id)
        elif isinstance(update, schema.ToolCallStart | schema.ToolCallProgress):
            self._tool_call(update.tool_call_id, update.kind, update.status)
        elif isinstance(update, schema.CurrentModeUpdate):
            self.mode = update.current_mode_id

    def _message_chunk(self, text: str, message_id: str | None) -> None:
        # Chunks of one message join verbatim; a new message starts on a new paragraph.
        if self.chunks and message_id != self._message_id and self.chunks[-1]:
            self.chunks.append("\n\n")
        self._message_id = message_id
        self.chunks.append(text)

    def _tool_call(self, call_id: str, kind: str | None, status: str | None) -> None:
        if kind is not None:
            self._tool_kinds[call_id] = kind
        if (
            self.policy == "reject"
            and status in ("in_progress", "completed")
            and call_id not in self._asked
            and self._tool_kinds.get(call_id) not in _HARMLESS_KINDS
        ):
            self.ran_unasked = True

    async def request_permission(
        self, session_id: str, tool_call: schema.ToolCallUpdate, options: list[schema.PermissionOption], **_: object
    ) -> schema.RequestPermissionResponse:
        # The request may carry only changed fields; the kind then comes from the earlier tool_call.
        kind = tool_call.kind or self._tool_kinds.get(tool_call.tool_call_id) or "other"
        self._asked.add(tool_call.tool_call_id)
        if self.cancelling or self.frozen:
            return self._decline(kind)
        wanted = ("allow_once", "allow_always") if self.policy == "allow" else ("reject_once", "reject_always")
        for option_kind in wanted:
            for option in options:
                if option.kind == option_kind:
                    self.last_decision = (kind, "allowed" if self.policy == "allow" else "rejected")
                    return schema.RequestPermissionResponse(
                        outcome=schema.AllowedOutcome(outcome="selected", option_id=option.option_id)
                    )
        return self._decline(kind)  # no option matches the policy: decline to choose

    def _decline(self, kind: str) -> schema.RequestPermissionResponse:
        self.last_decision = (kind, "cancelled")
        return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))

    def permission_fact(self) -> str | None:
        if self.last_decision is None:
            return None
        kind, decision = self.last_decision
        return permission_line(self.policy, kind, decision)


class SdkLogGuard(logging.Filter):
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
    """Attach :class:`SdkLogGuard` to the root logger once (the SDK logs only there)."""
    root = logging.getLogger()
    if any(isinstance(existing, SdkLogGuard) for existing in root.filters):
        return
    root.addFilter(SdkLogGuard(os.path.dirname(os.path.abspath(acp.__file__)) + os.sep))
