"""A spending cap: ``max_cost`` (US dollars) over one ``-p`` run or one session, a resumed session's spend included.

The cost so far is this process's requests of the main agent (compactions included) priced as ``/cost`` prices
them (:class:`~dsh.agent_loop.usage.UsageTally`, per request hour), plus what the resumed session's log says its
requests cost (:class:`~dsh.agent_loop.recap.Recap`). Before each request the agent asks :meth:`Budget.stop`: once
the cost so far has reached the cap the request is not sent and the turn ends :class:`BudgetStop`. The check comes
before each request, so the last request sent may pass the cap, by at most its own cost. One line says when the
spend first passes :data:`WARN_AT` of the cap (docs/contracts.md, "Budgets"). Its amounts are dollars and cents
(:func:`budget_amounts`), not ``/cost``'s four places.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsh.agent_loop.reasons import BudgetStop
from dsh.agent_loop.usage import UsageTally

__all__ = ["WARN_AT", "Budget", "budget_amounts", "budget_line", "budget_warning", "budget_words", "dollars",
           "unpriced_cap"]

WARN_AT = 0.8  # the share of the cap at which one line says how much is spent
_CENTS, _MOST = 2, 4  # decimal places: dollars and cents, and at most this many when cents are not enough


def _amount(amount: float) -> float:
    return amount if math.isfinite(amount) and amount > 0 else 0.0  # a broken figure (a log's nan) reads nothing


def _dollars(amount: float, places: int) -> str:
    """``$0.52``; an amount under a cent with :data:`_MOST` places (``$0.0042``), never ``$0.00``."""
    amount = _amount(amount)
    if 0 < amount < 0.01:
        places = _MOST
        if amount < 0.5 * 10**-_MOST:
            return f"<${10**-_MOST:.{_MOST}f}"  # rounds to nothing but is not nothing: <$0.0001
    return f"${amount:.{places}f}"


def dollars(amount: float) -> str:
    """One amount as the budget's lines show it: ``$0.50``, ``$0.0042``."""
    return _dollars(amount, _CENTS)


def budget_amounts(spent: float, cap: float) -> tuple[str, str]:
    """``("$0.52", "$0.50")``: dollars and cents, with more places (up to four) only where cents would print a
    spend past the cap equal to the cap (``$0.503`` of ``$0.500``), and for an amount under a cent."""
    spent, cap, places = _amount(spent), _amount(cap), _CENTS
    while places < _MOST and spent > cap and f"{spent:.{places}f}" == f"{cap:.{places}f}":
        places += 1
    return _dollars(spent, places), _dollars(cap, places)


def budget_words(spent: float, cap: float) -> str:
    """``$0.52 spent of a $0.50 cap``: the turn-end line's words, the warning's and ``/cost``'s."""
    shown_spent, shown_cap = budget_amounts(spent, cap)
    return f"{shown_spent} spent of a {shown_cap} cap"


def budget_line(spent: float, cap: float) -> str:
    """``budget: $0.12 spent of a $0.50 cap (24%)``: ``/cost``'s line, and the warning's words."""
    spent, cap = _amount(spent), _amount(cap)
    share = int(100 * spent / cap) if cap else 0
    return f"budget: {budget_words(spent, cap)} ({share}%)"


def budget_warning(spent: float, cap: float) -> str:
    """The one line once the spend passes :data:`WARN_AT` of the cap."""
    return f"dsh: {budget_line(spent, cap)}"


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
        """The cost so far: ``tally``'s requests and DeepSeek web calls (this process's) and the carried spend; a
        request with no usage adds 0."""
        return self.carried + (tally.cost or 0.0) + tally.web_cost

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
