"""What a resumed session was about: the last few turns, gathered while the log is read anyway.

A :class:`Recap` is an ``on_record`` hook for :func:`~dsh.agent_loop.resume.open_session`: it sees each
record once, in order, and keeps only the last :data:`KEEP` turns, each cut to :data:`LIMIT` characters,
so its memory does not grow with the log. It also keeps the whole prompt of the last prompted turn,
which ``/retry`` sends again after a crash interrupted it. The texts are hostile (model output,
prompts): the front end shows them through its one sanitizer.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsh.agent_loop.plan import Plan, items_from_wire
from dsh.agent_loop.web_cost import web_call_cost
from dsh.llm.events import Usage
from dsh.llm.models import ModelInfo, Prices, cost_usd

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


_USAGE_FIELDS = tuple(Usage.__dataclass_fields__)
# A record's time as session_log.py writes it: UTC, milliseconds, "Z".
_WRITER_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


def _when(value: object) -> _dt.datetime | None:
    """A record's ``time`` (UTC, ISO 8601); None when it is not one."""
    try:
        when = _dt.datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else None
    except ValueError:
        return None
    return when if when is None or when.tzinfo is not None else when.replace(tzinfo=_dt.UTC)


def _cut(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= LIMIT else (text[:LIMIT], True)


@dataclass(slots=True)
class Recap:
    """Call it with each record of a log; then read :attr:`turns` and :attr:`last_prompt`."""

    # The record types it reads: a caller may pass it only these (``open_session(record_kinds=...)``).
    kinds: ClassVar[frozenset[str]] = frozenset(
        {"turn/start", "assistant/message", "turn/end", "context/compact", "llm/continue", "model/set", "plan/update",
         "tool/result"})
    turns: deque[TurnSummary] = field(default_factory=lambda: deque(maxlen=KEEP))
    last_prompt: str | None = None  # the whole prompt of the last turn the user prompted
    last_prompt_turn: int = 0
    info: ModelInfo | None = None  # the model the logged requests are priced as (the resuming session's)
    spent: float = 0.0  # what the logged requests cost, each at its hour's prices (a budget counts it)
    model: str | None = None  # the last ``model/set`` record's (/model, /profile): a resume restores it
    plan: Plan | None = None  # the last ``plan/update`` record's (todo_write): a resume restores it
    _hours: dict[str, Prices | None] = field(default_factory=dict)  # the prices of each UTC hour seen so far

    def _add_spend(self, usage: object, time: object) -> None:
        """One logged request's cost, as :class:`~dsh.agent_loop.usage.UsageTally` prices it (a request with no
        usage, no price or no time adds nothing)."""
        if self.info is None or not isinstance(usage, dict):
            return
        # Prices change by the hour (llm/models.py is_peak): a time as the log's writer puts it is priced once an
        # hour, not parsed once a record (a resume reads 100 000s).
        hour = time[:13] if isinstance(time, str) and _WRITER_TIME.fullmatch(time) else None
        if hour is not None and hour in self._hours:
            prices = self._hours[hour]
        else:
            when = _when(time)
            prices = self.info.prices_at(when) if when is not None else None
            if hour is not None:
                self._hours[hour] = prices
        if prices is not None:
            self.spent += cost_usd(Usage(*(_count(usage.get(key)) for key in _USAGE_FIELDS)), prices)

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
        if kind == "model/set" and isinstance(model := data.get("model"), str) and 0 < len(model) <= 128:
            self.model = model
        if kind == "plan/update":
            self.plan = Plan(items_from_wire(data.get("items")))
        if kind in ("assistant/message", "context/compact", "llm/continue"):  # each a request
            self._add_spend(data.get("usage"), record.get("time"))
        elif kind == "tool/result":  # a DeepSeek search or fetch is spent too (agent_loop/web_cost.py)
            name, line = data.get("name"), data.get("diagnostic")
            cost = web_call_cost(name, line) if isinstance(name, str) and isinstance(line, str) else None
            self.spent += cost or 0.0
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
