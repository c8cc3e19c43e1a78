"""``--resume last`` while the only session with turns is open in another dsh (issue 42 item 9a): the line
names the session and the pid of the dsh that holds it, instead of saying there is no session with turns.

Two real processes: a piped REPL that has run one turn and waits on its stdin (holding its session log's
lock), and a ``dsh --resume last -p``. Beside them, the lock's holder as /proc/locks tells it, in-process.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.agent_loop.session_files import SessionLogError
from dsh.agent_loop.session_list import lock_holder, resolve_session
from dsh.llm import ErrorCode
from tests.reliability.dsh_harness import Home, dsh_command, dsh_env, make_home, run_dsh
from tests.waiting import wait_until


def _turn_ended(home: Home) -> bool:
    return any('"turn/end"' in path.read_text(encoding="utf-8") for path in home.session_files())


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Home, subprocess.Popen[str]]]:
    """A piped demo REPL that has run one turn and keeps its session open until its stdin closes."""
    home = make_home(tmp_path)
    process = subprocess.Popen(dsh_command(["--demo"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dsh_env(home, key=None), cwd=home.workspace)
    try:
        assert process.stdin is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        wait_until(lambda: _turn_ended(home) or process.poll() is not None, 30, "the first turn to end")
        assert process.poll() is None, process.communicate()
        yield home, process
    finally:
        process.kill()  # ends it on a failed assertion too
        process.wait(timeout=30)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_resume_last_names_the_session_open_in_another_dsh_and_its_pid(
    holder: tuple[Home, subprocess.Popen[str]]
) -> None:
    home, process = holder
    session = home.only_session().stem
    run = run_dsh(home, ["--demo", "--resume", "last", "-p", "again"], key=None, label="resume-in-use")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == (f"dsh: failed to start: session {session} is open in another dsh (pid {process.pid}), "
                          f"and no other session of project {home.workspace} has turns to resume\n")
    assert process.poll() is None  # the other dsh is untouched ...
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    resumed = run_dsh(home, ["--demo", "--resume", "last", "-p", "again"], key=None, label="resume-free")
    assert resumed.returncode == 0, resumed.stderr  # ... and once it has exited, the session resumes


def _record(kind: str, seq: int, data: dict[str, object]) -> str:
    return json.dumps({"type": kind, "seq": seq, "time": "t", "data": data}, separators=(",", ":")) + "\n"


def _log(path: Path, turns: int) -> Path:
    header = _record("session", 0, {"id": path.stem, "cwd": "/p", "project": "/p"})
    starts = "".join(_record("turn/start", n, {"turn": n, "prompt": "p"}) for n in range(1, turns + 1))
    path.write_text(header + starts, encoding="utf-8")
    return path


def test_the_lock_holder_is_this_process_while_it_holds_the_lock(tmp_path: Path) -> None:
    path = _log(tmp_path / "20260101-000000-aaaaaa.jsonl", 1)
    assert lock_holder(path) is None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not Path("/proc/locks").is_file():
            pytest.skip("no /proc/locks here: the holder's pid is unknown on this system")
        assert lock_holder(path) == os.getpid()
        with pytest.raises(SessionLogError) as caught:
            resolve_session("last", tmp_path)
        assert caught.value.code == ErrorCode.SESSION_LOCKED
        assert str(caught.value) == (f"session {path.stem} is open in another dsh (pid {os.getpid()}), "
                                     "and no other session has turns to resume")
    finally:
        os.close(fd)
    assert lock_holder(path) is None
    assert resolve_session("last", tmp_path) == path


def test_a_free_older_session_is_still_the_one_resumed(tmp_path: Path) -> None:
    older = _log(tmp_path / "20260101-000000-aaaaaa.jsonl", 2)
    newer = _log(tmp_path / "20260101-000001-bbbbbb.jsonl", 1)
    os.utime(older, (1, 1))
    fd = os.open(newer, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert resolve_session("last", tmp_path) == older
    finally:
        os.close(fd)


def test_the_lock_holder_of_a_missing_file_or_fifo_is_unknown(tmp_path: Path) -> None:
    assert lock_holder(tmp_path / "gone.jsonl") is None
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert lock_holder(fifo) is None
