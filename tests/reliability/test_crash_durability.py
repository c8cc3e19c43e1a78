"""Crash durability: SIGKILL ``dsh`` at random points of scripted turns, then reopen with ``--resume last``.

One user, one session, a chain of piped ``dsh`` processes against one fault server whose script mixes
text, slow streams, ``list_dir`` tool calls, HTTP errors and resets (seeded, deterministic). Each process
is fed a few prompts and SIGKILLed at a random point (after a random number of output lines plus a random
few milliseconds, or during start-up and log repair), until the target number of turns has started; a
last process is not killed. After every kill:

* nothing flushed before the kill is lost: the next process's log starts with the killed one's bytes,
  byte for byte, and everything the killed process had printed (turn headers, tool calls and results,
  turn-end lines) is in those bytes;
* a turn the kill left open is closed exactly once, first thing: failed ``tool/result`` records for its
  pending calls, then one ``turn/end {"kind": "interrupted"}``, reported as
  ``[main turn N] [turn interrupted by a previous process exit]``;
* the next turns work: at the end the whole log is well formed and the last turn completed.

The default run is short; the 200-turn variant is marked slow. Plus a full disk: RLIMIT_FSIZE on the
child (EFBIG) and, where a private mount namespace is allowed, a 16 KiB tmpfs (ENOSPC).
"""

from __future__ import annotations

import json
import random
import re
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dsh_harness import (
    COUNTS,
    FIGURES,
    Home,
    LineReader,
    assert_header,
    assert_well_formed,
    config_text,
    dsh_command,
    dsh_env,
    make_home,
    read_log,
    run_dsh,
    save_transcript,
    stop_process,
)

from dsh.agent_loop.session_log import INTERRUPTED_TOOL_OUTPUT
from dsh.llm.loopback.fault_server import Behaviour, FaultServer

HELLO = "Hello! How can I help you today?"
INTERRUPTED_NOTICE = "[turn interrupted by a previous process exit]"


def _script(rng: random.Random, size: int) -> list[Behaviour]:
    """Requests in the order the chain makes them; a tool call's follow-up takes the next entry."""
    choices = [
        (30, Behaviour("text")),
        (25, Behaviour("slow_text", delay=0.02, text="slowly streamed words arrive one by one here")),
        (25, Behaviour("tool_call", name="list_dir", arguments="{}", reasoning="Look first.")),
        (6, Behaviour("http_500")),
        (6, Behaviour("reset_mid_stream")),
        (8, Behaviour("keepalive_then_text", count=2, interval=0.02)),
    ]
    weights = [weight for weight, _ in choices]
    return [rng.choices([b for _, b in choices], weights)[0] for _ in range(size)]


@dataclass
class _Kill:
    after_lines: int  # SIGKILL once this many lines were printed (0: during start-up / repair)
    extra_delay: float


@dataclass
class _Life:
    index: int
    resumed: bool
    killed: bool
    stdout: str
    before: bytes  # the log before this process ran
    after: bytes  # the log once it was dead


def _log_bytes(home: Home) -> bytes:
    files = home.session_files()
    assert len(files) <= 1, files
    return files[0].read_bytes() if files else b""


def _records(raw: bytes) -> list[dict[str, Any]]:
    if not raw:
        return []
    lines = raw.split(b"\n")
    assert lines[-1] == b"", "a SIGKILL between write(2) calls cannot tear a record"
    return [json.loads(line) for line in lines[1:-1]]


def _open_turn(records: list[dict[str, Any]]) -> tuple[int | None, list[str]]:
    """The turn left open at the end of ``records`` and its unanswered tool-call ids (model order).

    A call is owed a result once the assistant message that asks for it is on disk: a SIGKILL may land
    before its ``tool/call`` record is written, and the model still needs an answer for it.
    """
    open_turn: int | None = None
    pending: list[str] = []
    for record in records:
        kind, data = record["type"], record["data"]
        if kind == "turn/start":
            open_turn, pending = data["turn"], []
        elif kind == "turn/end":
            open_turn, pending = None, []
        elif kind == "assistant/message":
            pending += [call["id"] for call in data["tool_calls"] if call["id"] not in pending]
        elif kind == "tool/result" and data["id"] in pending:
            pending.remove(data["id"])
    return open_turn, pending


def _turn_lines(text: str) -> int:
    """Complete lines the turns printed; the resume recap (dsh's summary of earlier turns) does not count."""
    count, in_recap = 0, False
    for line in text.split("\n")[:-1]:
        if line.startswith("resumed session "):
            in_recap = True
        elif in_recap and not line.startswith((" ", "turn ")):
            in_recap = False
        count += not in_recap
    return count


def _live_one(home: Home, url: str, index: int, prompts: list[str], kill: _Kill | None) -> _Life:
    before = _log_bytes(home)
    resumed = bool(home.session_files())
    args = ["--base-url", url, *(["--resume", "last"] if resumed else [])]
    process = subprocess.Popen(dsh_command(args), env=dsh_env(home), cwd=home.workspace, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = LineReader(process)
    try:
        assert process.stdin is not None
        process.stdin.write("".join(p + "\n" for p in prompts).encode())
        process.stdin.close()
        deadline = time.monotonic() + 60
        alive = True
        if kill is not None:
            while alive and _turn_lines(reader.text) < kill.after_lines and time.monotonic() < deadline:
                alive = reader.pump(0.05)
            if alive:
                time.sleep(kill.extra_delay)  # the kill lands at a chosen moment: the behaviour under test
                process.send_signal(signal.SIGKILL)
        while reader.pump(0.2) and time.monotonic() < deadline:
            pass
        process.wait(timeout=30)
    finally:
        stop_process(process)
    assert process.stderr is not None
    stderr = process.stderr.read().decode("utf-8", "replace")
    process.stderr.close()
    process.stdout.close()  # type: ignore[union-attr]
    save_transcript(home, f"life{index:02d}", args, reader.text, stderr, process.returncode)
    killed = process.returncode == -signal.SIGKILL
    assert killed or (process.returncode == 0 and stderr == ""), (process.returncode, stderr[-400:])
    return _Life(index, resumed, killed, reader.text, before, _log_bytes(home))


def _check_nothing_lost(life: _Life) -> None:
    """What the process printed is on disk; what was on disk before it is still there, byte for byte."""
    assert life.after.startswith(life.before), f"life {life.index} rewrote flushed records"
    records = _records(life.after)
    started = {r["data"]["turn"] for r in records if r["type"] == "turn/start"}
    for turn in re.findall(r"\[main turn (\d+)\] ", life.stdout):
        assert int(turn) in started, f"turn {turn} was shown but its turn/start is not on disk"
    new = records[len(_records(life.before)) :]
    count = {kind: sum(1 for r in new if r["type"] == kind) for kind in ("tool/call", "tool/result")}
    closers = sum(1 for r in new if r["type"] == "tool/result" and r["data"]["output"] == INTERRUPTED_TOOL_OUTPUT)
    assert count["tool/call"] >= life.stdout.count("  [tool call] ")
    assert count["tool/result"] - closers >= life.stdout.count("  [tool result] ")
    shown_ends = len(re.findall(r"\[turn (?:failed|aborted|rejected|hit the output-token limit)", life.stdout))
    ordinary_ends = sum(1 for r in new if r["type"] == "turn/end" and r["data"]["reason"]["kind"] != "interrupted")
    assert ordinary_ends >= shown_ends


def _check_repair(previous: _Life, life: _Life) -> int | None:
    """If ``previous`` left a turn open, ``life`` appended its closers first (when it got that far).
    Returns the open turn's number."""
    before = _records(previous.after)
    turn, pending = _open_turn(before)
    if turn is None:
        assert INTERRUPTED_NOTICE not in life.stdout
        return None
    new = _records(life.after)[len(before) :]
    expected = [("tool/result", call_id) for call_id in pending] + [("turn/end", turn)]
    got = [(r["type"], r["data"].get("id") if r["type"] == "tool/result" else r["data"]["turn"]) for r in new]
    if not life.killed or len(new) > len(expected):
        assert got[: len(expected)] == expected, (got[:6], expected)
        assert new[len(expected) - 1]["data"]["reason"] == {"kind": "interrupted"}
        if life.stdout:
            assert life.stdout.startswith(f"[main turn {turn}] {INTERRUPTED_NOTICE}\n"), life.stdout[:200]
    else:  # killed before or during the repair itself: whatever it wrote is a prefix of the closers
        assert got == expected[: len(got)], (got, expected)
    return turn


def _chain(tmp_path: Path, *, seed: int, target_turns: int, prompts_per_life: int, max_lives: int) -> None:
    rng = random.Random(seed)
    home = make_home(tmp_path / "user", config_text(max_retries=0, idle=20, first_token=40))
    lives: list[_Life] = []
    with FaultServer(script=_script(rng, target_turns * 4)) as server:
        turns_started = 0
        while turns_started < target_turns and len(lives) < max_lives:
            index = len(lives)
            prompts = [f"life {index} prompt {n}" for n in range(prompts_per_life)]
            if index > 0 and rng.random() < 0.15:
                kill = _Kill(0, rng.uniform(0.05, 0.6))  # during start-up or the log repair
            else:  # each turn ends a line, so the kill comes before the last prompt is done
                kill = _Kill(rng.randint(1, prompts_per_life), rng.uniform(0.0, 0.06))
            lives.append(_live_one(home, server.url, index, prompts, kill))
            raw = lives[-1].after
            turns_started = sum(1 for r in _records(raw) if r["type"] == "turn/start")
    with FaultServer(default="text") as good:  # the next turn after the last kill must simply work
        final = _live_one(home, good.url, len(lives), ["the final turn"], None)
    open_turns: set[int] = set()
    for previous, life in zip(lives, [*lives[1:], final], strict=True):
        _check_nothing_lost(life)
        turn = _check_repair(previous, life)
        if turn is not None:
            open_turns.add(turn)
    _check_nothing_lost(lives[0])
    interrupted = len(open_turns)

    header, records = read_log(home.only_session())
    assert_header(header)
    assert_well_formed(records)
    ends = [r["data"] for r in records if r["type"] == "turn/end"]
    closers = [end for end in ends if end["reason"]["kind"] == "interrupted"]
    assert len(closers) == interrupted == len({end["turn"] for end in closers})  # once per open turn
    assert ends[-1]["reason"] == {"kind": "completed"}
    assert final.stdout.endswith(f"{HELLO}\n") and not final.killed
    kills = sum(life.killed for life in lives)
    tool_calls = sum(1 for r in records if r["type"] == "tool/call")
    assert kills >= len(lives) // 2 and interrupted >= 1 and tool_calls >= 1, (kills, len(lives), interrupted)
    started = sum(1 for r in records if r["type"] == "turn/start")
    assert started >= target_turns
    COUNTS["kills survived (SIGKILL, then --resume last)"] += kills
    COUNTS["turns run in the kill chains"] += started
    FIGURES[f"kill chain seed {seed}"] = (
        f"{started} turns in {len(lives) + 1} processes, {kills} SIGKILLs ({interrupted} mid-turn, closed once "
        f"each), {tool_calls} tool calls"
    )


@pytest.mark.timeout(240)
def test_random_sigkills_lose_nothing_and_close_open_turns_once(tmp_path: Path) -> None:
    _chain(tmp_path, seed=8, target_turns=40, prompts_per_life=6, max_lives=40)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_hundred_turns_under_random_sigkills(tmp_path: Path) -> None:
    _chain(tmp_path, seed=2026, target_turns=200, prompts_per_life=8, max_lives=150)


# --- a full disk --------------------------------------------------------------------------------------------

FULL = "[turn failed SESSION_LOG] session log write failed ({path}): [Errno {errno}] {text}"


def _limit_file_size(limit: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _assert_clean_log_then_resume(home: Home, server_url: str, run_stdout: str, errno: int, text: str) -> None:
    path = home.only_session()
    shown = FULL.format(path=path, errno=errno, text=text)
    # On its own line, or right after the turn header when the failure hit the turn's first record.
    header = re.compile(r"(\[main turn \d+\] )?" + re.escape(shown))
    matching = [line for line in run_stdout.split("\n") if header.fullmatch(line)]
    assert len(matching) == 1, run_stdout[-800:]  # the first failure says why; later turns say the log is unusable
    assert run_stdout.count(shown) == 1
    raw = path.read_bytes()
    records = _records(raw)  # whole lines only: the partial record was cut back off
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    resumed = run_dsh(home, ["--base-url", server_url, "--resume", "last"], ["after the disk was freed"],
                      label="after-full-disk")
    assert resumed.returncode == 0 and resumed.stderr == ""
    assert path.read_bytes().startswith(raw)
    _, after = read_log(path)
    assert_well_formed(after)
    assert resumed.stdout.endswith(f"{HELLO}\n")


def test_a_file_size_limit_mid_session_is_a_clear_error_not_a_corrupt_log(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    with FaultServer(default="text") as server:
        # 2 KiB: the header and a couple of turns fit, then a write fails with EFBIG (SIGXFSZ is ignored
        # by Python, so the write returns the error instead of killing the process).
        run = run_dsh(home, ["--base-url", server.url], [f"prompt number {n}" for n in range(8)], label="fsize",
                      preexec_fn=_limit_file_size(2048))
        assert run.returncode == 0 and run.stderr == "", run.stderr
        assert run.stdout.startswith(f"[main turn 1] {HELLO}\n")
        _assert_clean_log_then_resume(home, server.url, run.stdout, 27, "File too large")
    COUNTS["faults tried (full disk)"] += 1


def _private_tmpfs_works(mountpoint: Path) -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "-m", "sh", "-c", f"mount -t tmpfs -o size=16k tmpfs '{mountpoint}'"],
                           capture_output=True, check=False, timeout=10)
    return probe.returncode == 0


def test_a_full_tmpfs_is_enospc_with_the_same_clear_line(tmp_path: Path) -> None:
    home = make_home(tmp_path / "user", config_text())
    if not _private_tmpfs_works(home.state_dir):
        pytest.skip("no private mount namespace here (unshare -m + mount tmpfs needs CAP_SYS_ADMIN)")
    with FaultServer(default="text") as server:
        # Only this child sees the 16 KiB tmpfs over its state dir; the log is copied out before it goes.
        saved = tmp_path / "saved-sessions"
        prompts = "".join(f"a prompt that fills the disk {n} " + "x" * 1500 + "\n" for n in range(20))
        command = " ".join(f"'{part}'" for part in dsh_command(["--base-url", server.url]))
        script = (f"mount -t tmpfs -o size=16k tmpfs '{home.state_dir}' && {command}; status=$?; "
                  f"cp -r '{home.sessions}' '{saved}'; exit $status")
        done = subprocess.run(["unshare", "-m", "sh", "-c", script], input=prompts, capture_output=True, text=True,
                              env=dsh_env(home), cwd=home.workspace, timeout=120, check=False)
        save_transcript(home, "tmpfs", ["(16 KiB tmpfs)"], done.stdout, done.stderr, done.returncode)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        (home.sessions).mkdir(parents=True)
        for file in saved.iterdir():
            shutil.copy(file, home.sessions / file.name)
        # The shown path is the one inside the tmpfs, which is the same path as the copy.
        _assert_clean_log_then_resume(home, server.url, done.stdout, 28, "No space left on device")
    COUNTS["faults tried (full disk)"] += 1
