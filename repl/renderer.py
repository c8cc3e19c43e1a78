"""Events -> terminal text. Pure: no I/O, no clock, no terminal queries.

The front end feeds every agent event to :meth:`Renderer.render` and writes what comes back. The renderer
remembers only where the cursor is on the current line, so a status line never glues onto streamed text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from dsh.agent_loop.cache_watch import drop_words
from dsh.agent_loop.continuation import continue_words
from dsh.agent_loop.events import (
    CacheDrop,
    ContextCompacted,
    Event,
    JobNotice,
    LlmContinue,
    LlmRetry,
    ModelSet,
    PlanUpdate,
    ReasoningDelta,
    ShellRun,
    StreamKeepAlive,
    TextDelta,
    ToolCallStart,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from dsh.agent_loop.plan import Plan, plan_lines
from dsh.agent_loop.reasons import EndReason, Interrupted
from dsh.llm import ErrorCode
from dsh.llm.redact import redact_text
from dsh.repl.markdown import CODE_CHAR_COST, DELTA_MARKUP_BUDGET, MarkdownLines, Segment
from dsh.repl.sanitize import one_line
from dsh.repl.styles import Rewrite, rewrite, segments_text, styled
from dsh.repl.turn_end import fix_line, turn_end_line

__all__ = ["Renderer", "compacted_line"]

_TOOL_RESULT_WIDTH = 240
_TOOL_ARGS_WIDTH = 400
_TOOL_PREVIEW_LINES = 3
_PLAN_LINES = 20  # items a plan/update shows; /plan shows them all
_ELLIPSIS = "…"


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n")


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + _ELLIPSIS


def compacted_line(event: ContextCompacted) -> str:
    """``[compacted] 12 messages replaced by a summary of 340 tokens`` (then the retry, when automatic)."""
    usage = event.usage
    size = f"{usage.completion_tokens:,} tokens" if usage is not None and usage.completion_tokens else (
        f"{len(event.summary):,} characters")
    count = f"{event.replaced} message{'s' if event.replaced != 1 else ''}"
    line = f"[compacted] {count} replaced by a summary of {size}"
    return line + ("; sending the request again" if event.turn is not None else "")


# Where the cursor stands on the current screen line.
_START = "start"  # column 0
_HEADER = "header"  # just after "[main turn N] ": a status line may follow on the same line
_MID = "mid"  # after streamed text that did not end its line


class Renderer:
    """Turns agent events into text. Holds only cursor-position state (and the last plan it rendered, for a
    turn-end line with no session to ask); never writes anywhere."""

    def __init__(
        self,
        *,
        color: bool,
        label: str = "main",
        secrets: Sequence[str] = (),
        sources: Mapping[str, str] | None = None,
        markdown: str | None = None,
    ) -> None:
        """``markdown``: None (answer text verbatim), ``"lines"`` (each line rendered when its newline
        arrives) or ``"live"`` (the same, and the unfinished line streams raw, then is rewritten)."""
        self.color = color
        self.sources = dict(sources or {})
        self.label = label
        self.secrets = tuple(secret for secret in secrets if secret)
        self._column = _START
        self._stream: str | None = None  # "text" or "reasoning": which kind of delta came last
        self._markdown = MarkdownLines() if markdown is not None else None
        self._live = markdown == "live"
        self._line: list[str] = []  # the answer's unfinished line, raw (markdown only)
        self._screen_prefix = ""  # dsh's own text before that line on the screen line (the turn header)
        # The session's plan, for the turn-end line (a Display reads its session's); else the last one rendered.
        self.plan: Callable[[], Plan | None] | None = None
        self._last_plan: Plan | None = None

    @property
    def markdown_live(self) -> bool:
        return self._live

    @markdown_live.setter
    def markdown_live(self, live: bool) -> None:
        """Whether the sink keeps the unfinished line aside (set when the front end swaps sinks)."""
        assert not self._line, "the sink changes between replies only"
        self._live = live and self._markdown is not None

    @property
    def at_line_start(self) -> bool:
        return self._column == _START

    # --- public entry points --------------------------------------------------------------

    def render(self, event: Event) -> str:
        # Deltas first: a turn streams 100 000s of them.
        if type(event) is TextDelta and self._markdown is not None:
            return self._markdown_delta(event.text)
        if self._line and type(event) is not StreamKeepAlive:  # anything shown ends the unfinished line
            flushed = self._flush_line()
            return self._rewritten(flushed, self._render(event))
        return self._render(event)

    def _render(self, event: Event) -> str:
        match event:
            case TextDelta(text=text):
                return self._emit(self._stream_delta("text", text))
            case ReasoningDelta(text=text):
                return self._emit(self._stream_delta("reasoning", text))
            case TurnStart(turn=turn):
                return self.header(turn)
            case ToolCallStart():
                return self._emit(self._tool_call(event))
            case ToolResult():
                return self._emit(self._tool_result(event))
            case LlmRetry():
                return self._emit(self._retry(event))
            case LlmContinue():
                self._stream = None  # the answer goes on below its line
                return self._emit(self._status_break() + continue_words(event) + "\n")
            case TurnEnd(reason=reason):
                return self._emit(self._turn_end(reason))
            case JobNotice(text=text):
                return self._emit(self._job_notice(text))
            case PlanUpdate():
                return self._emit(self._plan(event))
            case ContextCompacted():
                self._stream = None  # inside a turn it is a status line, like a retry
                return self._emit(self._status_break() + compacted_line(event) + "\n")
            case CacheDrop(rate=rate, previous=previous, change=change):  # a logged one (dsh sessions show)
                line = one_line(redact_text(drop_words(rate, previous, change), self.secrets))
                return self._emit(self._break_line() + line + "\n")
            case ModelSet(model=model):  # a logged /model or /profile (dsh sessions show)
                line = one_line(f"model set to {redact_text(model, self.secrets)}")
                return self._emit(self._break_line() + line + "\n")
            case ShellRun():  # a logged `!command` (dsh sessions show; agent_loop/prompt_shell.py)
                how = ("timed out; the command was killed" if event.timed_out else f"killed by {event.signal}"
                       if event.signal is not None else f"exit code: {event.exit_code}")
                line = one_line(redact_text(f"! {event.command}  [{how}]{' (sandboxed)' if event.sandboxed else ''} "
                                            f"({event.duration_s:.1f} s, {event.output_bytes:,} bytes of output)",
                                            self.secrets))
                return self._emit(self._break_line() + line + "\n")
        return ""  # step starts, assistant messages, keep-alives, unknown types: nothing to show

    def header(self, turn: int) -> str:
        """``[main turn N] `` on a fresh line."""
        flushed = self._flush_line()
        self._stream = None
        if self._markdown is not None:
            self._markdown.reset()
        head = f"[{self.label} turn {turn}] "
        text = self._break_line() + head
        self._column = _HEADER
        self._screen_prefix = head
        return self._rewritten(flushed, text)

    def resume_notice(self, turn: int) -> str:
        """What ``--resume`` reports first for a turn the log repair just closed."""
        return self.header(turn) + self._emit(f"{turn_end_line(Interrupted())}\n")

    def end_line(self) -> str:
        """End a partial line (or a bare header) so that what follows starts at column 0."""
        flushed = self._flush_line()
        return self._rewritten(flushed, self._emit(self._break_line()))

    def line(self, text: str) -> str:
        """A free-standing message line (command output, hints) placed on its own line."""
        flushed = self._flush_line()
        return self._rewritten(flushed, self._emit(self._break_line() + text + "\n"))

    def block(self, text: str) -> str:
        """Whole lines that already end in a newline (an approval's view), from a fresh line."""
        return self._emit(self._break_line() + text)

    def dim_line(self, text: str) -> str:
        """A secondary line of dsh's own (the usage line), dim on a terminal."""
        flushed = self._flush_line()
        return self._rewritten(flushed, self._emit(self._break_line() + self._styled(text, "dim") + "\n"))

    # --- cursor bookkeeping -----------------------------------------------------------------

    def _emit(self, text: str) -> str:
        if text:
            self._column = _START if text.endswith("\n") else _MID
            self._screen_prefix = ""
        return text

    # --- markdown: answer text line by line -------------------------------------------------------

    def _markdown_delta(self, text: str) -> str:
        """Complete lines rendered; the unfinished one held (and, live, streamed raw until it completes)."""
        if not text:
            return ""
        assert self._markdown is not None
        prefix = ""
        if self._stream not in (None, "text") and self._column == _MID:
            prefix = "\n"  # reasoning and answer each get their own lines
            self._screen_prefix = ""
        self._stream = "text"
        if "\n" not in text:
            self._line.append(text)
            if not self._live:
                return self._emit(prefix) if prefix else ""
            self._column = _MID
            return prefix + text
        first, *middle, rest = text.split("\n")
        had_partial = bool(self._line)
        self._line.append(first)
        segments: list[Segment] = []  # one Styled at the end: adding per line was quadratic in a big delta
        budget = DELTA_MARKUP_BUDGET  # past it, the rest of this delta is shown as written (docs/markdown.md)
        for line in ("".join(self._line), *middle):
            markup = budget > 0
            budget -= len(line) * (CODE_CHAR_COST if self._markdown.in_code else 1)
            segments += self._markdown.line(line, markup=markup)
            segments.append(("\n", None))
        rendered = segments_text(segments)
        self._line = [rest] if rest else []
        live_rest = rest if self._live else ""
        self._column = _MID if live_rest else _START
        if had_partial and self._live:
            out: str = rewrite(self._screen_prefix + rendered + live_rest)
        else:
            out = prefix + rendered + live_rest
        self._screen_prefix = ""
        return out

    def _flush_line(self) -> str:
        """The held unfinished line, rendered as it stands (the answer stopped mid-line); "" if none."""
        if not self._line:
            return ""
        assert self._markdown is not None
        rendered = segments_text(self._markdown.line("".join(self._line)))
        self._line = []
        self._column = _MID if rendered else self._column
        if not self._live:
            return rendered
        out = rewrite(self._screen_prefix + rendered)
        self._screen_prefix = ""
        return out

    @staticmethod
    def _rewritten(flushed: str, text: str) -> str:
        """``flushed + text``, still a :class:`Rewrite` when ``flushed`` was one."""
        if not flushed:
            return text
        joined = flushed + text
        return rewrite(joined) if isinstance(flushed, Rewrite) else joined

    def _break_line(self) -> str:
        """Newline needed before a line of its own (tool lines, notices)."""
        return "" if self._column == _START else "\n"

    def _status_break(self) -> str:
        """Newline needed before a status line: none right after the turn header."""
        return "\n" if self._column == _MID else ""

    def _styled(self, text: str, style: str) -> str:
        return styled(text, style) if self.color else text

    # --- handlers ----------------------------------------------------------------------------

    def _stream_delta(self, kind: str, text: str) -> str:
        if not text:
            return ""
        prefix = ""
        if self._stream not in (None, kind) and self._column == _MID:
            prefix = "\n"  # reasoning and answer each get their own lines
        self._stream = kind
        body = self._styled(text, "dim") if kind == "reasoning" else text
        return prefix + body if prefix else body

    def _tool_call(self, event: ToolCallStart) -> str:
        self._stream = None
        name = one_line(event.name) or "?"
        arguments = _clip(one_line(event.arguments), _TOOL_ARGS_WIDTH)
        return self._break_line() + f"  [tool call] {name}({arguments})\n"

    def _tool_result(self, event: ToolResult) -> str:
        self._stream = None
        output = _lines(event.output).strip("\n")
        lines = output.split("\n") if output else ["(no output)"]
        diagnostic = event.diagnostic
        has_diagnostic = bool(diagnostic)
        first = lines[0]
        if event.is_error and not first.lower().startswith("error"):
            first = "Error: " + first
        # With a diagnostic, the output's first line is the verdict and the diagnostic says why;
        # otherwise a short preview of the output (the model sees all of it).
        shown = [first] if has_diagnostic else [first, *lines[1:_TOOL_PREVIEW_LINES]]
        text = self._break_line() + f"  [tool result] {_clip(shown[0], _TOOL_RESULT_WIDTH)}\n"
        for line in shown[1:]:
            text += f"    {_clip(line, _TOOL_RESULT_WIDTH)}\n"
        hidden = len(lines) - len(shown)
        if hidden > 0 and not has_diagnostic:
            text += f"    … (+{hidden} more line{'s' if hidden != 1 else ''})\n"
        if diagnostic:
            for line in _lines(diagnostic).split("\n"):
                text += "    " + self._styled(line, "highlight") + "\n"
        return text

    def _retry(self, event: LlmRetry) -> str:
        delay_s = _finite(event.delay_s)
        code = one_line(event.code) or ErrorCode.UNKNOWN
        message = one_line(redact_text(event.message, self.secrets))
        self._stream = None
        return (
            self._status_break() + f"[retry {event.attempt}/{event.max_attempts} in {delay_s:.1f}s] {code}: {message}\n"
        )

    def _turn_end(self, reason: EndReason) -> str:
        self._stream = None
        line = turn_end_line(reason, self.secrets, self.plan() if self.plan is not None else self._last_plan)
        if line is None:
            return self._break_line()
        text = self._status_break() + line + "\n"
        fix = fix_line(reason, self.sources)
        if fix:
            text += fix + "\n"
        return text

    def _plan(self, event: PlanUpdate) -> str:
        """``  [plan] 2 of 5 open`` and the items, ``[x]`` done, ``[>]`` in progress, ``[ ]`` pending."""
        self._stream = None
        plan = self._last_plan = Plan(event.items)
        lines = plan_lines(plan)
        text = self._break_line() + (f"  [plan] {plan.open} of {plan.total} open\n" if lines else "  [plan] cleared\n")
        for line in lines[:_PLAN_LINES]:
            text += f"    {_clip(redact_text(line, self.secrets), _TOOL_RESULT_WIDTH)}\n"
        if len(lines) > _PLAN_LINES:
            text += f"    … (+{len(lines) - _PLAN_LINES} more)\n"
        return text

    def _job_notice(self, text: str) -> str:
        self._stream = None
        return self._break_line() + f"[job] {one_line(text)}\n"
