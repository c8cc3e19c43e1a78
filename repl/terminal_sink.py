"""The terminal's sink: rendered text written as whole lines above whichever prompt_toolkit application runs.

Its own module because it is the one place that writes to the terminal in the interactive mode, with or
without an application on the screen (the prompt, the turn's live view: repl/app.py); the app only hands it
text and the view to refresh. Every write goes through the one sanitizer (repl/styles.py, ``terminal_text``).
"""

from __future__ import annotations

import asyncio

from prompt_toolkit.application import Application, get_app_or_none
from prompt_toolkit.output import Output

from dsh.repl.styles import Rewrite, terminal_text

__all__ = ["TerminalSink"]

_LIVE_LIMIT = 8000  # characters of an unfinished line shown in the live view (its tail)
# Complete lines are written above the live view at most this often: each write erases and redraws
# the view, and a fast stream completes lines on every network read.
_COMMIT_INTERVAL = 0.03


class TerminalSink:
    """Receives rendered text; writes whole lines above any running application.

    With no application running, text goes straight to the terminal. While one runs, complete
    lines are batched for up to ``_COMMIT_INTERVAL`` seconds and written by :meth:`_write_above` (which
    erases the application, writes, and redraws it below); an unfinished line is kept in
    :attr:`partial` for the live view to show.
    """

    def __init__(self, output: Output) -> None:
        self._output = output
        self.partial = ""
        self._pending: list[str] = []
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self.view: Application[None] | None = None  # the turn view to refresh when partial changes
        self._line_open = False  # the last direct write left a line unfinished on the screen
        # prompt_toolkit turns autowrap off while it draws and leaves it off: once it has run, each direct
        # write turns it on again (before, the terminal's own setting stands and nothing is added).
        self.prompt_toolkit_ran = False

    def _write_now(self, text: str) -> None:
        try:
            if self.prompt_toolkit_ran:
                self._output.enable_autowrap()
            self._output.write_raw(text)
            self._output.flush()
        except OSError:
            pass  # a vanished terminal must not turn into a traceback

    @staticmethod
    def _app_running() -> bool:
        app = get_app_or_none()
        return app is not None and app.is_running

    # The renderer may stream an unfinished answer line raw and rewrite it once its newline arrives
    # (markdown): this sink keeps that line aside in ``partial`` until then, so it can.
    rewrites_partial = True

    def write(self, text: str) -> None:
        if not text:
            return
        rewrite = isinstance(text, Rewrite)
        text = terminal_text(text)  # the one sanitizer: nothing reaches the terminal without it
        if rewrite:
            self.partial = ""  # the rewrite carries that line again, rendered
        if not self._app_running() and not (self._pending or self._scheduled):
            if rewrite and self._line_open:
                text = "\r\x1b[K" + text  # no live view held the line: it went out raw; redraw it (dsh's bytes)
            self._write_now(self.partial + text)
            self._line_open = not text.endswith("\n")
            self.partial = ""
            return
        self._line_open = False
        head, newline, tail = (self.partial + text).rpartition("\n")
        if newline:
            self._commit(head + "\n")
            self.partial = tail
        else:
            self.partial = tail
        if self.view is not None and self.view.is_running:
            self.view.invalidate()

    def _commit(self, text: str) -> None:
        self._pending.append(text)
        if not self._scheduled:
            self._scheduled = True
            self._timer = asyncio.get_running_loop().call_later(_COMMIT_INTERVAL, self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()  # when settle() flushes early
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        app = get_app_or_none()
        if app is None or not app.is_running:
            self._write_now(text)
        else:
            self._write_above(app, text)

    def _write_above(self, app: Application[object], text: str) -> None:
        """Erase the running application, write ``text``, and draw the application again below it.

        What prompt_toolkit's ``run_in_terminal`` does, but with the input left in raw mode: that puts the
        terminal in cooked mode while it writes, and a cooked terminal's line discipline swallows a key
        typed meanwhile (Ctrl-D on an empty line becomes an end of file that no one reads, and is lost).
        """
        app.renderer.erase()  # also resets the renderer: the next draw starts where the view started
        self._write_now(text)
        app._request_absolute_cursor_position()  # as run_in_terminal does: the rows below may have changed
        app._redraw()

    async def settle(self) -> None:
        """Write every committed line to the screen now."""
        if self._scheduled or self._pending:
            self._flush()

    async def drain(self) -> None:
        """After the live view closed: everything, the unfinished line included, to the screen."""
        await self.settle()
        if self.partial:
            self._write_now(self.partial)
            self.partial = ""

    def live_text(self) -> str:
        text = self.partial
        return text if len(text) <= _LIVE_LIMIT else "…" + text[-_LIVE_LIMIT:]
