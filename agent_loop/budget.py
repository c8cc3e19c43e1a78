"""A spending cap: ``max_cost`` (US dollars) over one ``-p`` run or one session, a resumed session's spend included.

The cost so far is this process's requests of the main agent (compactions included) priced as ``/cost`` prices
them (:class:`~dsh.agent_loop.usage.UsageTally`, per request hour), plus what the resumed session's log says its
requests cost (:class:`~dsh.agent_loop.recap.Recap`). Before each request the agent asks :meth:`Budget.stop`: once
the cost so far has reached the cap the request is not sent and the turn ends :class:`BudgetStop`. The check comes
before each request, so the last request sent may pass the cap, by at most its own cost. One line says when the
spend first passes :data:`WARN_AT` of the cap (docs/contracts.md, "Budgets").
"""

from __future__ import annotations

from dataclasses import dataclass

from dsh.agent_loop.reasons import BudgetStop
from dsh.agent_loop.usage import UsageTally, format_cost

__all__ = ["WARN_AT", "Budget", "budget_warning", "budget_words", "unpriced_cap"]

WARN_AT = 0.8  # the share of the cap at which one line says how much is spent


def budget_words(spent: float, cap: float) -> str:
    """``$0.5213 spent of a $0.5000 cap``: the turn-end line's words and the warning's."""
    return f"{format_cost(spent)} spent of a {format_cost(cap)} cap"


def budget_warning(spent: float, cap: float) -> str:
    """The one line once the spend passes :data:`WARN_AT` of the cap."""
    return f"dsh: budget: {budget_words(spent, cap)} ({int(100 * spent / cap)}%)"


def unpriced_cap(model: str) -> str:
    """Why a capped turn may not send a request to a model with no known price (never an unenforced cap)."""
    return (f'max_cost needs a price for model {model}, which has none known: set input_cache_hit, input_cache_miss '
            f'and output in [models."{model}"] (docs/configuration.md)')


@dataclass(slots=True)
class Budget:
    max_cost: float  # US dollars, above 0
    carried: float = 0.0  # what the resumed session's requests cost, from its log
    warned: bool = False  # the WARN_AT line was shown

    def spent(self, tally: UsageTally) -> float:
        """The cost so far: ``tally`` (this process's) and the carried spend; a request with no usage adds 0."""
        return self.carried + (tally.cost or 0.0)

    def stop(self, tally: UsageTally) -> BudgetStop | None:
        """The reason to end the turn instead of sending its next request, or None to send it."""
        spent = self.spent(tally)
        return BudgetStop(spent, self.max_cost) if spent >= self.max_cost else None

    def warning(self, tally: UsageTally) -> str | None:
        """The :data:`WARN_AT` line, the first time the spend is past it; None otherwise."""
        spent = self.spent(tally)
        if self.warned or spent < WARN_AT * self.max_cost:
            return None
        self.warned = True
        return budget_warning(spent, self.max_cost)
