"""``-p``'s answer split: the answer text to stdout, everything else to stderr, so a script reads the answer alone."""

from __future__ import annotations

from dsh.agent_loop.events import Event, LlmContinue, ReasoningDelta, StreamKeepAlive, TextDelta, TurnStart
from dsh.repl.renderer import Renderer

__all__ = ["ANSWER", "REST", "AnswerSplit"]

ANSWER = "answer"  # AnswerSplit: the chunk belongs on stdout
REST = "rest"  # AnswerSplit: the chunk belongs on stderr


class AnswerSplit:
    """``-p``: the answer text apart from everything else, so a script reads the answer alone.

    :meth:`render` returns the event's output as ``(stream, text)`` chunks in the order they must be
    written: the text deltas to :data:`ANSWER` (stdout), verbatim, or rendered as Markdown when stdout is
    a colour terminal; every other event rendered by
    ``renderer`` to :data:`REST` (stderr). No ``[main turn N]`` header on either stream (``-p`` runs one
    turn). When both streams are one terminal (``2>&1``), neither may glue onto the other's unfinished
    line: a stream that is mid-line gets its line break before the other one writes.
    """

    def __init__(self, renderer: Renderer, *, markdown: bool = False) -> None:
        """``markdown``: stdout is a colour terminal, so the answer is rendered as Markdown, each line when
        its newline arrives (docs/markdown.md); otherwise it goes out verbatim, as it streams."""
        self.renderer = renderer
        # The answer's own renderer: its unfinished line is held until its newline (or until anything else
        # is shown, or the turn ends), so what reaches stdout is whole rendered lines.
        self._answer = Renderer(color=True, secrets=renderer.secrets, markdown="lines") if markdown else None
        self._mid = False  # the answer stream's cursor is not at a line start
        self._gap = False  # a step or tool ran since the last text: the next text starts a new line

    def render(self, event: Event) -> list[tuple[str, str]]:
        match event:
            case TextDelta(text=text):
                if not text:
                    return []
                prefix = "\n" if self._gap and self._mid else ""
                if self._answer is not None:
                    if self._gap:
                        prefix = self._answer.end_line()  # a held line ends where the step or tool ran
                    text = self._answer.render(event)
                    self._gap = False
                    if not (prefix or text):
                        return []
                else:
                    self._gap, self._mid = False, not text.endswith("\n")
                if self.renderer.at_line_start:
                    return [(ANSWER, prefix + text)]
                return [(REST, self.renderer.end_line()), (ANSWER, prefix + text)]
            case TurnStart():
                self._gap = True
                return []
            case LlmContinue():
                # The answer goes on where it was cut: a piped stdout gets it byte for byte, never a line break
                # of ours (docs/scripting.md); on a terminal the line sits between the answer's lines.
                rest = self.renderer.render(event)
                held = self._answer.end_line() if self._answer is not None else ""
                return [(ANSWER, held), (REST, rest)] if held else [(REST, rest)]
            case ReasoningDelta() | StreamKeepAlive():
                pass
            case _:
                self._gap = True
        rest = self.renderer.render(event)
        if not rest:
            return []
        held = self._answer.end_line() if self._answer is not None else ""
        if held:
            return [(ANSWER, held), (REST, rest)]
        if self._mid:
            self._mid = False
            return [(ANSWER, "\n"), (REST, rest)]
        return [(REST, rest)]

    def end(self) -> str:
        """The answer's last line ended, once the turn is over."""
        if self._answer is not None:
            return self._answer.end_line()
        mid, self._mid = self._mid, False
        return "\n" if mid else ""
