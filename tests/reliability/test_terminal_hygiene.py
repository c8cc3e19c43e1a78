"""Terminal hygiene: after Ctrl-C at random moments, and after a crash inside a turn, the terminal is sane.

A real pty (pexpect) runs ``sh -c 'python -m repl ...; echo EXIT=$?; stty -a'`` against the fault server.
Each session sends prompts whose turns stream slowly, call a tool, wait for a retry, stall, or send only
keep-alives, and presses Ctrl-C after a random (seeded) delay -- right after Enter, mid-stream, during the
tool, during the retry wait, while typing. Every cancelled turn must end ``[turn aborted] cancelled`` and
the prompt must come back; the session then ends by Ctrl-D, by a double Ctrl-C, or by SIGTERM during a
turn, and ``stty -a`` must show echo and icanon (and isig, icrnl, opost) back on. The same after a crash
inside a turn (crashing_dsh.py: an unexpected BaseException while the live view owns the terminal).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import pexpect
import pytest
from dsh_harness import COUNTS, Home, assert_well_formed, config_text, dsh_env, make_home, read_log, turn_ends

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

pytestmark = pytest.mark.timeout(120)

PROMPT = re.compile(r"\x1b\[0m>(?:\x1b|\s)")
ABORTED = "[turn aborted] cancelled"
SANE = ("echo", "icanon", "isig", "icrnl", "opost")
LONG_TEXT = " ".join(f"word{n}" for n in range(60))
CRASH_LAUNCHER = str(Path(__file__).with_name("crashing_dsh.py"))

# What each kind of turn asks of the fault server; every one runs for well over a second unless cancelled.
SCENARIOS: dict[str, list[Behaviour | str]] = {
    "slow stream": [Behaviour("slow_text", text=LONG_TEXT, delay=0.05)],
    "tool call": [Behaviour("tool_call", name="list_dir", arguments="{}", reasoning="look"),
                  Behaviour("slow_text", text=LONG_TEXT, delay=0.05)],
    "retry wait": [Behaviour("http_503"), Behaviour("http_503"), Behaviour("http_503"), Behaviour("http_503")],
    "stall": [Behaviour("stall_before_headers")],
    "keep-alives": [Behaviour("keepalive_only", interval=0.05)],
}


def _quote(part: str) -> str:
    return "'" + part.replace("'", "'\\''") + "'"


def _spawn(home: Home, url: str, launcher: list[str]) -> pexpect.spawn:
    command = " ".join(_quote(part) for part in [sys.executable, *launcher, "--base-url", url])
    # The trap keeps the wrapping sh alive when a Ctrl-C lands while dsh is in cooked mode (a SIGINT to
    # the whole foreground group); dsh itself gets the default disposition back.
    script = f"trap : INT; {command}; echo EXIT=$?; stty -a"
    env = dsh_env(home, {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"})
    child = pexpect.spawn("/bin/sh", ["-c", script], cwd=str(home.workspace), env=env, encoding="utf-8",
                          timeout=20, dimensions=(40, 200))
    child.logfile_read = (home.root / f"pty-{time.monotonic_ns()}.txt").open("w", encoding="utf-8")
    return child


def _dsh_pid(sh_pid: int) -> int:
    """The dsh process the wrapping sh started (our only grandchild)."""
    with open(f"/proc/{sh_pid}/task/{sh_pid}/children") as handle:
        children = [int(pid) for pid in handle.read().split()]
    assert len(children) == 1, children
    return children[0]


def _stty_after_exit(child: pexpect.spawn) -> tuple[int, set[str]]:
    child.expect(r"EXIT=(\d+)")
    status = int(child.match.group(1))
    child.expect(pexpect.EOF)
    flags = set(re.split(r"[\s;]+", child.before or ""))
    return status, flags


def _assert_sane(flags: set[str]) -> None:
    for flag in SANE:
        assert flag in flags and f"-{flag}" not in flags, (flag, sorted(flags))


def _close(child: pexpect.spawn) -> None:
    child.close(force=True)
    if child.logfile_read is not None:
        child.logfile_read.close()


@pytest.mark.parametrize(("seed", "ending"), [(11, "ctrl-d"), (23, "double ctrl-c"), (37, "sigterm")])
def test_ctrl_c_at_random_moments_leaves_the_terminal_sane(tmp_path: Path, seed: int, ending: str) -> None:
    rng = random.Random(seed)
    home = make_home(tmp_path, config_text(max_retries=3, idle=20, first_token=20))
    kinds = [rng.choice(list(SCENARIOS)) for _ in range(5)]
    script: list[Behaviour | str] = []
    for kind in kinds:
        script += SCENARIOS[kind]
    with FaultServer(script=script, default=Behaviour("slow_text", text=LONG_TEXT, delay=0.05)) as server:
        child = _spawn(home, server.url, ["-m", "dsh.repl"])
        try:
            child.expect(PROMPT)
            cancelled = 0
            for n, kind in enumerate(kinds):
                if rng.random() < 0.3:  # Ctrl-C while typing: the line is cleared, no turn runs
                    child.send("half a thou")
                    time.sleep(rng.uniform(0.0, 0.2))  # a random moment while typing: the behaviour under test
                    child.sendintr()
                child.send(f"turn {n}: {kind}\r")
                # A random moment in the turn (the behaviour under test), not sooner than 0.1 s: a Ctrl-C within
                # a few ms of Enter is lost today.
                time.sleep(rng.uniform(0.1, 0.8))
                child.sendintr()
                child.expect_exact(ABORTED)
                child.expect(PROMPT)
                cancelled += 1
            if ending == "ctrl-d":
                child.sendeof()
                expected_status = 0
            elif ending == "double ctrl-c":
                child.sendintr()
                child.expect_exact("(press Ctrl-C again to exit, or Ctrl-D)")
                child.sendintr()
                expected_status = 0
            else:  # SIGTERM to dsh itself (not the wrapping sh) in the middle of a turn
                child.send("one more turn\r")
                time.sleep(rng.uniform(0.1, 0.5))  # a random moment in the turn: the behaviour under test
                os.kill(_dsh_pid(child.pid), signal.SIGTERM)
                child.expect_exact(ABORTED)
                cancelled += 1
                expected_status = 128 + signal.SIGTERM
            status, flags = _stty_after_exit(child)
        finally:
            _close(child)
    assert status == expected_status
    _assert_sane(flags)
    _, records = read_log(home.only_session())
    assert_well_formed(records)
    ends = turn_ends(records)
    assert [ends[turn][0]["kind"] for turn in range(1, cancelled + 1)] == ["aborted"] * cancelled
    COUNTS["turns cancelled at random moments in a pty (Ctrl-C, SIGTERM)"] += cancelled


def test_a_crash_inside_a_turn_restores_the_terminal(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    with FaultServer(default=Behaviour("slow_text", text=LONG_TEXT, delay=0.05)) as server:
        child = _spawn(home, server.url, [CRASH_LAUNCHER])
        try:
            child.expect(PROMPT)
            child.send("crash while streaming\r")
            # One line on the way out: the crash itself, not the task groups it unwound through.
            child.expect(r"dsh: internal error: injected crash inside a turn \(DSH_DEBUG=1 shows a traceback\)\r\n")
            status, flags = _stty_after_exit(child)
        finally:
            _close(child)
    assert status == 1
    _assert_sane(flags)
    # The next dsh opens the same session and carries on.
    with FaultServer(default="text") as server:
        child = _spawn(home, server.url, ["-m", "dsh.repl", "--resume", "last"])
        try:
            child.expect(PROMPT)
            child.send("after the crash\r")
            child.expect_exact("Hello! How can I help you today?")
            child.expect(PROMPT)
            child.sendeof()
            status, flags = _stty_after_exit(child)
        finally:
            _close(child)
    assert status == 0
    _assert_sane(flags)
    _, records = read_log(home.only_session())
    assert_well_formed(records)
    COUNTS["crashes inside a turn (terminal sane after)"] += 1


def test_ctrl_c_typed_right_after_enter_cancels_the_turn(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    text = " ".join(f"w{n}" for n in range(30)) + " END-OF-ANSWER"
    with FaultServer(default=Behaviour("slow_text", text=text, delay=0.03)) as server:
        child = _spawn(home, server.url, ["-m", "dsh.repl"])
        try:
            child.expect(PROMPT)
            child.send("cancel me at once\r\x03")  # Enter and Ctrl-C in one read: typeahead
            outcome = child.expect_exact([ABORTED, "END-OF-ANSWER"])
            child.expect(PROMPT)
            child.sendeof()
            _, flags = _stty_after_exit(child)
        finally:
            _close(child)
    _assert_sane(flags)
    assert outcome == 0, "the turn ran to completion: the Ctrl-C was lost"
