"""The plan tool, todo_write (docs/tools.md, "The plan: todo_write"): Claude Code's TodoWrite arguments read unchanged,
hostile ones refused with an error the model can fix, the plan kept as a durable ``plan/update`` event, and a resumed
session's plan restored from its log. Real tool calls through the registry; real sessions against the fault server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.agent_loop.events import Event, PlanUpdate
from dsh.agent_loop.permissions import Mode, Permissions
from dsh.agent_loop.plan import CONTENT_LIMIT, MAX_ITEMS, PLAN_KEY, STATUSES, Plan, PlanItem, current_plan
from dsh.agent_loop.session import Session
from dsh.agent_loop.tools import ToolContext, ToolOutput, default_tools, run_tool_call
from dsh.llm import ToolCall
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.redact import Redactor
from tests.agent_loop.session_configs import StubConfig

KEY = "sk-todoWriteTestKey0000000000000000"

# What Claude Code sends, over its versions: activeForm (2.x), id and priority (1.x).
CLAUDE_CODE = {"todos": [
    {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
    {"content": "Fix the off-by-one", "status": "in_progress", "activeForm": "Fixing the off-by-one"},
    {"content": "Run the tests", "status": "pending", "id": "3", "priority": "high"},
]}


class Heard:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.state: dict[str, Any] = {}

    def ctx(self, tmp_path: Path, mode: Mode = Mode.DEFAULT) -> ToolContext:
        return ToolContext(cwd=tmp_path, turn=4, notify=self.events.append, session_state=self.state,
                           redact=Redactor([KEY]), permissions=Permissions(mode))


async def _call(heard: Heard, tmp_path: Path, arguments: object, mode: Mode = Mode.DEFAULT) -> ToolOutput:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return await run_tool_call(default_tools(), ToolCall("call_t", "todo_write", text), heard.ctx(tmp_path, mode))


@pytest.mark.anyio
async def test_claude_codes_arguments_make_the_plan_and_a_short_result(tmp_path: Path) -> None:
    heard = Heard()
    out = await _call(heard, tmp_path, CLAUDE_CODE)
    assert (out.text, out.is_error) == ("Plan updated: 2 of 3 items open.", False)
    items = (PlanItem("Read the parser", "completed", "Reading the parser"),
             PlanItem("Fix the off-by-one", "in_progress", "Fixing the off-by-one"),
             PlanItem("Run the tests", "pending", None))  # id and priority: accepted, not kept
    assert heard.events == [PlanUpdate(4, items)]
    assert heard.state[PLAN_KEY] == Plan(items)
    done = {"todos": [{**item, "status": "completed"} for item in CLAUDE_CODE["todos"]]}
    assert (await _call(heard, tmp_path, done)).text == "Plan updated: 0 of 3 items open."
    assert (await _call(heard, tmp_path, {"todos": []})).text == "Plan updated: 0 of 0 items open."
    assert heard.state[PLAN_KEY] == Plan(()) and len(heard.events) == 3  # the whole list each call: now empty


@pytest.mark.anyio
async def test_plan_mode_lets_it_run(tmp_path: Path) -> None:
    heard = Heard()
    out = await _call(heard, tmp_path, CLAUDE_CODE, Mode.PLAN)
    assert (out.text, out.is_error) == ("Plan updated: 2 of 3 items open.", False)


BAD: list[tuple[object, str]] = [
    ("{}", 'Error: missing required argument "todos" for tool "todo_write"'),
    ({"todos": "read, then write"}, 'Error: todos must be an array of {"content", "status", "activeForm"} objects, '
                                    "not a string"),
    ({"todos": None}, 'Error: todos must be an array of {"content", "status", "activeForm"} objects, not null'),
    ({"todos": [], "merge": True}, 'Error: unknown argument "merge"; todo_write takes {"todos": [...]}'),
    ({"todos": [["Read", "pending"]]}, 'Error: todos[0] must be an object with "content" and "status", not an array'),
    ({"todos": [{"content": "Read", "status": "done"}]},
     'Error: todos[0].status must be "pending", "in_progress" or "completed", not "done"'),
    ({"todos": [{"content": "Read"}]},
     'Error: todos[0].status must be "pending", "in_progress" or "completed", not null'),
    ({"todos": [{"content": "Read", "status": "pending"}, {"content": "  \n", "status": "pending"}]},
     "Error: todos[1].content must be a non-empty string, not an empty string"),
    ({"todos": [{"content": 7, "status": "pending"}]},
     "Error: todos[0].content must be a non-empty string, not a number"),
    ({"todos": [{"content": "Read", "status": "pending", "activeForm": False}]},
     "Error: todos[0].activeForm must be a non-empty string, not a boolean"),
    ({"todos": [{"content": "Read", "status": "pending", "note": "x"}]},
     'Error: todos[0] has an unknown key "note"; an item takes content, status and activeForm'),
    # A hostile key or value comes back folded to one line, cut, escaped to ASCII: inert.
    ({"todos": [{"content": "Read", "status": "pending", "\x1b]0;pwned\x07\n" + "k" * 100: 1}]},
     'Error: todos[0] has an unknown key "]0;pwned ' + "k" * 30 + '\\u2026"; an item takes content, status and '
                                                                    "activeForm"),
    ({"todos": [{"content": "Read", "status": "\ud800pend"}]},
     'Error: todos[0].status must be "pending", "in_progress" or "completed", not "\\ufffdpend"'),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("arguments", "error"), BAD)
async def test_bad_arguments_are_an_error_the_model_can_fix(tmp_path: Path, arguments: object, error: str) -> None:
    heard = Heard()
    out = await _call(heard, tmp_path, arguments)
    assert (out.text, out.is_error) == (error, True)
    assert heard.events == [] and PLAN_KEY not in heard.state  # nothing kept, nothing logged


@pytest.mark.anyio
async def test_ten_thousand_items_are_refused_whole_and_at_once(tmp_path: Path) -> None:
    heard = Heard()
    many = {"todos": [{"content": f"step {n}", "status": "pending"} for n in range(10_000)]}
    started = time.monotonic()
    out = await _call(heard, tmp_path, many)
    assert out.text == f"Error: todos has 10000 items; a plan holds at most {MAX_ITEMS}: merge or drop steps"
    assert time.monotonic() - started < 2 and heard.events == []
    exactly = {"todos": many["todos"][:MAX_ITEMS]}
    assert (await _call(heard, tmp_path, exactly)).text == f"Plan updated: {MAX_ITEMS} of {MAX_ITEMS} items open."


@pytest.mark.anyio
async def test_long_texts_are_cut_and_the_result_says_which(tmp_path: Path) -> None:
    heard = Heard()
    todos = [{"content": "short", "status": "pending"},
             {"content": "x" * 10_000_000, "status": "in_progress"},
             {"content": "fine", "status": "pending", "activeForm": "y" * (CONTENT_LIMIT + 1)}]
    out = await _call(heard, tmp_path, {"todos": todos})
    assert out.text == f"Plan updated: 3 of 3 items open. The text of items 2, 3 was cut to {CONTENT_LIMIT} characters."
    (update,) = heard.events
    assert isinstance(update, PlanUpdate)
    assert update.items[1].content == "x" * (CONTENT_LIMIT - 1) + "…"
    assert update.items[2].active_form == "y" * (CONTENT_LIMIT - 1) + "…"
    assert all(len(item.content) <= CONTENT_LIMIT for item in update.items)


@pytest.mark.anyio
async def test_escapes_are_kept_to_be_shown_inert_surrogates_replaced_and_the_key_masked(tmp_path: Path) -> None:
    heard = Heard()
    content = f"\x1b[2J\x1b]0;pwned\x07 use {KEY}\n\ud800 then"
    out = await _call(heard, tmp_path, {"todos": [{"content": content, "status": "pending"}]})
    assert out.text == "Plan updated: 1 of 1 item open."
    (update,) = heard.events
    assert isinstance(update, PlanUpdate)
    # The escapes stay (the front ends' sanitizer shows them as pictures); the key and the lone surrogate do not.
    assert update.items[0].content == "\x1b[2J\x1b]0;pwned\x07 use ***\n\ufffd then"
    json.dumps(update.items[0].content).encode("utf-8")  # a log line and a frame can hold it


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=8)
_items = st.fixed_dictionaries({"content": st.text(max_size=20) | _values,
                                "status": st.sampled_from([*STATUSES, "done"]) | _values},
                               optional={"activeForm": st.text(max_size=8) | _values, "id": _values,
                                         "priority": _values, "x": _values})


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["todos", "todo"]), st.lists(_items, max_size=4) | _values, max_size=2))
def test_any_arguments_give_an_error_or_a_plan_within_its_bounds(tmp_path_factory: Any, arguments: dict) -> None:
    heard = Heard()
    out = anyio.run(_call, heard, Path("/"), arguments)
    if out.is_error:
        assert out.text.startswith("Error: ") and "\n" not in out.text and heard.events == []
        return
    (update,) = heard.events
    assert isinstance(update, PlanUpdate) and len(update.items) <= MAX_ITEMS
    for item in update.items:
        assert item.status in STATUSES and item.content.strip() and len(item.content) <= CONTENT_LIMIT
    assert out.text.startswith(f"Plan updated: {Plan(update.items).open} of {len(update.items)} item")


# --- the plan in a real session: logged, resumed, cleared by /new ----------------------------------------------


def _todo_write(todos: list[dict[str, str]], call_id: str = "call_p") -> Behaviour:
    return Behaviour("tool_call", id=call_id, name="todo_write", arguments={"todos": todos})


OPEN = [{"content": "Read", "status": "completed"},
        {"content": "Write", "status": "in_progress", "activeForm": "Writing"},
        {"content": "Test", "status": "pending"}]
RESTORED = Plan((PlanItem("Read", "completed"), PlanItem("Write", "in_progress", "Writing"), PlanItem("Test")))


def test_the_plan_is_logged_restored_by_a_resume_and_cleared_by_new(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    script = [_todo_write(OPEN), Behaviour("text", text="done")]

    async def main(server: FaultServer) -> None:
        config = StubConfig(base_url=server.url, api_key=KEY)
        first = Session(config, sessions_root=root, project_context=False)
        await first.start()
        try:
            assert current_plan(first) is None
            await first.run_turn("plan it")
            assert current_plan(first) == RESTORED
            ident = first.id
        finally:
            await first.aclose()
        again = Session(config, sessions_root=root, project_context=False)
        await again.start(resume=ident, defer_agent=True)
        try:
            assert current_plan(again) == RESTORED  # before the agent is built: the log's last plan
            again.ensure_agent()
            assert current_plan(again) == RESTORED  # the agent holds it now
            await again.new_session()
            assert current_plan(again) is None  # /new: a new conversation, no plan
        finally:
            await again.aclose()

    with FaultServer(script=script) as server:
        anyio.run(main, server)
    records = [json.loads(line) for line in next(root.glob("*.jsonl")).read_text().splitlines()[1:]]
    kinds = [record["type"] for record in records]
    assert kinds[kinds.index("tool/call"):kinds.index("tool/result") + 1] == ["tool/call", "plan/update",
                                                                               "tool/result"]
    update = records[kinds.index("plan/update")]["data"]
    assert update == {"turn": 1, "items": [{"content": "Read", "status": "completed"},
                                           {"content": "Write", "status": "in_progress", "active_form": "Writing"},
                                           {"content": "Test", "status": "pending"}]}
