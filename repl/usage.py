"""Tokens, cost and context fill on screen: the dim line after each interactive turn, and ``/cost``.

The sums are the session's (:mod:`dsh.agent_loop.usage`). Format, e.g.
``tokens 12.3k in (9.1k cached) · 420 out · cache 74% · context 1.8% · $0.0031`` (docs/architecture.md); when the
endpoint sent no usage, ``tokens unknown (the endpoint sent no usage)``; ``cache N%`` only when it reported the
prompt cache (docs/contracts.md, "The prompt cache").
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh.agent_loop.cache_watch import cache_percent
from dsh.agent_loop.usage import AUTO_COMPACT_AT, CONTEXT_WARNING_AT, UsageTally, context_fill, format_cost
from dsh.agent_loop.web_cost import dollars
from dsh.llm.models import ModelSettings

__all__ = [
    "AUTO_COMPACT_AT",
    "CONTEXT_WARNING_AT",
    "NO_USAGE",
    "UsageTally",
    "cache_percent",
    "cache_split_lines",
    "compact_count",
    "context_fill",
    "context_text",
    "context_warning",
    "format_cost",
    "usage_line",
    "web_line",
]


def compact_count(count: int) -> str:
    count = max(count, 0)  # never a negative count on screen, whatever a Usage was built from
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k".replace(".0k", "k")
    return f"{count / 1_000_000:.1f}M".replace(".0M", "M")


def _percent(fill: float) -> str:
    share = max(100 * fill, 0.0)  # over 100% is shown as it is (the server said so); below 0 is not a fill
    return f"{share:.1f}%" if share < 10 else f"{share:.0f}%"


def context_text(tally: UsageTally, models: Mapping[str, ModelSettings] | None = None) -> str | None:
    """``context 18%`` for the usage line and the toolbar, or None when the fill is not known."""
    fill = context_fill(tally, models)
    return None if fill is None else f"context {_percent(fill)}"


def context_warning(fill: float) -> str:
    """The one line shown when the window crosses :data:`CONTEXT_WARNING_AT`."""
    return f"context {_percent(fill)} full — /compact summarizes the conversation so far, /new starts over"


NO_USAGE = "tokens unknown (the endpoint sent no usage)"


def _price(per_million: float) -> str:
    text = f"{per_million:.3f}"
    return f"${text[:-1] if text.endswith('0') else text}/M"  # $0.006/M, $0.30/M


def web_line(tally: UsageTally) -> list[str]:
    """``/cost``'s line of DeepSeek's web calls: ``web 3 searches, 1 fetch · 3 billed · $0.00225``; none without."""
    if not tally.web_searches + tally.web_fetches:
        return []
    calls = [f"{count} {word}{'es' if count != 1 and word == 'search' else 's' if count != 1 else ''}"
             for count, word in ((tally.web_searches, "search"), (tally.web_fetches, "fetch")) if count]
    return [f"web {', '.join(calls)} · {tally.web_billed} billed · {dollars(tally.web_cost)}"]


def cache_split_lines(tally: UsageTally) -> list[str]:
    """``/cost``'s lines under the sums: the prompt cache's hits and misses, their tokens and what they cost at what
    price (the latest request's), none when the endpoint never reported the cache; then DeepSeek's web calls."""
    if tally.cache_hit_rate is None:
        return web_line(tally)
    hits = f"cache hits {compact_count(tally.cache_hits)} tokens"
    misses = f"cache misses {compact_count(tally.cache_misses)} tokens"
    if tally.cost is None or tally.prices is None:
        return [f"{hits} · {misses} (no price known)", *web_line(tally)]
    return [f"{hits} · {format_cost(tally.hit_cost)} at {_price(tally.prices.cache_hit)}",
            f"{misses} · {format_cost(tally.miss_cost)} at {_price(tally.prices.cache_miss)}", *web_line(tally)]


def usage_line(tally: UsageTally, models: Mapping[str, ModelSettings] | None = None) -> str:
    """The sums, or that they are unknown: a request whose reply carried no usage is never counted as zero
    tokens, and a cost that leaves some requests out is not shown."""
    if tally.requests and tally.unreported == tally.requests:
        return NO_USAGE
    parts = [f"tokens {compact_count(tally.prompt)} in"]
    if tally.cached:
        parts[0] += f" ({compact_count(tally.cached)} cached)"
    out = f"{compact_count(tally.output)} out"
    if tally.reasoning:
        out += f" ({compact_count(tally.reasoning)} reasoning)"
    parts.append(out)
    if tally.cache_hit_rate is not None:
        parts.append(f"cache {cache_percent(tally.cache_hit_rate)}")
    context = context_text(tally, models)
    if context is not None:
        parts.append(context)
    if tally.unreported:
        parts.append(f"no usage sent for {tally.unreported} of {tally.requests} requests")
    elif tally.cost is not None:
        parts.append(format_cost(tally.cost))
    return " · ".join(parts)
