"""Tokens, cost and context fill: the dim line after each interactive turn, and ``/cost``.

The numbers are the ones the server reported in each request's usage chunk (``assistant/message``
events carry them); the prices and context windows come from :mod:`dsh.llm.models`. Format, e.g.
``tokens 12.3k in (9.1k cached) · 420 out · context 1.8% · $0.0031`` (docs/architecture.md).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.llm.events import Usage
from dsh.llm.models import ModelInfo, cost_usd, model_info

__all__ = [
    "AUTO_COMPACT_AT",
    "CONTEXT_WARNING_AT",
    "UsageTally",
    "compact_count",
    "context_fill",
    "context_text",
    "context_warning",
    "format_cost",
    "usage_line",
]

CONTEXT_WARNING_AT = 0.8  # the share of the context window at which the REPL says what to do
AUTO_COMPACT_AT = 0.9  # with auto_compact on, a prompt sent past this share is preceded by a compaction


@dataclass
class UsageTally:
    """Sums over requests. ``cost`` is None once any request had no known price."""

    requests: int = 0
    prompt: int = 0
    cached: int = 0
    output: int = 0
    reasoning: int = 0
    cost: float | None = 0.0
    context: int = 0  # the latest request's prompt + output: how full the window is now
    model: str = ""
    context_estimated: bool = False  # ``context`` is dsh's estimate (after a compaction), not the server's

    def add(self, usage: Usage, model: str, info: ModelInfo | None, when: _dt.datetime) -> None:
        self.requests += 1
        self.prompt += usage.prompt_tokens
        self.cached += usage.prompt_cache_hit_tokens
        self.output += usage.completion_tokens
        self.reasoning += usage.reasoning_tokens
        self.context = usage.prompt_tokens + usage.completion_tokens
        self.context_estimated = False
        self.model = model
        prices = info.prices_at(when) if info is not None else None
        if prices is None or self.cost is None:
            self.cost = None
        else:
            self.cost += cost_usd(usage, prices)


def compact_count(count: int) -> str:
    count = max(count, 0)  # never a negative count on screen, whatever a Usage was built from
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k".replace(".0k", "k")
    return f"{count / 1_000_000:.1f}M".replace(".0M", "M")


def format_cost(cost: float) -> str:
    """``$0.0031``; a cost that rounds to nothing but is not nothing reads ``<$0.0001``, never ``$0.0000``."""
    cost = max(cost, 0.0)  # never a negative cost
    if 0 < cost < 0.00005:
        return "<$0.0001"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def _percent(fill: float) -> str:
    share = max(100 * fill, 0.0)  # over 100% is shown as it is (the server said so); below 0 is not a fill
    return f"{share:.1f}%" if share < 10 else f"{share:.0f}%"


def context_fill(tally: UsageTally, models: Mapping[str, Mapping[str, Any]] | None = None) -> float | None:
    """How full the model's window is after the latest request (0.18 for 18%); None when unknown."""
    if not tally.requests:
        return None
    info = model_info(tally.model, models)
    if info is None or not info.context_window:
        return None
    return tally.context / info.context_window


def context_text(tally: UsageTally, models: Mapping[str, Mapping[str, Any]] | None = None) -> str | None:
    """``context 18%`` for the usage line and the toolbar, or None when the fill is not known."""
    fill = context_fill(tally, models)
    return None if fill is None else f"context {_percent(fill)}"


def context_warning(fill: float) -> str:
    """The one line shown when the window crosses :data:`CONTEXT_WARNING_AT`."""
    return f"context {_percent(fill)} full — /compact summarizes the conversation so far, /new starts over"


def usage_line(tally: UsageTally, models: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    parts = [f"tokens {compact_count(tally.prompt)} in"]
    if tally.cached:
        parts[0] += f" ({compact_count(tally.cached)} cached)"
    out = f"{compact_count(tally.output)} out"
    if tally.reasoning:
        out += f" ({compact_count(tally.reasoning)} reasoning)"
    parts.append(out)
    context = context_text(tally, models)
    if context is not None:
        parts.append(context)
    if tally.cost is not None:
        parts.append(format_cost(tally.cost))
    return " · ".join(parts)
