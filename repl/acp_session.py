"""One ACP session of ``dsh acp``: a dsh :class:`~dsh.agent_loop.session.Session` with the ACP client as its
front end (docs/editors.md, "How dsh acp maps turns").

- :class:`AcpFrontEnd` answers the session's approvals with ``session/request_permission`` (allow once /
  allow always / reject once; no "always" for a git directory, and a client's "always" to a question that
  did not offer it counts once); a rejection, a cancelled request, an option not offered or a client that
  cannot answer denies.
- :class:`ClientFiles` is the :class:`~dsh.agent_loop.tools.FileAccess` over ``fs/read_text_file`` and
  ``fs/write_text_file``, used when the client advertises both (with one alone, a read and the write that
  follows it would see different files: dsh's own tools then do both).
- :class:`AcpSession` sends the session's events as ``session/update`` notifications, in order, through the
  session's update pump (agent_loop/update_pump.py), and runs each prompt to its stop reason or its JSON-RPC
  error.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import acp
import anyio
import anyio.abc
from acp import schema

from dsh.agent_loop.events import Event
from dsh.agent_loop.reasons import Failed
from dsh.agent_loop.session import Notice, Session, SessionUpdate, StartupError
from dsh.agent_loop.subagent.diagnostics import error_code_text
from dsh.agent_loop.tools import Approval
from dsh.agent_loop.tools.edits import EditRequest
from dsh.agent_loop.tools.registry import McpCallRequest
from dsh.agent_loop.update_pump import UpdatePump
from dsh.llm import Redactor, error_chain
from dsh.repl.acp_updates import TURN_FAILED, Translator, clean, coalesced, history_updates, stop_reason, turn_error

__all__ = ["AcpFrontEnd", "AcpSession", "ClientFiles", "prompt_text"]

log = logging.getLogger(__name__)

_ALLOW_ONCE = schema.PermissionOption(option_id="yes", name="Allow once", kind="allow_once")
_ALLOW_ALWAYS = schema.PermissionOption(option_id="always", name="Always allow", kind="allow_always")
_REJECT = schema.PermissionOption(option_id="no", name="Reject", kind="reject_once")


def prompt_text(blocks: list[Any]) -> str:
    """The prompt's content blocks as the text the model gets: text as is, a resource link as a markdown link,
    an embedded text resource inside ``<context uri="...">``. Images and audio are refused (not advertised)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, schema.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, schema.ResourceContentBlock):
            parts.append(f"[{block.name}]({block.uri})")
        elif isinstance(block, schema.EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, schema.TextResourceContents):
                parts.append(f'<context uri="{resource.uri}">\n{resource.text}\n</context>')
            else:
                parts.append(f"[binary resource {resource.uri} left out: dsh reads text only]")
        else:
            raise acp.RequestError.invalid_params({"prompt": "dsh accepts text, resource links and text resources"})
    return clean("\n".join(parts))


class ClientFiles:
    """Files inside the tree as the editor holds them (its unsaved buffers too), over the ACP connection."""

    def __init__(self, conn: Any, session_id: str) -> None:
        self._conn = conn
        self.session_id = session_id

    async def read_text(self, path: Path) -> str:
        try:
            response = await self._conn.read_text_file(session_id=self.session_id, path=str(path))
        except acp.RequestError as exc:
            refused = exc.code
        else:
            return clean(response.content)
        if not os.path.lexists(path):  # a new file: the edit tools create it
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        raise OSError(_refused("read", path, refused))

    async def write_text(self, path: Path, text: str) -> None:
        try:
            await self._conn.write_text_file(session_id=self.session_id, path=str(path), content=text)
        except acp.RequestError as exc:
            refused = exc.code
        else:
            return
        raise OSError(_refused("write", path, refused))


def _refused(verb: str, path: Path, code: int) -> str:
    # Raised outside the handler, so no chain carries the editor's own message (acpx answers a refused read
    # "Internal error", twice): the model reads the code, the closed fact.
    return f"the editor could not {verb} {path} ({error_code_text(code)})"


class AcpFrontEnd:
    """The ACP client as a dsh front end: it sees no rendered text (updates carry the events) and answers
    approvals. "Always" for an edit is kept here, under the edit tools' own rule (not outside the tree, never a
    git directory), so that every edit still hands over its diff; for a shell command or an MCP tool the tool
    keeps it, as the REPL's ``a``."""

    rewrites_partial = False
    can_approve = True

    def __init__(self, owner: AcpSession) -> None:
        self._owner = owner
        self._always_edits: set[str] = set()

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    @contextlib.asynccontextmanager
    async def _view(self) -> AsyncIterator[None]:
        yield

    def turn_view(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._view()

    def wake(self) -> None:
        pass

    async def ask_approval(self, request: str | EditRequest | McpCallRequest) -> Approval | None:
        owner = self._owner
        call = owner.translator.asking(request)
        edit = request if isinstance(request, EditRequest) else None
        if edit is not None and edit.tool in self._always_edits and not edit.outside and edit.may_always:
            owner.translator.note_edit(call, edit)
            owner.send(owner.translator.approved(call))
            return "yes"
        tool_call = owner.translator.permission_call(call, request)
        always = edit is None or edit.may_always  # a git-directory edit is asked every time
        options = [_ALLOW_ONCE, _ALLOW_ALWAYS, _REJECT] if always else [_ALLOW_ONCE, _REJECT]
        await owner.flushed()  # the tool_call went out before the question about it
        response = await owner.conn.request_permission(session_id=owner.id, tool_call=tool_call, options=options)
        answer = _answer(response.outcome, always)
        if answer is None:
            return None
        owner.send(owner.translator.approved(call))
        if edit is not None and answer == "always":
            self._always_edits.add(edit.tool)
            return "yes"
        return answer


def _answer(outcome: Any, always_offered: bool) -> Approval | None:
    """The client's pick as dsh's answer: ``yes``, ``always`` only when it was offered (a client that answers
    "always" to a question offering once and reject gets once, never remembered), else None: a rejection, a
    cancelled request (a cancelled turn) or an option dsh did not offer is a denial."""
    answer = outcome.option_id if isinstance(outcome, schema.AllowedOutcome) else None
    if answer == _ALLOW_ALWAYS.option_id:
        return "always" if always_offered else "yes"
    return "yes" if answer == _ALLOW_ONCE.option_id else None


class AcpSession:
    """One ACP session: its dsh session, the client's connection, the updates pump."""

    def __init__(self, conn: Any, cwd: str, *, sources: Mapping[str, str]) -> None:
        self.conn = conn
        self.cwd = cwd
        self.sources = sources
        self.frontend = AcpFrontEnd(self)
        self.session: Session | None = None
        self.translator = Translator(Redactor(), cwd)
        self._updates: UpdatePump[Any] = UpdatePump()
        self.running = False
        self._scope: anyio.CancelScope | None = None  # the prompt's, for a cancel before its turn started
        self._closing = anyio.Event()  # aclose() was called: run() closes the session
        self._closed = anyio.Event()  # run() has ended, the session closed

    @property
    def id(self) -> str:
        assert self.session is not None and self.session.id is not None
        return self.session.id

    def attach(self, session: Session) -> None:
        self.session = session
        self.translator.redact = Redactor(session.secrets)
        session.pump_updates(self._updates, self._translated)

    def _translated(self, update: SessionUpdate) -> Iterable[Any]:
        if isinstance(update, Notice):  # a session's own line (an MCP server that failed, say): a thought
            redact = Redactor(self.session.secrets) if self.session is not None else None
            return [schema.AgentThoughtChunk(session_update="agent_thought_chunk",
                                             content=acp.text_block(clean(update.text, redact) + "\n"))]
        if isinstance(update, Event):
            return [item for item in self.translator.updates(update) if item is not None]
        return []

    def send(self, update: Any) -> None:
        if update is not None:
            self._updates.send(update)

    async def flushed(self) -> None:
        """Every update queued so far is on the wire."""
        await self._updates.flushed()

    async def _deliver(self, batch: Sequence[Any]) -> None:
        """What queued while the last frame went out, as ``session/update`` notifications (text chunks merged)."""
        try:
            for update in coalesced(batch):
                if self.session is not None and self.session.id is not None:
                    await self.conn.session_update(session_id=self.session.id, update=update)
        except Exception as exc:  # the client is gone or refused the frame: the run goes on, the log says so
            log.warning("could not send a session update: %s", type(exc).__name__)

    async def replay(self) -> None:
        """A loaded session's history, as updates, before ``session/load`` answers."""
        session = self.session
        assert session is not None and session.log is not None
        records = await anyio.to_thread.run_sync(lambda: list(session.log.iter_records()))  # type: ignore[union-attr]
        for update in history_updates(records, Redactor(session.secrets), self.cwd):
            self.send(update)
        await self.flushed()

    async def prompt(self, blocks: list[Any]) -> schema.PromptResponse:
        session = self.session
        assert session is not None
        if self.running:
            raise acp.RequestError.invalid_request({"details": "a turn is already running in this session"})
        text = prompt_text(blocks)
        self.running = True
        self._scope = scope = anyio.CancelScope()
        try:
            with scope:
                self.translator.redact = Redactor(session.secrets)
                reason = await session.run_turn(text)  # the whole turn, its preamble included
        except StartupError as exc:  # the agent could not be built (a locked log, say): the REPL's line
            cause = exc.__cause__ or exc
            raise acp.RequestError(TURN_FAILED, clean(f"dsh: failed to start: {error_chain(cause)}",
                                                      Redactor(session.secrets))) from None
        finally:
            self.running = False
            self._scope = None
        await self.flushed()  # every update of the turn before its answer
        if scope.cancelled_caught:  # cancelled while the turn was being set up (MCP servers starting, say)
            return schema.PromptResponse(stop_reason="cancelled")
        stop = stop_reason(reason)
        if stop is None:
            assert isinstance(reason, Failed)
            message, data = turn_error(reason, session.last_failure, secrets=session.secrets, sources=self.sources)
            raise acp.RequestError(TURN_FAILED, message, data)
        return schema.PromptResponse(stop_reason=stop)

    def cancel(self) -> None:
        session = self.session
        if session is None or not self.running:
            return
        if session.turn_running:
            session.cancel_turn()  # the same cancellation as Ctrl-C: the turn ends ``aborted``
        elif self._scope is not None:
            self._scope.cancel()  # no turn yet (context, MCP servers): nothing started, nothing to end

    async def run(self, session: Session, resume: str | None, *,
                  task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The session's whole life, in one task of the agent's group: the task that opens the session (and
        with it the task groups of its MCP servers and subagent jobs) is the one that closes it. Started once
        the session is open, and the client's MCP servers are starting (an editor draws no prompt to wait for);
        a StartupError reaches the caller of ``start``. Then the updates pump, until :meth:`aclose`."""
        try:
            try:
                await session.start(resume=resume, defer_agent=resume is None)
                await session.open_mcp()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await session.aclose()
                raise
            task_status.started()
            async with anyio.create_task_group() as group:
                group.start_soon(self._updates.run, self._deliver)
                await self._closing.wait()
                group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await session.aclose()
        finally:
            self._updates.close()
            self._closed.set()

    async def aclose(self) -> None:
        """Close the session (its turn ends, its children are reaped) and wait until :meth:`run` has."""
        self._closing.set()
        with anyio.CancelScope(shield=True):
            await self._closed.wait()
