"""The ``todo_write`` tool: the model keeps a plan, sending the whole list each call (docs/tools.md, "The plan:
todo_write").

Its arguments are Claude Code's TodoWrite's, read unchanged: ``{"todos": [{"content", "status", "activeForm"}]}``
(``activeForm`` optional; ``id`` and ``priority``, which Claude Code has sent over its versions, accepted and
ignored). Anything else is an error result the model can fix, naming the item and the key. At most
:data:`~dsh.agent_loop.plan.MAX_ITEMS` items; a content or active form longer than
:data:`~dsh.agent_loop.plan.CONTENT_LIMIT` characters is cut, and the result says which. Lone surrogates become
U+FFFD and known secrets are masked before the plan is kept, logged (a ``plan/update`` event) or shown. It changes
no file, so every permission mode lets it run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.agent_loop.events import PlanUpdate
from dsh.agent_loop.front_matter import fold_line
from dsh.agent_loop.plan import CONTENT_LIMIT, MAX_ITEMS, PLAN_KEY, STATUSES, Plan, PlanItem
from dsh.agent_loop.tools.registry import Tool, ToolContext, ToolOutput
from dsh.llm.redact import Redactor
from dsh.llm.text import scrub_surrogates

__all__ = ["TODO_WRITE", "Parsed", "parse_todos", "result_text", "todo_write_tool"]

TODO_WRITE = "todo_write"
_ITEM_KEYS = frozenset({"content", "status", "activeForm"})
_IGNORED_KEYS = frozenset({"id", "priority"})  # Claude Code's, over its versions: accepted, not kept
_SHOWN = 40  # characters of a bad key or value quoted back to the model

_DESCRIPTION = (
    "Keep a plan of the task and update it as you work. Send the whole list every time: each item has its "
    "content (the step, imperative: \"Run the tests\"), its status (pending, in_progress or completed) and "
    "optionally activeForm (the step as it is done: \"Running the tests\", shown while it is in progress). Use it "
    "for work of three steps or more; keep one item in_progress at a time, mark each completed as soon as it is "
    "done, and drop items that no longer apply. The user sees the plan, and a turn that ends with items still "
    f"open says so. At most {MAX_ITEMS} items."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "the whole plan, in order",
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "status": {"type": "string", "enum": list(STATUSES)},
                    "activeForm": {"type": "string", "minLength": 1},
                },
                "required": ["content", "status"],
            },
        },
    },
    "required": ["todos"],
}


class _Invalid(Exception):
    """Arguments the model must fix: the message is what it is told."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """A valid ``todos`` list: the items to keep, and the numbers (from 1) of the items whose text was cut."""

    items: tuple[PlanItem, ...]
    cut: tuple[int, ...] = ()


def _quoted(text: str) -> str:
    """A key or value of the model's, quoted back on one line: folded, cut, ASCII-only (escapes stay inert)."""
    return json.dumps(fold_line(scrub_surrogates(text), _SHOWN), ensure_ascii=True)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _text(value: object, where: str, redact: Redactor) -> tuple[str, bool]:
    """An item's text: a non-blank string, surrogates scrubbed, masked, cut to CONTENT_LIMIT (True when cut)."""
    if not isinstance(value, str) or not value.strip():
        got = "an empty string" if isinstance(value, str) else _kind(value)
        raise _Invalid(f"{where} must be a non-empty string, not {got}")
    text = redact(scrub_surrogates(value))
    if len(text) <= CONTENT_LIMIT:
        return text, False
    return text[: CONTENT_LIMIT - 1] + "…", True


def _item(entry: object, number: int, redact: Redactor) -> tuple[PlanItem, bool]:
    where = f"todos[{number - 1}]"
    if not isinstance(entry, Mapping):
        raise _Invalid(f'{where} must be an object with "content" and "status", not {_kind(entry)}')
    for key in entry:
        if key not in _ITEM_KEYS and key not in _IGNORED_KEYS:
            raise _Invalid(f"{where} has an unknown key {_quoted(str(key))}; an item takes content, status and "
                           "activeForm")
    status = entry.get("status")
    if status not in STATUSES:
        got = _quoted(status) if isinstance(status, str) else _kind(status)
        raise _Invalid(f'{where}.status must be "pending", "in_progress" or "completed", not {got}')
    content, cut = _text(entry.get("content"), f"{where}.content", redact)
    active = entry.get("activeForm")
    if active is not None:
        active, active_cut = _text(active, f"{where}.activeForm", redact)
        cut = cut or active_cut
    return PlanItem(content, status, active), cut


def parse_todos(args: Mapping[str, Any], redact: Redactor | None = None) -> Parsed:
    """The plan in ``todo_write``'s arguments; ValueError (its message for the model) when they are not valid."""
    redact = redact if redact is not None else Redactor()
    try:
        for key in args:
            if key != "todos":
                raise _Invalid(f'unknown argument {_quoted(str(key))}; todo_write takes {{"todos": [...]}}')
        todos = args.get("todos")
        if not isinstance(todos, list):
            raise _Invalid(f'todos must be an array of {{"content", "status", "activeForm"}} objects, not '
                           f"{_kind(todos)}")
        if len(todos) > MAX_ITEMS:  # before reading any: a hostile list is refused whole, at once
            raise _Invalid(f"todos has {len(todos)} items; a plan holds at most {MAX_ITEMS}: merge or drop steps")
        items, cut = [], []
        for number, entry in enumerate(todos, 1):
            item, was_cut = _item(entry, number, redact)
            items.append(item)
            if was_cut:
                cut.append(number)
    except _Invalid as why:
        raise ValueError(str(why)) from None
    return Parsed(tuple(items), tuple(cut))


def result_text(parsed: Parsed) -> str:
    """``Plan updated: 2 of 5 items open.``: short, and a note when an item's text was cut."""
    plan = Plan(parsed.items)
    text = f"Plan updated: {plan.open} of {plan.total} item{'s' if plan.total != 1 else ''} open."
    if parsed.cut:
        numbers = ", ".join(str(number) for number in parsed.cut[:10]) + (" ..." if len(parsed.cut) > 10 else "")
        text += f" The text of item{'s' if len(parsed.cut) > 1 else ''} {numbers} was cut to {CONTENT_LIMIT} " \
                "characters."
    return text


def todo_write_tool() -> Tool:
    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        try:
            parsed = parse_todos(args, ctx.redact)
        except ValueError as why:
            return ToolOutput(f"Error: {why}", is_error=True)
        ctx.session_state[PLAN_KEY] = Plan(parsed.items)  # first: who hears the event reads the new plan
        ctx.notify(PlanUpdate(ctx.turn, parsed.items))
        return ToolOutput(result_text(parsed))

    return Tool(TODO_WRITE, _DESCRIPTION, _PARAMETERS, run)
