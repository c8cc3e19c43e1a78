"""What DeepSeek's web_search and web_fetch cost, in the line each call shows (docs/endpoints.md, "DeepSeek: web
search and fetch").

DeepSeek bills a Search or Fetch call only when it succeeds (a search that found results, a fetch that returned
content), at :data:`PRICE_PER_CALL` each. A call's line ends with what it cost, ``… · $0.00075``, or ``… · not
billed``; the line is the tool result's ``diagnostic`` (agent_loop/tools/web_deepseek.py), kept in the session log,
and :func:`web_call_cost` reads it back for ``/cost`` (agent_loop/session_usage.py) without loading the tools.
"""

from __future__ import annotations

import re

__all__ = ["PRICE_PER_CALL", "WEB_TOOLS", "billed_line", "dollars", "web_call_cost"]

PRICE_PER_CALL = 0.75 / 1000  # US dollars per successful search or fetch, as DeepSeek publishes it
WEB_TOOLS = ("web_search", "web_fetch")
_COST = re.compile(r" · (?:\$(\d+(?:\.\d+)?)|not billed)\Z")


def dollars(cost: float) -> str:
    """``$0.00075``: to the hundred-thousandth, the trailing zeros dropped (``$0`` for nothing)."""
    text = f"{max(cost, 0.0):.5f}".rstrip("0").rstrip(".")
    return f"${text}"


def billed_line(head: str, cost: float) -> str:
    """``head`` with what the call cost: ``… · $0.00075``, or ``… · not billed``."""
    return f"{head} · {dollars(cost)}" if cost > 0 else f"{head} · not billed"


def web_call_cost(name: str, diagnostic: str | None) -> float | None:
    """What a DeepSeek search or fetch cost, read from its result's line (0.0: not billed); None when the result
    is not one (another tool, or the local web_fetch, whose lines carry no cost)."""
    if name not in WEB_TOOLS or not diagnostic or not diagnostic.startswith(f"{name} "):
        return None
    found = _COST.search(diagnostic.split("\n", 1)[0])
    if found is None:
        return None
    return float(found.group(1)) if found.group(1) else 0.0
