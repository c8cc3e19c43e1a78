"""Session files at scale and only regular files (issue 13 §6): see docs/architecture.md (the session log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop import SessionLog, list_sessions, load_session_file
from dsh.agent_loop import events as ev
from dsh.agent_loop.reasons import Completed, Rejected
from dsh.agent_loop.resume import open_session
from dsh.agent_loop.session_files import SessionLogError
from dsh.agent_loop.session_list import _info, _record_turn

REPO = Path(__file__).resolve().parents[2]


def _log(root: Path, turns: int = 2, output: str = "out") -> SessionLog:
    log = SessionLog.create(root, cwd=root)
    for turn in range(1, turns + 1):
        log.append(ev.TurnStart(turn, f"prompt {turn}"))
        log.append(ev.StepStart(turn, 1))
        log.append(ev.ToolResult(turn, "c", "read_file", output))
        log.append(ev.TurnEnd(turn, Completed()))
    return log


def test_a_symlink_to_dev_zero_is_refused_with_one_line_and_left_out_of_listing(tmp_path):
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    assert list_sessions(tmp_path) == []
    with pytest.raises(SessionLogError) as caught:
        SessionLog.open("zero", root=tmp_path)
    expected = f"session log {tmp_path / 'zero.jsonl'} is a symbolic link; dsh opens only regular files"
    assert str(caught.value) == expected


def test_a_symlink_to_another_log_is_refused_and_that_file_is_untouched(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    target = _log(other)
    target.close()
    with open(target.path, "ab") as file:
        file.write(b'{"type":"turn/start","seq":9,"ti')  # a torn tail open() would otherwise "repair"
    before = target.path.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.path)
    with pytest.raises(SessionLogError, match="is a symbolic link"):
        SessionLog.open("link", root=tmp_path)
    with pytest.raises(SessionLogError, match="is a symbolic link"):
        SessionLog.open(str(link))
    assert list_sessions(tmp_path) == []
    assert target.path.read_bytes() == before


def test_a_fifo_blocks_neither_listing_nor_resume(tmp_path):
    _log(tmp_path).close()
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert [info.turns for info in list_sessions(tmp_path)] == [2]
    with pytest.raises(SessionLogError) as caught:
        SessionLog.open("fifo", root=tmp_path)
    assert str(caught.value) == f"session log {tmp_path / 'fifo.jsonl'} is not a regular file (a FIFO)"


def test_a_forged_lone_surrogate_resumes_and_the_next_request_is_valid_utf8(tmp_path):
    log = _log(tmp_path, turns=1)
    log.close()
    with open(log.path, "ab") as file:
        file.write(b'{"type":"turn/start","seq":5,"time":"t","data":{"turn":2,"prompt":"bad \\ud800 one"}}\n')
        file.write(b'{"type":"step/start","seq":6,"time":"t","data":{"turn":2,"step":1}}\n')
        file.write(b'{"type":"assistant/message","seq":7,"time":"t","data":{"turn":2,"step":1,"content":"x\\udfff",'
                   b'"reasoning_content":null,"tool_calls":[],"finish_reason":"stop","interrupted":false,"usage":null}}\n')
        file.write(b'{"type":"turn/end","seq":8,"time":"t","data":{"turn":2,"reason":{"kind":"completed"}}}\n')
    session, conversation = open_session(log.path.stem, root=tmp_path)
    session.close()
    body = json.dumps([m.content for m in conversation.messages], ensure_ascii=False).encode("utf-8")
    assert "bad \ufffd one" in body.decode() and "x\ufffd" in body.decode()


def test_load_warnings_are_one_line_with_the_details_kept(tmp_path):
    log = _log(tmp_path)
    log.close()
    with open(log.path, "ab") as file:
        file.write(b"garbage\n" * 30 + b'{"type":"x","seq":99,"time":"t","data":{}}\n' + b'{"type":"tur')
    reopened = SessionLog.open(log.path)
    reopened.close()
    assert reopened.load_summary == (
        f"session log {log.path}: ignored a torn last line (12 bytes); skipped 30 unreadable records; "
        "1 sequence gap (details in dsh.log)"
    )
    assert len(reopened.load_warnings) == 21  # 20 details at most, plus the torn tail, whatever a log holds


_BIG_CHILD = r"""
import resource, sys, tracemalloc
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from dsh.agent_loop import list_sessions
tracemalloc.start()
infos = list_sessions(Path(sys.argv[2]))
peak = tracemalloc.get_traced_memory()[1]
print(len(infos), infos[0].turns, infos[0].title, peak)
"""


def test_listing_a_200mb_log_reads_only_its_head_and_tail(tmp_path):
    log = _log(tmp_path, turns=1, output="x" * (1 << 20))
    log.close()
    line = log.path.read_bytes().split(b"\n")[3] + b"\n"
    with open(log.path, "ab") as file:  # 200 MB of records, then one more turn
        for _ in range(200):
            file.write(line)
    again = SessionLog.open(log.path)  # 200 sequence gaps, fine
    again.append(ev.TurnStart(7, "last one"))
    again.append(ev.TurnEnd(7, Completed()))
    again.close()
    assert log.path.stat().st_size > 200_000_000
    done = subprocess.run([sys.executable, "-c", _BIG_CHILD, str(REPO), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=True)
    words = done.stdout.split()
    assert (words[0], words[1], " ".join(words[2:-1])) == ("1", "7", "prompt 1")
    assert int(words[-1]) < 2 << 20  # bytes traced while listing: the head and tail windows, not the file


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 6), st.integers(0, 4000), st.data())
def test_the_tail_reader_agrees_with_a_full_read_of_the_valid_prefix(tmp_path, turns, output_size, data):
    root = tmp_path / f"t{turns}-{output_size}"
    root.mkdir(exist_ok=True)
    for stale in root.iterdir():
        stale.unlink()
    log = _log(root, turns=turns, output="y" * output_size)
    log.close()
    raw = log.path.read_bytes()
    cut = data.draw(st.integers(raw.index(b"\n") + 1, len(raw)))
    log.path.write_bytes(raw[:cut])
    header, records, _ = load_session_file(log.path)
    expected = next((t for t in map(_record_turn, reversed(records)) if t is not None), 0)
    first = next((r["data"]["prompt"] for r in records if r["type"] == "turn/start"), "")
    info = _info(log.path)
    assert info is not None
    assert (info.id, info.turns, info.title) == (header["id"], expected, first)


def test_resume_memory_follows_the_conversation_not_the_file(tmp_path):
    """Failed turns leave no trace in the conversation: resuming them must not hold the file."""
    log = SessionLog.create(tmp_path, cwd=tmp_path)
    for turn in range(1, 101):
        log.append(ev.TurnStart(turn, "p" * (1 << 20)), sync=False)  # a 1 MB prompt, then a rejection
        log.append(ev.TurnEnd(turn, Rejected("no")), sync=False)
    log.close()
    tracemalloc.start()
    try:
        session, conversation = open_session(log.path.stem, root=tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    session.close()
    assert session.last_turn == 100 and conversation.messages == []
    assert peak < 40 << 20  # 100 MB on disk: a few read chunks at a time, not the file
