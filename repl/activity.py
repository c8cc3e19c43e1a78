"""The toolbar's view of a running turn (``waiting for first token 12s · keep-alive 2s ago``); the toolbar itself,
and its width rule, are repl/prompt_line.py's. The caller passes the clock in, which keeps it testable.
"""

from __future__ import annotations

import math

from dsh.agent_loop.events import (
    Event,
    LlmContinue,
    LlmRetry,
    ReasoningDelta,
    StepStart,
    StreamKeepAlive,
    TextDelta,
    ToolCallStart,
    TurnEnd,
    TurnStart,
)
from dsh.repl.sanitize import one_line

__all__ = ["STALL_AFTER_S", "TurnActivity"]


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


# A stream that has sent content and then nothing for this long is shown as stalled, not "streaming".
STALL_AFTER_S = 3.0


class TurnActivity:
    """``waiting for first token 12s · keep-alive 2s ago`` and friends, from events and a clock.

    Mid-stream too: once the content stops for :data:`STALL_AFTER_S`, ``streaming`` becomes
    ``no content for 12s`` (with ``· keep-alive 2s ago`` when keep-alives still arrive), so a stall
    is visible long before the idle timeout ends it.
    """

    def __init__(self) -> None:
        self._state = "idle"
        self._since = 0.0
        self._keepalive_at: float | None = None
        self._content_at = 0.0
        self._detail = ""

    @property
    def busy(self) -> bool:
        return self._state != "idle"

    def _wait(self, now: float) -> None:
        self._state, self._since, self._keepalive_at = "waiting", now, None

    def on_event(self, event: Event, now: float) -> None:
        match event:
            case TextDelta() | ReasoningDelta():
                self._state, self._content_at = "streaming", now
            case TurnStart() | StepStart() | LlmContinue():  # a continuation is a request out, like a step's
                self._wait(now)
            case StreamKeepAlive():
                self._keepalive_at = now
            case ToolCallStart(name=name):
                self._state, self._detail = "tool", one_line(name)
            case LlmRetry(attempt=attempt, max_attempts=total, delay_s=delay_s):
                self._state, self._since, self._keepalive_at = "retry", now + max(_finite(delay_s), 0.0), None
                self._detail = f"{attempt}/{total}"
            case TurnEnd():
                self._state = "idle"

    def _keepalive(self, now: float, after: float) -> str:
        at = self._keepalive_at
        return f" · keep-alive {max(0, int(now - at))}s ago" if at is not None and at >= after else ""

    def text(self, now: float) -> str:
        if self._state == "retry" and now >= self._since:
            self._state = "waiting"  # the backoff is over: the next request is out
        if self._state == "waiting":
            return f"waiting for first token {max(0, int(now - self._since))}s" + self._keepalive(now, self._since)
        if self._state == "retry":
            return f"retry {self._detail} in {math.ceil(self._since - now)}s"
        if self._state == "streaming":
            silent = now - self._content_at
            if silent < STALL_AFTER_S:
                return "streaming"
            return f"no content for {int(silent)}s" + self._keepalive(now, self._content_at)
        if self._state == "tool":
            return f"running {self._detail}" if self._detail else "running a tool"
        return ""

