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

import base64
import binascii
import contextlib
import errno
import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from dsh.agent_loop.events import Event, ReasoningDelta, TextDelta
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.image_input import image_from_bytes
from dsh.agent_loop.images import IMAGE_CAP_BYTES, NotAnImage, too_big
from dsh.agent_loop.reasons import Failed
from dsh.agent_loop.session import Notice, Session, SessionUpdate, StartupError
from dsh.agent_loop.subagent.diagnostics import error_code_text
from dsh.agent_loop.tools import Approval
from dsh.agent_loop.tools.edits import EditRequest
from dsh.agent_loop.tools.registry import McpCallRequest
from dsh.agent_loop.update_pump import UpdatePump
from dsh.llm import Image, Redactor, error_chain
from dsh.repl.acp_updates import (
    TURN_FAILED,
    TextChunk,
    Translator,
    clean,
    coalesced,
    history_updates,
    stop_reason,
    text_update,
    turn_error,
)
from dsh.repl.acp_wire import AgentConnection, WireError
from dsh.repl.lazy import module

__all__ = ["AcpFrontEnd", "AcpSession", "ClientFiles", "prompt_text"]

log = logging.getLogger(__name__)

_ALLOW_ONCE = {"optionId": "yes", "name": "Allow once", "kind": "allow_once"}
_ALLOW_ALWAYS = {"optionId": "always", "name": "Always allow", "kind": "allow_always"}
_REJECT = {"optionId": "no", "name": "Reject", "kind": "reject_once"}
_BLOCKS = "dsh accepts text, images, resource links and text resources"
# The base64 of an image at the cap (agent_loop/images.py), and a little: a longer one is refused undecoded.
_MAX_IMAGE_BASE64 = (IMAGE_CAP_BYTES + 2) // 3 * 4 + 4


def prompt_text(blocks: list[Any]) -> tuple[str, list[tuple[str, bytes]]]:
    """The prompt's content blocks as the text the model gets: text as is, a resource link as a markdown link,
    an embedded text resource inside ``<context uri="...">``; and its image blocks, each ``(name, bytes)``
    (checked as images later: :func:`_checked_images`). Audio and what is no content block are refused
    (``-32602``; audio is not advertised), and so is an image whose data is not base64 or is over the cap."""
    parts: list[str] = []
    images: list[tuple[str, bytes]] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        resource = block.get("resource") if kind == "resource" else None
        if kind == "text" and _strings(block, "text"):
            parts.append(block["text"])
        elif kind == "image" and _strings(block, "data"):
            images.append(_image_block(block["data"], f"image {len(images) + 1}"))
        elif kind == "resource_link" and _strings(block, "name", "uri"):
            parts.append(f"[{block['name']}]({block['uri']})")
        elif isinstance(resource, Mapping) and _strings(resource, "uri", "text"):
            parts.append(f'<context uri="{resource["uri"]}">\n{resource["text"]}\n</context>')
        elif isinstance(resource, Mapping) and _strings(resource, "uri", "blob"):
            parts.append(f"[binary resource {resource['uri']} left out: dsh reads text only]")
        else:
            raise WireError.invalid_params({"prompt": _BLOCKS})
    return clean("\n".join(parts)), images


def _image_block(data: str, name: str) -> tuple[str, bytes]:
    if len(data) > _MAX_IMAGE_BASE64:  # what it would decode to, refused as a file of that size is
        raise WireError.invalid_params({"prompt": f"{name}: {too_big(len(data) // 4 * 3)}"})
    try:
        return name, base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise WireError.invalid_params({"prompt": f"{name}: its data is not base64"}) from None


def _checked_images(given: list[tuple[str, bytes]], keep: bool) -> list[Image]:
    """The prompt's images, each checked as a file's is (format, header, pixels; agent_loop/image_input.py)."""
    images: list[Image] = []
    for name, data in given:
        try:
            images.append(image_from_bytes(data, name, keep=keep)[0])
        except NotAnImage as why:
            raise WireError.invalid_params({"prompt": f"{name}: {why}"}) from None
    return images


def _strings(block: Mapping[str, Any], *names: str) -> bool:
    return all(isinstance(block.get(name), str) for name in names)


class ClientFiles:
    """Files inside the tree as the editor holds them (its unsaved buffers too), over the ACP connection."""

    def __init__(self, conn: AgentConnection, session_id: str) -> None:
        self._conn = conn
        self.session_id = session_id

    async def read_text(self, path: Path) -> str:
        try:
            content = await self._conn.read_text_file(self.session_id, str(path))
        except WireError as exc:
            refused = exc.code
        else:
            return clean(content)
        if not os.path.lexists(path):  # a new file: the edit tools create it
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        raise OSError(_refused("read", path, refused))

    async def write_text(self, path: Path, text: str) -> None:
        try:
            await self._conn.write_text_file(self.session_id, str(path), text)
        except WireError as exc:
            refused = exc.code
        else:
            return
        raise OSError(_refused("write", path, refused))


# What a new session's first turn imports (agent_loop/build.py, the project context, the HTTP client).
_AGENT_MODULES = ("anyio._backends._asyncio", "dsh.agent_loop.build", "dsh.agent_loop.context", "httpx",
                  "dsh.llm.http_transport")


def _import_agent_modules() -> None:
    with gc_paused():  # they allocate much and free little: ~100 collection passes, ~5% of their import
        for name in _AGENT_MODULES:
            module(name)


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
        picked = await owner.conn.request_permission(owner.id, tool_call, options)
        answer = _answer(picked, always)
        if answer is None:
            return None
        owner.send(owner.translator.approved(call))
        if edit is not None and answer == "always":
            self._always_edits.add(edit.tool)
            return "yes"
        return answer


def _answer(picked: str | None, always_offered: bool) -> Approval | None:
    """The client's pick (its ``optionId``, None for a cancelled request) as dsh's answer: ``yes``, ``always``
    only when it was offered (a client that answers "always" to a question offering once and reject gets once,
    never remembered), else None: a rejection, a cancelled request (a cancelled turn) or an option dsh did not
    offer is a denial."""
    if picked == _ALLOW_ALWAYS["optionId"]:
        return "always" if always_offered else "yes"
    return "yes" if picked == _ALLOW_ONCE["optionId"] else None


class AcpSession:
    """One ACP session: its dsh session, the client's connection, the updates pump."""

    def __init__(self, conn: AgentConnection, cwd: str, *, sources: Mapping[str, str]) -> None:
        self.conn = conn
        self.cwd = cwd
        self.sources = sources
        self.frontend = AcpFrontEnd(self)
        self.session: Session | None = None
        self.translator = Translator(Redactor(), cwd)
        self._updates: UpdatePump[Any] = UpdatePump()  # update dicts, and TextChunk until coalesced
        self.running = False
        self._scope: anyio.CancelScope | None = None  # the prompt's, for a cancel before its turn started
        self._closing = anyio.Event()  # aclose() was called: run() closes the session
        self._closed = anyio.Event()  # run() has ended, the session closed
        # The last item queued, when it is a TextChunk not yet taken by _deliver: the next delta of its kind joins
        # it rather than crossing the pump as an item of its own.
        self._open: TextChunk | None = None
        self._warmed = anyio.Event()  # a new session's agent modules are in (:meth:`_warm`), or it was not needed

    @property
    def id(self) -> str:
        assert self.session is not None and self.session.id is not None
        return self.session.id

    def attach(self, session: Session) -> None:
        self.session = session
        self.translator.redact = Redactor(session.secrets)
        session.pump_updates(self._updates, self._translated)

    def _translated(self, update: SessionUpdate) -> Iterable[Any]:
        kind = type(update)
        if kind is TextDelta or kind is ReasoningDelta:  # the stream's bulk, one per delta: the shortest way
            text = update.text  # type: ignore[union-attr]  # narrowed by its type, above
            thought = kind is ReasoningDelta
            if not text:
                return ()
            if self._open is not None and self._open.thought == thought:
                self._open.more.append(text)  # still queued, the last item: no item of its own
                return ()
            self._open = TextChunk(thought, text)
            return (self._open,)
        self._open = None
        if isinstance(update, Notice):  # a session's own line (an MCP server that failed, say): a thought
            redact = Redactor(self.session.secrets) if self.session is not None else None
            return [text_update("agent_thought_chunk", clean(update.text, redact) + "\n")]
        if isinstance(update, Event):
            return [item for item in self.translator.updates(update) if item is not None]
        return []

    def send(self, update: Any) -> None:
        if update is not None:
            self._open = None
            self._updates.send(update)

    async def flushed(self) -> None:
        """Every update queued so far is on the wire."""
        await self._updates.flushed()

    async def _deliver(self, batch: Sequence[Any]) -> None:
        """What queued while the last frame went out, as ``session/update`` notifications (text chunks merged)."""
        self._open = None  # taken: a delta from now on is a chunk of its own (coalesced reads them all now)
        try:
            for update in coalesced(batch):
                if self.session is not None and self.session.id is not None:
                    await self.conn.session_update(self.session.id, update)
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

    async def prompt(self, blocks: list[Any]) -> dict[str, Any]:
        """One turn: the ``session/prompt`` answer (its stop reason), or :class:`WireError` for a failed one."""
        session = self.session
        assert session is not None
        if self.running:
            raise WireError.invalid_request({"details": "a turn is already running in this session"})
        text, given = prompt_text(blocks)
        self.running = True
        self._scope = scope = anyio.CancelScope()
        try:
            with scope:
                self.translator.redact = Redactor(session.secrets)
                await self._warmed.wait()  # the modules the turn builds its agent with: no import in two threads
                images = _checked_images(given, session.ensure_agent().image_rules.keep) if given else []
                reason = await session.run_turn(text, images=images)  # the whole turn, its preamble included
        except StartupError as exc:  # the agent could not be built (a locked log, say): the REPL's line
            cause = exc.__cause__ or exc
            raise WireError(TURN_FAILED, clean(f"dsh: failed to start: {error_chain(cause)}",
                                               Redactor(session.secrets))) from None
        finally:
            self.running = False
            self._scope = None
        await self.flushed()  # every update of the turn before its answer
        if scope.cancelled_caught:  # cancelled while the turn was being set up (MCP servers starting, say)
            return {"stopReason": "cancelled"}
        stop = stop_reason(reason)
        if stop is None:
            assert isinstance(reason, Failed)
            message, data = turn_error(reason, session.last_failure, secrets=session.secrets, sources=self.sources)
            raise WireError(TURN_FAILED, message, data)
        return {"stopReason": stop}

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
        a StartupError reaches the caller of ``start``. Then the updates pump, until :meth:`aclose`.

        The whole life is shielded, so that closing is never cut short, and no scope is entered between the
        session's opening and its closing: the task groups it opened (its subagent jobs') close while theirs
        is the task's current scope, as anyio requires. It ends when :meth:`aclose` is called, which the agent
        does for every session as it closes."""
        with anyio.CancelScope(shield=True):
            try:
                try:
                    await session.start(resume=resume, defer_agent=resume is None)
                    await session.open_mcp()
                except BaseException:
                    await session.aclose()
                    raise
                task_status.started()
                async with anyio.create_task_group() as group:
                    group.start_soon(self._updates.run, self._deliver)
                    if resume is None:
                        group.start_soon(self._warm, session)
                    else:
                        self._warmed.set()  # a resumed session's agent is built by start()
                    await self._closing.wait()
                    group.cancel_scope.cancel()
                await session.aclose()
            finally:
                self._updates.close()
                self._warmed.set()
                self._closed.set()

    async def _warm(self, session: Session) -> None:
        """A new session's agent, built while the editor shows the session and its user types: the modules its
        first turn needs (the agent, its tools, the HTTP client) imported in a worker thread, as the REPL does
        behind its first prompt (docs/architecture.md, "Start-up and lazy imports"). A failure is the first turn's
        to report: it builds the agent again."""
        try:
            with contextlib.suppress(Exception):
                await anyio.to_thread.run_sync(_import_agent_modules)
                session.ensure_agent()
        finally:
            self._warmed.set()

    async def aclose(self) -> None:
        """Close the session (its turn ends, its children are reaped) and wait until :meth:`run` has."""
        self._closing.set()
        with anyio.CancelScope(shield=True):
            await self._closed.wait()
