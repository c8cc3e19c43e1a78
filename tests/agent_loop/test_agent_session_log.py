"""The durable session log: format, torn lines, repair on reopen, resume, listing, write failures."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dsh.agent_loop import (
    Aborted,
    Agent,
    Completed,
    Disposed,
    EndReason,
    Failed,
    Interrupted,
    MaxTokens,
    OtherEnd,
    Rejected,
    SessionLog,
    ToolRegistry,
    default_root,
    list_sessions,
    load_session_file,
    resolve_session,
)
from dsh.agent_loop import events as ev
from dsh.agent_loop.session_log import INTERRUPTED_TOOL_OUTPUT
from dsh.llm import HarnessError, ToolCall
from dsh.llm.loopback.fault_server import Behaviour
from tests.agent_loop.agent_support import assert_well_formed, durable_types, echo_tool, read_log

REPO = Path(__file__).resolve().parents[2]


def open_turn_log(root: Path, *, answered: int = 1) -> SessionLog:
    """A log whose last turn has an assistant message with two tool calls and ``answered`` results."""
    log = SessionLog.create(root, cwd="/work")
    log.append(ev.TurnStart(1, "first"))
    log.append(ev.StepStart(1, 1))
    log.append(ev.AssistantMessage(1, 1, content="done", reasoning_content=None, tool_calls=(),
                                    finish_reason="stop", interrupted=False, usage=None))
    log.append(ev.TurnEnd(1, Completed()))
    log.append(ev.TurnStart(2, "second"))
    log.append(ev.StepStart(2, 1))
    calls = (ToolCall("c1", "read_file", "{}"), ToolCall("c2", "list_dir", "{}"))
    log.append(ev.AssistantMessage(2, 1, content="", reasoning_content="think", tool_calls=calls,
                                    finish_reason="tool_calls", interrupted=False, usage=None))
    for call in calls[:answered]:
        log.append(ev.ToolCallStart(2, call.id, call.name, "{}"))
        log.append(ev.ToolResult(2, call.id, call.name, "ok", is_error=False, diagnostic=None))
    log.close()
    return log


def test_create_writes_a_private_header_line(tmp_path):
    root = tmp_path / "state" / "sessions"
    log = SessionLog.create(root, cwd="/some/dir")
    header, records = read_log(log.path)
    assert set(header) == {"type", "version", "id", "createdAt", "cwd", "project"}
    assert (header["type"], header["version"], header["id"], header["cwd"]) == ("session", 1, log.id, "/some/dir")
    assert header["project"] == "/some/dir"  # no git work tree holds it: the directory is the project
    assert header["createdAt"].endswith("Z")
    assert records == []
    assert log.path == root / f"{log.id}.jsonl"
    assert stat.S_IMODE(log.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    log.close()


def test_records_have_contiguous_seq_and_one_line_each(tmp_path):
    log = SessionLog.create(tmp_path)
    for n in range(1, 4):
        log.append(ev.TurnStart(n, f"multi\nline {n}"))
        log.append(ev.TurnEnd(n, Completed()))
    log.close()
    _, records = read_log(log.path)
    assert [r["seq"] for r in records] == list(range(1, 7))
    assert {tuple(sorted(r)) for r in records} == {("data", "seq", "time", "type")}
    assert len(log.path.read_text().splitlines()) == 7


def test_a_torn_last_line_is_ignored_reported_and_cut_before_appending(tmp_path):
    log = open_turn_log(tmp_path, answered=2)
    with open(log.path, "ab") as file:
        file.write(b'{"type":"turn/end","seq":12,"ti')
    _, records, warnings = load_session_file(log.path)
    assert len(records) == 11 and records[-1]["type"] == "tool/result"
    assert warnings == [f"ignored a torn last line (31 bytes) in {log.path}"]

    reopened = SessionLog.open(log.path)
    assert reopened.load_warnings == warnings
    assert reopened.repaired_turn == 2
    reopened.close()
    _, records = read_log(log.path)  # every line whole again
    assert durable_types(records)[-2:] == ["tool/result", "turn/end"]
    assert records[-1]["data"] == {"turn": 2, "reason": {"kind": "interrupted"}}
    assert [r["seq"] for r in records] == list(range(1, 13))


def test_reopening_an_open_turn_appends_the_closers_once(tmp_path):
    log = open_turn_log(tmp_path, answered=1)
    before = log.path.read_bytes()
    reopened = SessionLog.open(log.id, root=tmp_path)
    assert reopened.repaired_turn == 2
    reopened.close()
    after = log.path.read_bytes()
    assert after.startswith(before)  # every earlier record intact, byte for byte
    _, records = read_log(log.path)
    closers = records[-2:]
    assert closers[0]["type"] == "tool/result"
    assert closers[0]["data"] == {"turn": 2, "id": "c2", "name": "list_dir", "output": INTERRUPTED_TOOL_OUTPUT,
                                  "is_error": True, "diagnostic": None}
    assert closers[1]["data"] == {"turn": 2, "reason": {"kind": "interrupted"}}
    assert_well_formed(records)

    again = SessionLog.open(log.id, root=tmp_path)
    assert again.repaired_turn is None
    again.close()
    assert log.path.read_bytes() == after


def test_unknown_end_kinds_are_ordinary_ends(tmp_path):
    log = SessionLog.create(tmp_path)
    log.append(ev.TurnStart(1, "p"))
    log.append(ev.TurnEnd(1, EndReason.from_dict({"kind": "from-the-future", "detail": 1})))
    log.close()
    reopened = SessionLog.open(log.path)
    assert reopened.repaired_turn is None and reopened.last_turn == 1
    reopened.close()
    reason = EndReason.from_dict({"kind": "from-the-future", "detail": 1})
    assert isinstance(reason, OtherEnd) and reason.kind == "from-the-future"
    assert reason.to_dict() == {"kind": "from-the-future", "detail": 1}


@pytest.mark.parametrize(
    "reason",
    [Completed(), MaxTokens(), Interrupted(), Disposed(), Aborted("cancelled"), Aborted(None),
     Rejected("no"), Failed("AUTH", "bad key", 1, 401, "req-1"), Failed("UNKNOWN", "x", 0)],
)
def test_reasons_round_trip(reason):
    assert EndReason.from_dict(json.loads(json.dumps(reason.to_dict()))) == reason


def test_reason_dicts_are_exact():
    assert Failed("AUTH", "m", 2).to_dict() == {"kind": "error", "code": "AUTH", "message": "m", "step": 2}
    assert Failed("SERVER", "m", 1, 503, "r").to_dict() == {
        "kind": "error", "code": "SERVER", "message": "m", "step": 1, "status": 503, "request_id": "r"}
    assert Aborted().to_dict() == {"kind": "aborted", "reason": "cancelled"}
    assert Aborted(None).to_dict() == {"kind": "aborted"}
    assert MaxTokens().to_dict() == {"kind": "max-tokens"}


def test_unreadable_middle_lines_are_skipped_and_reported(tmp_path):
    log = SessionLog.create(tmp_path)
    log.append(ev.TurnStart(1, "p"))
    log.close()
    with open(log.path, "ab") as file:
        file.write(b"garbage\n")
    _, records, warnings = load_session_file(log.path)
    assert len(records) == 1
    assert warnings == [f"skipped an unreadable record on line 3 of {log.path}"]


def test_a_file_that_is_not_a_session_log_is_refused(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"hello": 1}\n')
    with pytest.raises(HarnessError) as info:
        SessionLog.open(path)
    assert info.value.code == "SESSION_LOG"


def test_a_session_is_locked_while_open(tmp_path):
    log = SessionLog.create(tmp_path)
    with pytest.raises(HarnessError) as info:
        SessionLog.open(log.path)
    assert info.value.code == "SESSION_LOCKED"
    log.close()
    SessionLog.open(log.path).close()


def test_list_and_resolve_sessions(tmp_path):
    logs = [SessionLog.create(tmp_path, session_id=name) for name in ("20260101-aaa", "20260102-bbb", "20260103-bbc")]
    logs[0].append(ev.TurnStart(1, "  fix   the\nbuild  "))
    for n, log in enumerate(logs):
        log.close()
        os.utime(log.path, (1_700_000_000 + n, 1_700_000_000 + n))
    os.utime(logs[0].path, (1_800_000_000, 1_800_000_000))  # most recently written
    infos = list_sessions(tmp_path)
    assert [i.id for i in infos] == ["20260102-bbb", "20260103-bbc", "20260101-aaa"]
    assert (infos[-1].turns, infos[-1].title) == (1, "fix the build")
    assert resolve_session("last", tmp_path) == logs[0].path
    assert resolve_session("20260102-bbb", tmp_path) == logs[1].path
    assert resolve_session("20260101", tmp_path) == logs[0].path
    assert resolve_session(str(logs[2].path)) == logs[2].path
    with pytest.raises(HarnessError) as ambiguous:
        resolve_session("202601", tmp_path)
    assert ambiguous.value.code == "SESSION_AMBIGUOUS"
    with pytest.raises(HarnessError) as missing:
        resolve_session("nope", tmp_path)
    assert missing.value.code == "SESSION_NOT_FOUND"
    with pytest.raises(HarnessError) as traversal:
        resolve_session("../etc", tmp_path)
    assert traversal.value.code == "SESSION_NOT_FOUND"
    with pytest.raises(HarnessError) as empty:
        resolve_session("last", tmp_path / "empty")
    assert empty.value.code == "SESSION_NOT_FOUND"


def test_the_default_root_follows_xdg_state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_root() == tmp_path / "state" / "dsh" / "sessions"
    log = SessionLog.create()
    assert log.path.parent == tmp_path / "state" / "dsh" / "sessions"
    log.close()
    assert [info.id for info in list_sessions()] == [log.id]
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_root() == tmp_path / "home" / ".local" / "state" / "dsh" / "sessions"


# --- resume through the agent -------------------------------------------------------------------


@pytest.mark.anyio
async def test_resume_rebuilds_the_conversation_and_continues_turn_numbers(server, make_agent, session_root):
    server.push("tool_call", "text", "http_401", "reasoning", "text")
    tools = ToolRegistry([echo_tool("get_weather")])
    agent, _ = make_agent(server.url, tools=tools)
    assert await agent.run_turn("weather?") == Completed()
    assert (await agent.run_turn("fails")).kind == "error"
    assert await agent.run_turn("think") == Completed()
    live = agent.messages
    session_id = agent.session.id
    await agent.aclose()

    resumed, _ = make_agent(server.url, tools=tools, session=SessionLog.open(session_id, root=session_root))
    assert resumed.repaired_turn is None
    assert resumed.turn_number == 3
    assert resumed.messages == live
    assert await resumed.run_turn("and now?") == Completed()
    assert resumed.turn_number == 4
    sent = server.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user", "assistant", "user"]
    assert sent[0]["content"] == "weather?" and sent[4]["content"] == "think"  # the failed prompt is gone
    _, records = read_log(resumed.session.path)
    assert [r["data"]["turn"] for r in records if r["type"] == "turn/start"] == [1, 2, 3, 4]
    assert_well_formed(records)


@pytest.mark.anyio
async def test_agent_resume_repairs_and_reports_the_interrupted_turn(server, session_root):
    open_turn_log(session_root, answered=1)
    from dsh.llm import DeepSeekClient

    async with DeepSeekClient(base_url=server.url, api_key=None) as client:
        agent = Agent.resume(client, "last", root=session_root, tools=ToolRegistry(), cwd=session_root)
        assert agent.repaired_turn == 2 and agent.turn_number == 2
        assert await agent.run_turn("next") == Completed()
        assert agent.turn_number == 3
        await agent.aclose()
    sent = server.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "tool", "tool", "user"]
    assert sent[5] == {"role": "tool", "content": INTERRUPTED_TOOL_OUTPUT, "tool_call_id": "c2"}
    assert sent[3]["reasoning_content"] == "think"


# --- write failures -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_full_disk_ends_the_turn_with_a_session_log_error(server, make_agent):
    server.push(Behaviour("text"))
    agent, seen = make_agent(server.url)
    log = agent.session
    assert await agent.run_turn("one") == Completed()
    before = log.path.read_bytes()
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, log._fd)  # every later write(2) on the log gets ENOSPC from the kernel
    finally:
        os.close(full)
    reason = await agent.run_turn("two")
    assert isinstance(reason, Failed) and reason.code == "SESSION_LOG"
    assert reason.message == f"session log write failed ({log.path}): [Errno 28] No space left on device"
    assert seen.of("turn/end")[-1]["reason"] == reason.to_dict()  # still told live
    again = await agent.run_turn("three")
    assert isinstance(again, Failed) and again.code == "SESSION_LOG"
    assert again.message.startswith(f"session log {log.path} is unusable after an earlier failure: ")
    assert log.path.read_bytes() == before
    assert len(server.requests) == 1  # nothing was sent while nothing could be recorded
    # Each failed turn was still announced live, so the REPL prints its "[main turn N] " header.
    assert [data["turn"] for data in seen.of("turn/start")] == [1, 2, 3]


_PARTIAL_WRITE_CHILD = r"""
import resource, signal, sys
sys.path.insert(0, sys.argv[1])
from dsh.agent_loop import Rejected, SessionLog, events as ev
from dsh.llm import HarnessError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
log = SessionLog.create(sys.argv[2])
log.append(ev.TurnStart(1, "small"))
size = log.path.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))
try:
    log.append(ev.TurnEnd(1, Rejected("x" * 5000)))
except HarnessError as exc:
    print(exc.code, exc.__cause__.errno == 27)
print(log.path)
"""


def test_a_partial_write_is_cut_back_so_the_file_stays_whole_lines(tmp_path):
    """RLIMIT_FSIZE makes the kernel accept only part of the line, then refuse (EFBIG)."""
    done = subprocess.run([sys.executable, "-c", _PARTIAL_WRITE_CHILD, str(REPO), str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=True)
    code_line, path_line = done.stdout.splitlines()
    assert code_line == "SESSION_LOG True"
    _, records = read_log(Path(path_line))
    assert durable_types(records) == ["turn/start"]


# --- the bulk parse and its line-by-line fallback read every log the same way --------------------

_RECORD_LINES = [
    b'{"type":"turn/start","seq":1,"time":"t","data":{"turn":1,"prompt":"p"}}',
    b'{"type":"step/start","seq":2,"time":"t","data":{"turn":1,"step":1}}',
    b'{"type":"turn/end","seq":3,"time":"t","data":{"turn":1,"reason":{"kind":"completed"}}}',
    b'{"type":"job/notice","seq":4,"time":"t","data":{"id":"j","text":"done"}}',
]
_TWO_VALUES = b'{"type":"x","seq":1},{"type":"y","seq":2}'  # one line: unreadable, not two records
_SPLIT_HEAD, _SPLIT_TAIL = b'{"type":"x","seq":2,"data":[1', b"2]}"  # one value over two lines: two unreadable
_ODD_LINES = [
    b"", b"   ", b"garbage", b"[1]", b'"text"', b"{}", b'{"type":7,"seq":5}', b'{"type":"x"}',
    b'{"type":"x","seq":"9"}', b'{"type":"x","seq":9}', b'{"type":"x","seq":true}', b" " + _RECORD_LINES[0] + b" ",
    _TWO_VALUES,
    _SPLIT_HEAD, _SPLIT_TAIL,
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(0, len(_RECORD_LINES)),
    st.lists(st.tuples(st.integers(0, len(_RECORD_LINES)), st.sampled_from(_ODD_LINES)), max_size=3),
    st.booleans(),
)
@example(0, [(0, _TWO_VALUES)], False)
@example(1, [(1, _SPLIT_HEAD), (2, _SPLIT_TAIL)], False)
def test_the_bulk_parse_reads_every_log_as_the_line_by_line_reader(tmp_path, records, odd, torn):
    from dsh.agent_loop.session_read import Loaded, parse_body_by_line

    body = list(_RECORD_LINES[:records])  # a regular log ...
    for position, line in odd:  # ... with irregular lines among its records
        body.insert(position, line)
    header = b'{"type":"session","version":1,"id":"s","createdAt":"t","cwd":"/"}'
    raw = b"\n".join([header, *body]) + b"\n" + (b'{"type":"tur' if torn else b"")
    path = tmp_path / "s.jsonl"
    path.write_bytes(raw)
    _, records, warnings = load_session_file(path)
    lines = raw.split(b"\n")[:-1]
    reference = Loaded({}, [], [], 0)
    expected_records = parse_body_by_line(lines[1:], path, reference, 2)
    expected_warnings = reference.warnings + ([f"ignored a torn last line (12 bytes) in {path}"] if torn else [])
    assert records == expected_records
    assert warnings == expected_warnings


def test_a_regular_log_takes_the_bulk_path_and_the_collector_is_restored(tmp_path):
    import gc

    from dsh.agent_loop import session_read

    log = open_turn_log(tmp_path)
    raw = log.path.read_bytes()
    assert session_read._parse_clean_body(raw.split(b"\n")[1:-1]) == read_log(log.path)[1]
    assert gc.isenabled()
    SessionLog.open(log.path).close()
    assert gc.isenabled()
    gc.disable()
    try:
        SessionLog.open(log.path).close()
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
