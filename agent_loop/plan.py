"""The plan the model keeps with ``todo_write``: its items, their counts, their wire form and the words every front
end shows them in (docs/tools.md, "The plan: todo_write"; docs/contracts.md, "Turn ends").

A :class:`PlanItem` is one step: its text (``content``, at most :data:`CONTENT_LIMIT` characters), its ``status``
(one of :data:`STATUSES`) and the words shown while it is in progress (``active_form``). A :class:`Plan` is the
whole list the model sent last, at most :data:`MAX_ITEMS` items. The current plan is the last ``plan/update`` event
(agent_loop/events.py): the tool keeps it in the agent's session state under :data:`PLAN_KEY` (``/new`` clears
it), a resume restores it from the log (agent_loop/recap.py, then agent_loop/session_lifecycle.py), and
:func:`current_plan` reads it for a front end. Pure: no I/O. The texts are the model's (hostile): the lines here
are folded to one line each, and the front ends' one sanitizer makes them inert on the way out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "CONTENT_LIMIT",
    "MAX_ITEMS",
    "PLAN_KEY",
    "STATUSES",
    "Plan",
    "PlanItem",
    "current_plan",
    "items_from_wire",
    "items_to_wire",
    "open_words",
    "plan_head",
    "plan_lines",
    "plan_progress",
]

STATUSES = ("pending", "in_progress", "completed")
MAX_ITEMS = 100  # items of one plan, at most: a longer list is refused, the model told why
CONTENT_LIMIT = 500  # characters of an item's content (and of its active form); longer ones are cut
PLAN_KEY = "plan"  # where the tool keeps the plan in the agent's session state
_MARKERS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


@dataclass(frozen=True, slots=True)
class PlanItem:
    content: str
    status: str = "pending"  # one of STATUSES
    active_form: str | None = None  # "Running the tests": shown while the item is in progress


@dataclass(frozen=True, slots=True)
class Plan:
    items: tuple[PlanItem, ...] = ()

    @property
    def total(self) -> int:
        return len(self.items)

    @property
    def open(self) -> int:
        """Items not completed (pending or in progress)."""
        return sum(1 for item in self.items if item.status != "completed")

    @property
    def done(self) -> int:
        return self.total - self.open

    def current(self) -> PlanItem | None:
        """The first item in progress, else None."""
        return next((item for item in self.items if item.status == "in_progress"), None)


# --- the wire form (a plan/update record's ``items``) ------------------------------------------------


def items_to_wire(items: tuple[PlanItem, ...]) -> list[dict[str, str]]:
    wire = []
    for item in items:
        entry = {"content": item.content, "status": item.status}
        if item.active_form is not None:
            entry["active_form"] = item.active_form
        wire.append(entry)
    return wire


def items_from_wire(value: Any) -> tuple[PlanItem, ...]:
    """A record's ``items``, read leniently and within the bounds the tool keeps: at most :data:`MAX_ITEMS`; an
    entry that is not an object is skipped, a content that is not text reads empty, a status this version does
    not know reads ``pending``, and each text is cut to :data:`CONTENT_LIMIT` (a forged log cannot grow them)."""
    if type(value) is not list:
        return ()
    items = []
    for entry in value[:MAX_ITEMS]:
        if type(entry) is not dict:
            continue
        content, status, active = entry.get("content"), entry.get("status"), entry.get("active_form")
        items.append(PlanItem(content[:CONTENT_LIMIT] if type(content) is str else "",
                              status if status in STATUSES else "pending",
                              active[:CONTENT_LIMIT] if type(active) is str else None))
    return tuple(items)


# --- the plan as the front ends show it ---------------------------------------------------------------


class _Agent(Protocol):
    @property
    def session_state(self) -> Mapping[str, Any]: ...


class _Recap(Protocol):
    @property
    def plan(self) -> Plan | None: ...


class _Session(Protocol):
    @property
    def agent(self) -> _Agent | None: ...
    @property
    def recap(self) -> _Recap | None: ...


def current_plan(session: _Session) -> Plan | None:
    """The session's plan: its agent's (which a resume seeded and ``/new`` cleared), or, before the agent is
    built, the resumed log's last; None when the model has kept none."""
    agent = session.agent
    if agent is not None:
        plan = agent.session_state.get(PLAN_KEY)
        return plan if isinstance(plan, Plan) else None
    recap = session.recap
    return recap.plan if recap is not None else None


def _line(text: str) -> str:
    return " ".join(text.split())  # every line break and run of blanks one space: an item is one line


def plan_lines(plan: Plan) -> list[str]:
    """One line per item, ``[x]`` completed, ``[>]`` in progress, ``[ ]`` pending."""
    return [f"{_MARKERS.get(item.status, '[ ]')} {_line(item.content)}" for item in plan.items]


def plan_head(plan: Plan) -> str:
    """``plan: 2 of 5 items open``: the head of ``/plan`` and of a resumed session's plan."""
    return f"plan: {plan.open} of {plan.total} item{'s' if plan.total != 1 else ''} open"


def open_words(plan: Plan) -> str:
    """``2 of 5 plan items still open``: the end of a completed turn's line while the plan has open items."""
    return f"{plan.open} of {plan.total} plan item{'s' if plan.total != 1 else ''} still open"


def plan_progress(plan: Plan) -> str | None:
    """``plan 2/5 ▸ Running the tests``: the toolbar's line while items are open (completed of all, then the item
    in progress in its active form); None when none is open."""
    if not plan.open:
        return None
    current = plan.current()
    text = f"plan {plan.done}/{plan.total}"
    if current is not None:
        text += f" ▸ {_line(current.active_form or current.content)}"
    return text
