"""What a resumed session was about: the last few turns, gathered while the log is read anyway.

A :class:`Recap` is an ``on_record`` hook for :func:`~dsh.agent_loop.resume.open_session`: it sees each
record once, in order, and keeps only the last :data:`KEEP` turns, each cut to :data:`LIMIT` characters,
so its memory does not grow with the log. It also keeps the whole prompt of the last prompted turn,
which ``/retry`` sends again after a crash interrupted it. The texts are hostile (model output,
prompts): the front end shows them through its one sanitizer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["KEEP", "LIMIT", "Recap", "TurnSummary"]

KEEP = 3  # turns kept for the recap
LIMIT = 200  # characters kept of each prompt and answer


@dataclass(slots=True)
class TurnSummary:
    turn: int
    prompt: str  # at most LIMIT characters (cut marked by the caller's view: ``cut_prompt``)
    cut_prompt: bool = False
    answer: str = ""  # the turn's last assistant text, at most LIMIT characters
    cut_answer: bool = False
    end: dict[str, Any] | None = None  # the turn/end reason as logged; None while open
    notice: bool = False  # a turn dsh started to deliver background-job notices
    cache_hits: int = 0  # the prompt cache's input tokens, over the requests that reported it
    cache_misses: int = 0

    def add_usage(self, usage: object) -> None:
        """One request's logged usage: its cache hits and misses, as :class:`~dsh.agent_loop.usage.UsageTally`
        counts them (a count that is not one is no figure)."""
        if not isinstance(usage, dict):
            return
        hit, miss, prompt = (_count(usage.get(key)) for key in ("prompt_cache_hit_tokens", "prompt_cache_miss_tokens",
                                                                "prompt_tokens"))
        if not (hit or miss):
            return
        self.cache_hits += hit
        self.cache_misses += miss or max(prompt - hit, 0)


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def _cut(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= LIMIT else (text[:LIMIT], True)


@dataclass(slots=True)
class Recap:
    """Call it with each record of a log; then read :attr:`turns` and :attr:`last_prompt`."""

    # The record types it reads: a caller may pass it only these (``open_session(record_kinds=...)``).
    kinds: ClassVar[frozenset[str]] = frozenset({"turn/start", "assistant/message", "turn/end"})
    turns: deque[TurnSummary] = field(default_factory=lambda: deque(maxlen=KEEP))
    last_prompt: str | None = None  # the whole prompt of the last turn the user prompted
    last_prompt_turn: int = 0

    @property
    def cache_rate(self) -> float | None:
        """The prompt cache's hit rate of the last turn that reported one (a resumed session's drop line compares
        its first turn with it)."""
        for turn in reversed(self.turns):
            if turn.cache_hits + turn.cache_misses:
                return turn.cache_hits / (turn.cache_hits + turn.cache_misses)
        return None

    def __call__(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind not in self.kinds:
            return
        data = record.get("data")
        if not isinstance(data, dict):
            return
        turn = data.get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool):
            return
        if kind == "turn/start":
            prompt = data.get("prompt")
            prompt = prompt if isinstance(prompt, str) else ""
            notice = data.get("source") == "notice"
            text, cut = _cut(prompt)
            self.turns.append(TurnSummary(turn, text, cut, notice=notice))
            if not notice:
                self.last_prompt, self.last_prompt_turn = prompt, turn
            return
        current = self.turns[-1] if self.turns and self.turns[-1].turn == turn else None
        if current is None:
            return
        if kind == "assistant/message":
            content = data.get("content")
            if isinstance(content, str) and content.strip():
                current.answer, current.cut_answer = _cut(content)
            current.add_usage(data.get("usage"))
        elif kind == "turn/end":
            reason = data.get("reason")
            current.end = reason if isinstance(reason, dict) else {}
