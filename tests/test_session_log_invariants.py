"""The session-log checker accepts what dsh writes (and what a repair appends) and rejects each broken rule."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.session_log import INTERRUPTED_TOOL_OUTPUT, SessionLog
from tests.session_log_invariants import assert_header, assert_well_formed, read_log

Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def tool_call_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Records]:
    """The log of one real `dsh --demo --scenario tool-call -p` turn: two steps, one tool round trip."""
    home = tmp_path_factory.mktemp("tool-call-log")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CONFIG_HOME": str(home / "config"), "LANG": "C.UTF-8"}
    result = subprocess.run([sys.executable, "-m", "dsh.repl", "--demo", "--scenario", "tool-call", "-p", "hi"],
                            cwd=home, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    (path,) = (home / "state").rglob("*.jsonl")
    return read_log(path)


def test_a_real_turn_with_a_tool_call_is_well_formed(tool_call_log: tuple[dict[str, Any], Records]) -> None:
    header, records = tool_call_log
    assert_header(header)
    assert [record["type"] for record in records] == [
        "turn/start", "step/start", "assistant/message", "tool/call", "tool/result", "step/start",
        "assistant/message", "turn/end",
    ]
    assert_well_formed(records)


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def test_a_repaired_log_is_well_formed(tmp_path: Path) -> None:
    """A process died mid-tool: opening the log answers both calls (one never announced) and ends the turn."""
    path = tmp_path / "crashed.jsonl"
    time = "2026-01-01T00:00:00.000Z"
    calls = [{"id": "a", "name": "list_dir", "arguments": "{}"}, {"id": "b", "name": "read_file", "arguments": "{}"}]
    body = [
        ("turn/start", {"turn": 1, "prompt": "hi"}),
        ("step/start", {"turn": 1, "step": 1}),
        ("assistant/message", {"turn": 1, "step": 1, "content": "", "reasoning_content": None, "tool_calls": calls,
                               "finish_reason": "tool_calls", "interrupted": False, "usage": None}),
        ("tool/call", {"turn": 1, "id": "a", "name": "list_dir", "arguments": "{}"}),
    ]
    header = {"type": "session", "version": 1, "id": "crashed", "createdAt": time, "cwd": str(tmp_path)}
    path.write_text(_line(header) + "".join(
        _line({"type": kind, "seq": seq, "time": time, "data": data}) for seq, (kind, data) in enumerate(body, 1)
    ))
    SessionLog.open(path).close()
    _, records = read_log(path)
    assert [(r["type"], r["data"].get("id"), r["data"].get("output")) for r in records[4:]] == [
        ("tool/result", "a", INTERRUPTED_TOOL_OUTPUT),
        ("tool/result", "b", INTERRUPTED_TOOL_OUTPUT),
        ("turn/end", None, None),
    ]
    assert_well_formed(records)


def _renumber(records: Records) -> Records:
    for seq, record in enumerate(records, 1):
        record["seq"] = seq
    return records


def _drop(kind: str) -> Callable[[Records], Records]:
    def change(records: Records) -> Records:
        records.remove(_first(records, kind))
        return _renumber(records)

    return change


def _first(records: Records, kind: str) -> dict[str, Any]:
    return next(r for r in records if r["type"] == kind)


def _set(kind: str, **data: Any) -> Callable[[Records], Records]:
    def change(records: Records) -> Records:
        _first(records, kind)["data"].update(data)
        return records

    return change


def _repeat(kind: str) -> Callable[[Records], Records]:
    def change(records: Records) -> Records:
        record = _first(records, kind)
        records.insert(records.index(record) + 1, copy.deepcopy(record))
        return _renumber(records)

    return change


def _gap(records: Records) -> Records:
    records[3]["seq"] += 1
    return records


def _retype(records: Records) -> Records:
    records[0]["type"] = "text/delta"
    return records


def _outside(records: Records) -> Records:
    records.append({**copy.deepcopy(records[1]), "seq": len(records) + 1})
    return records


def _cache_drop(turn: int, before_end: bool) -> Callable[[Records], Records]:
    def change(records: Records) -> Records:
        drop = {"type": "cache/drop", "seq": 0, "time": records[-1]["time"],
                "data": {"turn": turn, "rate": 0.1, "previous": 0.9, "change": "the earlier messages changed"}}
        records.insert(len(records) - 1 if before_end else len(records), drop)
        return _renumber(records)

    return change


BROKEN: dict[str, tuple[Callable[[Records], Records], str]] = {
    "a seq gap": (_gap, "seq is not 1, 2, 3"),
    "a live-only record type": (_retype, "'text/delta' is not a durable type"),
    "a turn without its end": (_drop("turn/end"), "has no turn/end"),
    "a turn ended twice": (_repeat("turn/end"), "outside a turn"),
    "a record after the turn ended": (_outside, "outside a turn"),
    "a record of another turn": (_set("tool/call", turn=2), "turn 2 inside turn 1"),
    "a skipped step": (_set("step/start", step=2), "step 2 after step 0"),
    "a second message in a step": (_repeat("assistant/message"), "a second assistant/message in step 1"),
    "a message of another step": (_set("assistant/message", step=2), "a message of step 2 in step 1"),
    "an unanswered tool call": (_drop("tool/result"), "with unanswered tool calls"),
    "a result for a call nobody made": (_set("tool/result", id="nobody"), "a result for unknown call 'nobody'"),
    "a call the message did not make": (_set("tool/call", id="nobody"), "did not make"),
    "a call announced twice": (_repeat("tool/call"), "announced twice"),
    "a result given twice": (_repeat("tool/result"), "a second result"),
    "a cache drop inside its turn": (_cache_drop(1, before_end=True), "not after the end of turn 1"),
    "a cache drop of another turn": (_cache_drop(2, before_end=False), "not after the end of turn 1"),
}


def test_a_cache_drop_after_its_turn_s_end_is_well_formed(tool_call_log: tuple[dict[str, Any], Records]) -> None:
    assert_well_formed(_cache_drop(1, before_end=False)(copy.deepcopy(tool_call_log[1])))


@pytest.mark.parametrize("broken", list(BROKEN))
def test_each_broken_rule_is_caught(tool_call_log: tuple[dict[str, Any], Records], broken: str) -> None:
    change, message = BROKEN[broken]
    records = change(copy.deepcopy(tool_call_log[1]))
    with pytest.raises(AssertionError, match=re.escape(message)):
        assert_well_formed(records)
