"""Sessions a developer can find again: created at the first turn, scoped to a project, removable.

The lock tests hold a session open in a real second process (a child python), as a second dsh would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh.agent_loop import events as ev
from dsh.agent_loop.project import project_root
from dsh.agent_loop.reasons import Completed
from dsh.agent_loop.session_files import SessionLogError
from dsh.agent_loop.session_list import list_sessions, remove_session, resolve_session, session_in_use
from dsh.agent_loop.session_log import SessionLog
from dsh.llm import ErrorCode


def finished_turn(log: SessionLog, turn: int, prompt: str) -> None:
    log.append(ev.TurnStart(turn, prompt))
    log.append(ev.TurnEnd(turn, Completed()))


def test_a_lazy_session_is_written_at_its_first_turn_only(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    log = SessionLog.create(root, cwd=str(tmp_path), lazy=True)
    assert root.is_dir() and list(root.iterdir()) == []  # the directory is checked at launch, no file yet
    assert not log.written and not log.closed and log.records() == []
    log.sync()  # nothing to sync: no error, no file
    assert not log.path.exists()
    finished_turn(log, 1, "hello")
    assert log.written and log.path.exists()
    lines = log.path.read_text().splitlines()
    assert len(lines) == 3 and '"type":"session"' in lines[0] and f'"id":"{log.id}"' in lines[0]
    assert [record["type"] for record in log.records()] == ["turn/start", "turn/end"]
    log.close()


def test_a_lazy_session_closed_before_any_turn_leaves_nothing(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path, lazy=True)
    log.close()
    assert log.closed and list(tmp_path.iterdir()) == []
    with pytest.raises(SessionLogError):
        log.append(ev.TurnStart(1, "too late"))


def test_the_project_is_the_git_work_tree_else_the_directory(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "deep").mkdir(parents=True)
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: ../repo/.git/worktrees/w\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert project_root(repo / "src" / "deep") == repo
    assert project_root(worktree) == worktree
    assert project_root(plain) == plain
    log = SessionLog.create(tmp_path / "s", cwd=str(repo / "src" / "deep"))
    assert log.header["project"] == str(repo) and log.header["cwd"] == str(repo / "src" / "deep")
    log.close()


def test_last_is_this_projects_latest_session_with_turns(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    mine = SessionLog.create(root, cwd="/p/mine", project="/p/mine")
    finished_turn(mine, 1, "mine")
    mine.close()
    time.sleep(0.02)
    empty = SessionLog.create(root, cwd="/p/mine", project="/p/mine")  # written eagerly, never used
    empty.close()
    other = SessionLog.create(root, cwd="/p/other", project="/p/other")
    finished_turn(other, 1, "other")
    other.close()
    assert resolve_session("last", root, project="/p/mine") == mine.path
    assert resolve_session("last", root, project="/p/other") == other.path
    assert resolve_session("last", root) == other.path  # unscoped: every project
    assert [info.id for info in list_sessions(root, project="/p/mine")] == [mine.id, empty.id]
    assert {info.project for info in list_sessions(root)} == {"/p/mine", "/p/other"}
    with pytest.raises(SessionLogError) as caught:
        resolve_session("last", root, project="/p/mine", exclude=mine.id)  # never the caller's own
    assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
    assert str(caught.value) == f"no session with turns to resume of project /p/mine in {root}"


def test_a_log_without_a_project_counts_its_cwd(tmp_path: Path) -> None:
    path = tmp_path / "20200101-000000-aaaaaa.jsonl"
    path.write_text(
        '{"type":"session","version":1,"id":"20200101-000000-aaaaaa","createdAt":"2020-01-01T00:00:00.000Z",'
        '"cwd":"/old"}\n{"type":"turn/start","seq":1,"time":"2020-01-01T00:00:00.000Z","data":{"turn":1,'
        '"prompt":"old"}}\n'
    )
    [info] = list_sessions(tmp_path, project="/old")
    assert (info.project, info.turns, info.title) == ("/old", 1, "old")


def _hold_open(path: Path) -> subprocess.Popen[str]:
    """A second process that opens the session (takes its lock) and waits to be killed."""
    code = (
        "import sys\nfrom dsh.agent_loop.session_log import SessionLog\n"
        "log = SessionLog.open(sys.argv[1])\nprint('open', flush=True)\nsys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "open\n"
    return child


def test_last_skips_a_session_open_in_another_process_and_rm_refuses_it(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    older = SessionLog.create(root, project="/p")
    finished_turn(older, 1, "older")
    older.close()
    time.sleep(0.02)
    busy = SessionLog.create(root, project="/p")
    finished_turn(busy, 1, "busy")
    busy.close()
    child = _hold_open(busy.path)
    try:
        assert session_in_use(busy.path) and not session_in_use(older.path)
        assert resolve_session("last", root, project="/p") == older.path
        with pytest.raises(SessionLogError) as caught:
            remove_session(busy.id, root)
        assert caught.value.code == ErrorCode.SESSION_LOCKED
        assert str(caught.value) == f"session {busy.id} is open in another dsh process"
        assert busy.path.exists()
    finally:
        child.kill()
        child.wait()
    assert remove_session(busy.id, root) == busy.path
    assert not busy.path.exists() and older.path.exists()


def test_rm_refuses_a_file_that_is_not_a_session_log(tmp_path: Path) -> None:
    stray = tmp_path / "notes.jsonl"
    stray.write_text("just text\n")
    with pytest.raises(SessionLogError):
        remove_session("notes", tmp_path)
    assert stray.exists()
    os.unlink(stray)


def test_the_recap_keeps_the_last_turns_bounded_and_the_whole_last_prompt(tmp_path: Path) -> None:
    from dsh.agent_loop.recap import KEEP, LIMIT, Recap
    from dsh.agent_loop.resume import open_session

    log = SessionLog.create(tmp_path)
    for turn in range(1, 6):
        finished_turn(log, turn, f"prompt {turn}")
    long_prompt = "x" * (LIMIT * 50)
    log.append(ev.TurnStart(6, long_prompt))
    log.append(ev.AssistantMessage(6, 1, "y" * (LIMIT * 50), interrupted=True))
    log.append(ev.TurnStart(7, "notices", source="notice"))  # dsh's own turn: not what /retry sends
    log.close()
    recap = Recap()
    session, _ = open_session(log.path, on_record=recap)
    try:
        assert [summary.turn for summary in recap.turns] == [5, 6, 7][-KEEP:]
        five, six, seven = recap.turns
        assert (five.prompt, five.end) == ("prompt 5", {"kind": "completed"})
        assert len(six.prompt) == len(six.answer) == LIMIT and six.cut_prompt and six.cut_answer
        assert six.end is None  # never ended: only the last open turn is repaired
        assert seven.notice and session.repaired_turn == 7
        assert seven.end == {"kind": "interrupted"}  # the repair's closer went through the hook too
        assert (recap.last_prompt, recap.last_prompt_turn) == (long_prompt, 6)
    finally:
        session.close()
