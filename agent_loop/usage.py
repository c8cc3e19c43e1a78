"""Token counts, cost and context fill of a session: what the server reported, summed (no rendering).

The numbers are the ones the server reported in each request's usage chunk (``assistant/message``
events carry them); the prices and context windows come from :mod:`dsh.llm.models`. The REPL renders
them (:mod:`dsh.repl.usage`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from dsh.llm.events import Usage
from dsh.llm.models import ModelInfo, ModelSettings, Prices, cost_usd, model_info

__all__ = [
    "AUTO_COMPACT_AT",
    "CHARS_PER_TOKEN",
    "CONTEXT_WARNING_AT",
    "UsageTally",
    "context_fill",
    "estimate_tokens",
    "fixed_prefix_tokens",
    "format_cost",
    "tokens_for_chars",
]

CONTEXT_WARNING_AT = 0.8  # the share of the context window at which the REPL says what to do
CHARS_PER_TOKEN = 4  # the estimate's rule of thumb
AUTO_COMPACT_AT = 0.9  # with auto_compact on, a prompt sent past this share is preceded by a compaction


@dataclass
class UsageTally:
    """Sums over requests. ``cost`` is None once any request had no known price. A reply that came without
    a usage chunk counts as a request whose tokens and cost are unknown (``unreported``): the sums then
    leave it out, and are not the totals (docs/scripting.md)."""

    requests: int = 0
    unreported: int = 0  # requests whose reply carried no usage
    prompt: int = 0
    cached: int = 0
    output: int = 0
    reasoning: int = 0
    cost: float | None = 0.0
    context: int = 0  # the latest request's prompt + output: how full the window is now
    model: str = ""
    context_estimated: bool = False  # ``context`` is dsh's estimate (after a compaction), not the server's
    context_unknown: bool = False  # the latest request reported no usage: how full the window is, is unknown
    window: int | None = None  # the context size the server said it serves (llm/context_size.py); None: the table's
    cache_hits: int = 0  # input tokens the prompt cache served, over the requests that reported the cache
    cache_misses: int = 0  # and those it did not (a request that reported neither is not in either)
    hit_cost: float = 0.0  # what the hits and the misses cost, while ``cost`` is known
    miss_cost: float = 0.0
    prices: Prices | None = None  # the latest priced request's
    # DeepSeek's web_search and web_fetch (agent_loop/tools/web_deepseek.py): calls, the billed ones, their cost.
    web_searches: int = 0
    web_fetches: int = 0
    web_billed: int = 0
    web_cost: float = 0.0
    # The same sums by model, each request priced as its own model (/cost splits them); None in those tallies.
    by_model: dict[str, UsageTally] | None = field(default_factory=dict)

    @property
    def cache_hit_rate(self) -> float | None:
        """Hits over hits and misses of the input tokens; None when no request reported the cache."""
        seen = self.cache_hits + self.cache_misses
        return self.cache_hits / seen if seen else None

    @property
    def tokens_known(self) -> bool:
        """Whether every request reported its usage, so the sums (and the cost) are the totals."""
        return self.unreported == 0

    def add(self, usage: Usage | None, model: str, info: ModelInfo | None, when: _dt.datetime) -> None:
        """One request's usage; None when the endpoint sent none (the request still counts)."""
        if self.by_model is not None:
            self.by_model.setdefault(model, UsageTally(by_model=None)).add(usage, model, info, when)
        self.requests += 1
        self.model = model
        if usage is None:
            self.unreported += 1
            self.context_unknown, self.context_estimated = True, False
            return
        self.context_unknown = False
        self.prompt += usage.prompt_tokens
        self.cached += usage.prompt_cache_hit_tokens
        self.output += usage.completion_tokens
        self.reasoning += usage.reasoning_tokens
        self.context = usage.prompt_tokens + usage.completion_tokens
        self.context_estimated = False
        self.model = model
        hit, miss = usage.prompt_cache_hit_tokens, usage.prompt_cache_miss_tokens
        miss = miss or max(usage.prompt_tokens - hit, 0)  # as cost_usd counts them
        if hit or usage.prompt_cache_miss_tokens:  # the endpoint reported the cache; neither: unknown, never 0%
            self.cache_hits += hit
            self.cache_misses += miss
        prices = info.prices_at(when) if info is not None else None
        if prices is None or self.cost is None:
            self.cost = None
        else:
            self.cost += cost_usd(usage, prices)
            self.hit_cost += hit * prices.cache_hit / 1e6
            self.miss_cost += miss * prices.cache_miss / 1e6
            self.prices = prices


    def add_web(self, search: bool, cost: float) -> None:
        """One DeepSeek search (else fetch) and what it cost (0.0: not billed); the tokens' ``cost`` is apart."""
        self.web_searches += search
        self.web_fetches += not search
        self.web_billed += cost > 0
        self.web_cost += max(cost, 0.0)


def context_fill(tally: UsageTally, models: Mapping[str, ModelSettings] | None = None) -> float | None:
    """How full the model's window is after the latest request (0.18 for 18%); None when unknown."""
    if not tally.requests or (tally.context_unknown and not tally.context_estimated):
        return None
    if tally.window:  # the server's own word (llama.cpp's --ctx-size) beats the model table's
        return tally.context / tally.window
    info = model_info(tally.model, models)
    if info is None or not info.context_window:
        return None
    return tally.context / info.context_window


def format_cost(cost: float) -> str:
    """``$0.0031``; a cost that rounds to nothing but is not nothing reads ``<$0.0001``, never ``$0.0000``."""
    cost = max(cost, 0.0)  # never a negative cost
    if 0 < cost < 0.00005:
        return "<$0.0001"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def estimate_tokens(text: str) -> int:
    """A rough count for display (about four characters a token); requests report the real one."""
    return tokens_for_chars(len(text))


def fixed_prefix_tokens(system_prompt: str, tools_json: str) -> int:
    """The estimate of what every request sends before the conversation: the system prompt and the tool specs
    (their wire JSON), as :func:`estimate_tokens` counts them."""
    return estimate_tokens(system_prompt) + estimate_tokens(tools_json)


def tokens_for_chars(chars: int) -> int:
    """:func:`estimate_tokens` of a text of ``chars`` characters."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
