"""A session's usage: the tallies of this turn and of this process, and how full the model's window is.

The tallies sum what the agent's ``assistant/message`` and ``context/compacted`` events report
(:mod:`dsh.agent_loop.usage`); the front ends render them (``/cost``, the toolbar, the turn-end line).
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.agent_loop.budget import Budget, budget_words, unpriced_cap
from dsh.agent_loop.cache_watch import NOTHING_CHANGED, drop_words, is_cache_drop
from dsh.agent_loop.events import AssistantMessage, CacheDrop, ContextCompacted, LlmContinue, ToolResult
from dsh.agent_loop.reasons import BudgetStop, EndReason, Failed
from dsh.agent_loop.session_config import SessionConfig
from dsh.agent_loop.usage import AUTO_COMPACT_AT, UsageTally, context_fill, estimate_tokens, fixed_prefix_tokens
from dsh.agent_loop.web_cost import web_call_cost
from dsh.llm import ErrorCode, HarnessError, error_chain
from dsh.llm.context_size import ServerContext
from dsh.llm.events import Message, ToolSpec
from dsh.llm.models import model_info
from dsh.llm.request_body import wire_tool

if TYPE_CHECKING:
    from dsh.agent_loop.session_log import SessionLog

__all__ = ["SessionUsage"]

_log = logging.getLogger("dsh.session")


class SessionUsage:
    """:attr:`turn` (started again by each turn and compaction) and :attr:`total` (since this process started,
    ``/cost``), priced with the config's ``[models]``."""

    def __init__(self, config: SessionConfig) -> None:
        self._config = config
        self.turn = UsageTally()
        self.total = UsageTally()
        self.previous_cache_rate: float | None = None  # the last turn's whose endpoint reported the cache
        self.budget = Budget(config.max_cost) if config.max_cost is not None else None  # agent_loop/budget.py
        self.carried = 0.0  # a resumed session's logged spend: a cap set later (/profile NAME) counts it too

    def new_turn(self) -> None:
        self.turn = UsageTally(window=self.total.window)  # a size the server said holds for every turn

    def saw_context(self, found: ServerContext, system_prompt: str, specs: Sequence[ToolSpec]) -> str | None:
        """The context size the server said it serves (llm/context_size.py): the window the fill is counted against
        from now on; and the line when dsh's fixed prefix (``system_prompt`` and the tools' ``specs``) alone does not
        fit in it (docs/endpoints.md, "Local servers"), else None."""
        self.turn.window = self.total.window = found.tokens
        tools = json.dumps([wire_tool(spec) for spec in specs], ensure_ascii=False)
        prefix = fixed_prefix_tokens(system_prompt, tools)
        if prefix < found.tokens:
            return None
        return (f"{found.server} serves {found.tokens} tokens of context ({found.where}); dsh's fixed prefix (system "
                f"prompt and tool specs) alone is about {prefix} tokens: give it more with {found.flag}")

    def count(self, event: AssistantMessage | ContextCompacted | LlmContinue, model: str) -> None:
        """One request in both tallies; one without usage too: a request whose tokens are unknown."""
        info = model_info(model, self._config.models)
        now = datetime.datetime.now(datetime.UTC)
        self.turn.add(event.usage, model, info, now)
        self.total.add(event.usage, model, info, now)

    def count_web(self, event: ToolResult) -> ToolResult:
        """A tool result; a DeepSeek search or fetch (agent_loop/web_cost.py) joins both tallies with what it cost.
        Returns ``event``, which the session keeps as the last tool result."""
        cost = web_call_cost(event.name, event.diagnostic)
        if cost is not None:
            for tally in (self.turn, self.total):
                tally.add_web(event.name == "web_search", cost)
        return event

    def count_compaction(self, event: ContextCompacted, model: str, messages: Sequence[Message] | None) -> None:
        """The summary request costs like any other; afterwards the window holds about the new conversation
        (``messages``, the agent's, already the compacted ones; None before there is an agent)."""
        self.count(event, model)
        if messages is not None and self.total.requests:
            left = estimate_tokens("".join(message.content for message in messages))
            for tally in (self.total, self.turn):
                tally.context, tally.context_estimated = left, True

    def budget_stop(self, model: str) -> EndReason | None:
        """Before each request: the reason to end the turn instead (the cap is reached, or ``model``, set by
        ``/model``, has no price to hold it to), or None to send it."""
        if self.budget is None:
            return None
        info = model_info(model, self._config.models)
        if info is None or info.peak is None:
            return Failed(ErrorCode.CONFIG, unpriced_cap(model))
        return self.budget.stop(self.total)

    def budget_refusal(self, model: str) -> str | None:
        """Why a request that is not a turn's step (``/compact``'s summary) is not sent, or None to send it."""
        stop = self.budget_stop(model)
        if isinstance(stop, BudgetStop):
            return f"not sent: {budget_words(stop.spent, stop.max_cost)}"
        return None if stop is None else f"not sent: {stop.message if isinstance(stop, Failed) else stop}"

    def budget_warning(self) -> str | None:
        """The line once the spend passes 80 % of the cap (agent_loop/budget.py); None otherwise."""
        return None if self.budget is None else self.budget.warning(self.total)

    def carry(self, spent: float) -> None:
        """A resumed session's logged spend counts against the cap."""
        self.carried = spent
        if self.budget is not None:
            self.budget.carried = spent

    def set_cap(self, max_cost: float) -> None:
        """``/profile NAME``'s ``max_cost``: the cap from the next request, over the spend so far."""
        if self.budget is None:
            self.budget = Budget(max_cost, carried=self.carried)
        else:
            self.budget.max_cost, self.budget.warned = max_cost, False

    def context_fill(self) -> float | None:
        """How full the model's window is after the latest request; None when unknown."""
        return context_fill(self.total, self._config.models)

    def cache_drop(self, turn: int, change: str | None, log: SessionLog | None) -> str | None:
        """After turn ``turn`` (a prompt's or the job notices'): the line naming ``change`` (or that nothing
        changed) when the turn's cache hit rate fell well below the previous turn's (agent_loop/cache_watch.py),
        written to ``log`` first as a ``cache/drop`` record (``dsh sessions show`` prints it there); the turn's
        rate is the next one's previous."""
        rate, previous = self.turn.cache_hit_rate, self.previous_cache_rate
        if rate is not None:
            self.previous_cache_rate = rate
        if rate is None or previous is None or not is_cache_drop(rate, previous):
            return None
        drop = CacheDrop(turn, rate, previous, change or NOTHING_CHANGED)
        if log is not None and not log.closed:
            try:
                log.append(drop)
            except HarnessError as exc:  # the line is still shown; the next turn's own write fails as SESSION_LOG
                _log.warning("a cache drop was not logged: %s", error_chain(exc))
        return drop_words(rate, previous, drop.change)

    def compaction_due(self) -> bool:
        """With ``auto_compact`` on, a prompt sent this close to the window's end is preceded by a compaction."""
        fill = self.context_fill()
        return self._config.auto_compact and fill is not None and fill >= AUTO_COMPACT_AT
