"""The plan the model keeps with todo_write, as the front ends show it (docs/tools.md, "The plan: todo_write";
docs/contracts.md, "Turn ends"): the turn-end line of a completed turn with open items, ``--output-format json``'s
counts, the ``plan/update`` stream-json event, ``dsh sessions show``, ``--resume``, ``/plan`` and ``/new``, and ACP's
``plan`` session update. Real ``dsh`` processes against the loopback fault server; exact lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from acp import schema

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries
from tests.repl.test_acp_agent import Client, _dsh_acp

KEY = "sk-planFrontEndsTestKey000000000000"
OPEN = [{"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Fix the off-by-one", "status": "in_progress", "activeForm": "Fixing the off-by-one"},
        {"content": "Run the tests\x1b[31m", "status": "pending", "id": "3", "priority": "high"}]
DONE = [{**item, "status": "completed"} for item in OPEN]
CALL = ('  [tool call] todo_write({"todos": [{"content": "Read the parser", "status": "completed", "activeForm": '
        '"Reading the parser"}, {"content": "Fix the off-by-one", "status": "in_progress", "activeForm": "Fixing the '
        'off-by-one"}, {"content": "Run the tests\\u001b[31m", "status": "pending", "id": "3", "priority": "high"}]})')
BLOCK = ["  [plan] 2 of 3 open", "    [x] Read the parser", "    [>] Fix the off-by-one",
         "    [ ] Run the tests␛[31m", "  [tool result] Plan updated: 2 of 3 items open."]
STILL_OPEN = "[turn completed] 2 of 3 plan items still open"


def _todo_write(todos: list[dict[str, str]]) -> Behaviour:
    return Behaviour("tool_call", id="call_p", name="todo_write", arguments={"todos": todos}, reasoning="")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done")).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_a_completed_turn_with_open_items_says_so_and_a_finished_plan_says_nothing(home: Path,
                                                                                    server: FaultServer) -> None:
    server.push(_todo_write(OPEN))
    first = dsh(home, server, "-p", "fix it")
    assert (first.returncode, first.stdout) == (0, "done\n")
    assert first.stderr.splitlines() == [CALL, *BLOCK, STILL_OPEN]
    # The model is told the short result, nothing more.
    assert server.requests[1].json["messages"][-1]["content"] == "Plan updated: 2 of 3 items open."
    server.push(_todo_write(DONE))
    second = dsh(home, server, "-p", "finish it", "--resume", "last")
    assert (second.returncode, second.stdout) == (0, "done\n")
    assert second.stderr.splitlines()[-2:] == ["    [x] Run the tests␛[31m",
                                               "  [tool result] Plan updated: 0 of 3 items open."]


def test_json_carries_the_open_count_a_resumed_plan_counts_and_no_plan_is_null(home: Path,
                                                                               server: FaultServer) -> None:
    none = json.loads(dsh(home, server, "-p", "hello", "--output-format", "json").stdout)
    assert (none["plan_open"], none["plan_total"], none["text"]) == (None, None, "done")
    server.push(_todo_write(OPEN))
    planned = dsh(home, server, "-p", "plan", "--output-format", "json")
    result = json.loads(planned.stdout)
    assert (planned.returncode, result["plan_open"], result["plan_total"]) == (0, 2, 3)
    assert planned.stderr.splitlines()[-1] == STILL_OPEN
    # A resumed session's plan is the session's: a turn that does not touch it still reports it.
    resumed = dsh(home, server, "-p", "more", "--resume", "last", "--output-format", "json")
    result = json.loads(resumed.stdout)
    assert (result["plan_open"], result["plan_total"]) == (2, 3)
    assert resumed.stderr.splitlines() == [STILL_OPEN]


def test_stream_json_writes_the_plan_update_between_the_call_and_its_result(home: Path, server: FaultServer) -> None:
    server.push(_todo_write(OPEN))
    result = dsh(home, server, "-p", "plan", "--output-format", "stream-json")
    events = [json.loads(line) for line in result.stdout.splitlines()[1:]]
    kinds = [event["type"] for event in events]
    at = kinds.index("plan/update")
    assert kinds[at - 1:at + 2] == ["tool/call", "plan/update", "tool/result"]
    assert events[at] == {"type": "plan/update", "data": {"turn": 1, "items": [
        {"content": "Read the parser", "status": "completed", "active_form": "Reading the parser"},
        {"content": "Fix the off-by-one", "status": "in_progress", "active_form": "Fixing the off-by-one"},
        {"content": "Run the tests\x1b[31m", "status": "pending"}]}}
    assert "\x1b" not in result.stdout  # ASCII-only JSON: the escape is \u001b


def test_sessions_show_resume_plan_and_new(home: Path, server: FaultServer) -> None:
    server.push(_todo_write(OPEN))
    assert dsh(home, server, "-p", "plan").returncode == 0
    shown = dsh(home, server, "sessions", "show", "last")
    assert (shown.returncode, shown.stderr) == (0, "")
    lines = shown.stdout.splitlines()
    assert lines[1:] == ["> plan", "[main turn 1] ", CALL, *BLOCK, "done", STILL_OPEN]
    # Resumed (piped), the plan is printed once after the recap; /plan shows it whole; /new starts without one.
    resumed = dsh(home, server, "--resume", "last", stdin="/plan\n/new\n/plan\n")
    assert resumed.returncode == 0, resumed.stderr
    plan = ["plan: 2 of 3 items open", "  [x] Read the parser", "  [>] Fix the off-by-one", "  [ ] Run the tests␛[31m"]
    out = resumed.stdout.splitlines()
    ident = lines[0].split(" · ")[0].removeprefix("session ")
    assert out[:3] == [f"resumed session {ident} (1 turn)", "  turn 1 > plan", "         < done"]
    assert out[3:7] == plan and out[7:11] == plan  # the resume's, then /plan's
    assert out[11].startswith("new session ") and out[12:] == ["no plan yet (the model keeps one with todo_write)"]


@pytest.mark.anyio
async def test_acp_sends_the_plan_as_a_plan_session_update(tmp_path: Path) -> None:
    script = [_todo_write(OPEN), Behaviour("text", text="planned")]
    async with FaultServer(script=script) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            response = await agent.prompt(session_id, "plan it")
    assert response.stop_reason == "end_turn"
    (update,) = client.of(schema.AgentPlanUpdate)
    assert [(entry.content, entry.status, entry.priority) for entry in update.entries] == [
        ("Read the parser", "completed", "medium"), ("Fix the off-by-one", "in_progress", "medium"),
        ("Run the tests\x1b[31m", "pending", "medium")]
    (start,) = client.of(schema.ToolCallStart)
    assert (start.title, start.kind) == ("todo_write", "think")
    assert canaries.API_KEY not in json.dumps(client.frames)


def test_a_loaded_session_replays_its_plans_in_order_masked() -> None:
    from dsh.agent_loop.events import PlanUpdate, TurnStart, to_wire
    from dsh.agent_loop.plan import PlanItem
    from dsh.llm import Redactor
    from dsh.repl.acp_updates import history_updates

    records = [to_wire(TurnStart(1, "plan")),
               to_wire(PlanUpdate(1, (PlanItem(f"use {KEY}\ud800", "in_progress"),))),
               to_wire(PlanUpdate(1, (PlanItem("done", "completed"),))),
               {"type": "plan/update", "data": {"turn": 1, "items": [{"content": 3, "status": "later"}, "junk"]}}]
    updates = history_updates(records, Redactor([KEY]), "/tree")
    plans = [[(e["content"], e["status"]) for e in u["entries"]] for u in updates if u["sessionUpdate"] == "plan"]
    assert plans == [[("use ***\ufffd", "in_progress")], [("done", "completed")], [("", "pending")]]
