"""What a front end is, and the display that writes a session's events to one.

A :class:`FrontEnd` is where rendered text goes and who answers approvals: the terminal
(:class:`dsh.repl.app.InteractiveApp`), piped stdin (:class:`PlainFrontEnd` over a :class:`StreamSink`),
``-p`` (:class:`dsh.repl.print_output.PrintFrontEnd`) and the JSON-RPC child runtime
(:mod:`dsh.repl.serve`). A :class:`Display` subscribes to a :class:`~dsh.agent_loop.session.Session` and
writes each event, rendered, to its front end: event -> renderer -> front end, one way
(docs/architecture.md, "Front ends over one session").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol, TextIO

from dsh.agent_loop.events import JobNotice
from dsh.agent_loop.plan import current_plan
from dsh.agent_loop.session import Notice, RepairedTurn, Session, SessionUpdate
from dsh.repl.activity import TurnActivity
from dsh.repl.answer_split import ANSWER, AnswerSplit
from dsh.repl.renderer import Renderer
from dsh.repl.sanitize import sanitize
from dsh.repl.styles import terminal_text

if TYPE_CHECKING:
    from dsh.agent_loop.tools.edits import EditRequest
    from dsh.agent_loop.tools.registry import Approval, McpCallRequest

__all__ = ["Display", "FrontEnd", "PlainFrontEnd", "Sink", "StreamSink"]


class Sink(Protocol):
    def write(self, text: str) -> None: ...


class FrontEnd(Protocol):
    """Where a session's rendered text goes, and who answers its approvals."""

    # Keeps an unfinished line aside until its newline, so the renderer may stream it raw and rewrite it.
    rewrites_partial: bool
    can_approve: bool  # someone can answer y / n / a; without it the tools say nobody can

    def write(self, text: str) -> None:
        """Rendered text (dsh's styles as spans); the front end sanitizes it on the way out."""

    def flush(self) -> None:
        """Everything written so far, out now (after a turn's end line, on the way out)."""

    def turn_view(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while a turn runs: the terminal shows its live view and binds Ctrl-C to cancel."""

    async def ask_approval(self, request: str | EditRequest | McpCallRequest) -> Approval | None:
        """A shell command, an edit or an MCP tool call to approve; None when nobody answered (denied)."""

    def wake(self) -> None:
        """A background job settled while no turn runs: let its owner see it now if it is idle."""


@contextlib.asynccontextmanager
async def _no_view() -> AsyncIterator[None]:
    yield


class PlainFrontEnd:
    """Text out, nobody to ask: piped stdin and the tests. Writes go to ``out``."""

    rewrites_partial = False
    can_approve = False

    def __init__(self, out: Sink, *, flush: Callable[[], None] | None = None) -> None:
        self.out = out
        self._flush = flush

    def write(self, text: str) -> None:
        self.out.write(text)

    def flush(self) -> None:
        if self._flush is not None:
            self._flush()

    def turn_view(self) -> contextlib.AbstractAsyncContextManager[None]:
        return _no_view()

    async def ask_approval(self, request: str | EditRequest | McpCallRequest) -> Approval | None:
        # Nobody at the keys (stdin is the prompts): never called, can_approve is False. The tools say so;
        # an MCP tool that asks is denied unless --allow-mcp or approve = "auto" (docs/mcp.md).
        return None

    def wake(self) -> None:
        pass


class StreamSink:
    """Piped and ``-p`` output: plain writes; a closed pipe silences, not crashes.

    Writes are collected and flushed once per event-loop iteration (a long turn streams 100 000s of
    tiny deltas; one ``write(2)`` each costs a second on a terminal), so a reader still sees every
    line as soon as the loop is free. :meth:`flush` writes out what is collected at once. Outside an
    event loop every write is flushed at once.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.broken = False
        self._pending: list[str] = []
        self._scheduled = False

    def write(self, text: str) -> None:
        if self.broken or not text:
            return
        self._pending.append(terminal_text(text))  # the one sanitizer in front of stdout
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._scheduled = True
        loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Everything written so far, to the stream now."""
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        if self.broken:
            return
        try:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:
                # A character the stream cannot encode is not a closed pipe: write it replaced, go on.
                encoding = self.stream.encoding or "utf-8"
                self.stream.write(text.encode(encoding, "replace").decode(encoding))
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self.broken = True
            try:  # keep the interpreter's final flush from complaining about the dead pipe
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass


class Display:
    """Renders what a session publishes and writes it to a front end.

    With ``answer`` (``-p``) the answer text goes there and everything else to the front end, in the
    order it happened (:class:`~dsh.repl.answer_split.AnswerSplit`); ``answer_markdown``: rendered as Markdown
    (``answer`` is a colour terminal).
    """

    def __init__(self, session: Session, frontend: FrontEnd, renderer: Renderer, *, answer: Sink | None = None,
                 answer_markdown: bool = False) -> None:
        self.session = session
        self.frontend = frontend
        self.renderer = renderer
        self.activity = TurnActivity()  # the live view's toolbar reads it
        self.answer = answer
        self.split = AnswerSplit(renderer, markdown=answer_markdown) if answer is not None else None
        self._last_target: Sink | FrontEnd | None = None  # where the split wrote last
        renderer.plan = lambda: current_plan(session)  # a completed turn's line counts its open items
        session.subscribe(self.show)

    def show(self, update: SessionUpdate) -> None:
        if isinstance(update, Notice):
            self.frontend.write(self.renderer.line(sanitize(update.text)))
            return
        if isinstance(update, RepairedTurn):
            self.frontend.write(self.renderer.resume_notice(update.turn))
            return
        self.activity.on_event(update, time.monotonic())
        if self.split is not None:
            for stream, chunk in self.split.render(update):
                self._write_split(self.answer if stream == ANSWER else self.frontend, chunk)
        else:
            text = self.renderer.render(update)
            if text:
                self.frontend.write(text)
        if isinstance(update, JobNotice) and not self.session.turn_running:
            self.frontend.wake()

    def _write_split(self, target: Sink | FrontEnd | None, chunk: str) -> None:
        assert target is not None
        if target is not self._last_target:  # keep the order across stdout and stderr (2>&1)
            if self._last_target is self.frontend:
                self.frontend.flush()
            elif isinstance(self._last_target, StreamSink):
                self._last_target.flush()
            self._last_target = target
        target.write(chunk)

    def end_turn(self) -> None:
        """A turn or a compaction is over: end its last line (and the answer's, under ``-p``)."""
        self.frontend.write(self.renderer.end_line())
        if self.split is not None and self.answer is not None:
            self.answer.write(self.split.end())

    def say(self, text: str) -> None:
        """Command output: whole lines, each on its own line."""
        for line in text.split("\n"):
            self.frontend.write(self.renderer.line(line))
