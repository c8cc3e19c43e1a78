"""The first prompt, drawn before prompt_toolkit, asyncio and the agent's modules are imported.

Importing those takes longer than starting Python itself, so the interactive mode writes its banner
and ``> `` first (echo and line editing off, so keys typed meanwhile wait in the terminal unshown)
and prompt_toolkit takes over the same line once it is loaded: :meth:`FirstPrompt.take_over` turns
echo back on just before prompt_toolkit reads the typeahead and switches to raw mode, and moves the
cursor to the line's start, where prompt_toolkit draws the same prompt over it. If start-up ends
before that (Ctrl-C, Ctrl-\\, SIGTERM, SIGHUP, an error), :meth:`FirstPrompt.abandon` erases the prompt
line and gives the terminal back as it was. docs/architecture.md, "Start-up and lazy imports".

Every signal that ends dsh ends it through the code that restores the terminal, with 128 + its number
(:data:`ENDING_SIGNALS`): here while the early prompt owns the terminal, and in dsh.repl.app once
prompt_toolkit does. Their handling is set here whatever dsh inherited: a runner may start dsh with
SIGINT and SIGQUIT ignored (a non-interactive shell's background job), and the user's keys must still work.

Only ``select``, ``signal``, ``sys``, ``termios`` and dsh's sanitizer are imported here (``typing`` is in already).
"""

from __future__ import annotations

import select
import signal
import sys
import termios
from typing import TYPE_CHECKING, Any

from dsh.repl.sanitize import sanitize

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["ENDING_SIGNALS", "PROMPT", "FirstPrompt", "banner_line", "ending_status", "typed_ahead"]

PROMPT = "> "  # what prompt_toolkit draws over it (dsh.repl.app, InteractiveApp._read_line)
_IFLAG, _LFLAG = 0, 3  # in termios's attribute list: iflag, oflag, cflag, lflag, ...
_ERASE_LINE = "\r\x1b[K"
# Signals whose default action would end dsh with the terminal as dsh set it: a kill, a hangup (the terminal
# closed, or `kill -HUP`), Ctrl-\ (a quit, and a core dump, by default). SIGINT is Ctrl-C: KeyboardInterrupt.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_HANDLED = (signal.SIGINT, *ENDING_SIGNALS)


def ending_status(signum: int) -> int:
    """dsh's exit status when an ending signal ends it: the shell's convention for a death by that signal."""
    return 128 + signum


def typed_ahead(fd: int = 0) -> bool:
    """Keys wait unread on the terminal ``fd`` (typed at the early prompt, for prompt_toolkit to read and draw)."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def banner_line(version: str, model: str, endpoint: str, session_id: str) -> str:
    """The interactive REPL's first line for a new session (the configured endpoint's banner: dsh.repl.endpoint)."""
    return f"dsh {version} · {model} · {endpoint} · session {session_id} · /help · Ctrl-D exits"


class FirstPrompt:
    """The banner and ``> `` on the terminal, echo off, until prompt_toolkit takes the line over.

    Made before it is drawn, so that whoever calls :meth:`draw` can call :meth:`abandon` in a ``finally``
    that covers the draw itself (a Ctrl-C may land anywhere in it).
    """

    def __init__(self, banner: str, session_id: str) -> None:
        self.banner = banner
        self.session_id = session_id  # the new session the banner names (Session.start uses it)
        self._fd = 0
        self._saved: list[Any] | None = None
        self._owned = False  # the terminal is switched and the line ours (not taken over, not abandoned)
        self._previous: dict[int, Any] = {}  # each handled signal's handler before draw()

    def draw(self) -> bool:
        """Echo and line editing off, the banner and the prompt written; False (nothing done) if stdin is not
        a terminal."""
        try:
            self._saved = termios.tcgetattr(self._fd)
        except termios.error:
            return False
        self._owned = True
        self._previous = {signum: signal.getsignal(signum) for signum in _HANDLED}
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited ignored
        for signum in ENDING_SIGNALS:
            signal.signal(signum, self._on_ending_signal)
        try:
            termios.tcsetattr(self._fd, termios.TCSANOW, _quiet(self._saved))
        except termios.error:
            self._release()
            return False
        return _write(sanitize(self.banner) + "\n" + PROMPT)

    def _on_ending_signal(self, signum: int, frame: FrameType | None) -> None:
        # The default action would leave the terminal without echo; unwind through abandon() instead.
        raise SystemExit(ending_status(signum))

    def _handler(self, signum: int) -> Any:
        """What draw() set for ``signum``."""
        return signal.default_int_handler if signum == signal.SIGINT else self._on_ending_signal

    def _release(self) -> bool:
        """Echo as it was, the signal handlers as they were (those another has not replaced since: prompt_toolkit's
        loop sets its own before it takes over); False if done before."""
        if not self._owned or self._saved is None:
            return False
        self._owned = False
        try:
            termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)  # TCSANOW: the typeahead stays queued
        except termios.error:
            pass
        for signum, previous in self._previous.items():  # after: a signal meanwhile still unwinds through here
            if signal.getsignal(signum) == self._handler(signum):
                signal.signal(signum, previous)
        return True

    def take_over(self) -> None:
        """prompt_toolkit draws next: echo back on (its raw mode saves and restores the terminal as found), the
        cursor to the prompt line's start, where it draws the same prompt. Later calls do nothing."""
        if self._release():
            _write("\r")

    def abandon(self) -> None:
        """Start-up ended before prompt_toolkit drew: the prompt line erased, the terminal as it was."""
        if self._release():
            _write(_ERASE_LINE)


def _quiet(attrs: list[Any]) -> list[Any]:
    """Keys typed from now on are queued byte for byte, unshown, for prompt_toolkit to read: no echo, and no
    line editing (a Ctrl-D or Ctrl-V would be taken by the terminal, Enter turned into Ctrl-J) as in
    prompt_toolkit's raw mode; but Ctrl-C still interrupts start-up."""
    quiet = list(attrs)
    quiet[_IFLAG] &= ~(termios.ICRNL | termios.INLCR | termios.IGNCR)
    quiet[_LFLAG] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN)
    return quiet


def _write(text: str) -> bool:
    stream = sys.__stdout__  # the terminal itself, also once patch_stdout has replaced sys.stdout
    if stream is None:
        return False
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        return False
    return True
