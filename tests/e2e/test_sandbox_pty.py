"""The sandbox in the terminal app (docs/safety.md): an approved command runs under real bwrap, its question and
its result say so, and Ctrl-C ends it and everything it started, a ``setsid`` escapee included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.agent_loop.sandbox import sandbox_problem
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.leak_check import live_processes_running
from tests.real_parts import missing
from tests.waiting import PROMPTLY, wait_until


def sleepers(token: str) -> list[int]:
    """Live ``sleep TOKEN`` processes anywhere (a sandbox's own pid namespace, a setsid escapee)."""
    return live_processes_running("sleep", token)


pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("no_leftover_processes")]


@pytest.fixture
def work(home: Path) -> Path:  # noqa: F811
    if shutil.which("bwrap") is None:
        missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
    if (problem := sandbox_problem()) is not None:
        missing("a working bubblewrap", problem)
    (home / "config" / "dsh").mkdir(exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text('max_retries = 0\nsandbox = "bwrap"\n')
    work = home / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=60)
    return work


def test_ctrl_c_ends_a_sandboxed_command_and_all_it_started(work: Path, spawn) -> None:  # noqa: F811
    token = f"{600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"  # a sleep nobody else runs
    command = (f"setsid sh -c 'echo $$ > escapee.pid; exec sleep {token}' & echo $$ > leader.pid; "
               f"sleep {token}; echo late")
    call = Behaviour("tool_call", id="call_1", name="run_shell", arguments=json.dumps({"command": command}))
    with FaultServer(script=[call], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("be slow")
        dsh.wait_screen("(y / n / a)")
        dsh.child.send("y")
        dsh._wait(lambda: len(sleepers(token)) == 2, "the sandboxed command and its escapee to start", PROMPTLY)
        dsh.child.sendintr()
        dsh.expect_exact("[turn aborted] cancelled", timeout=PROMPTLY)  # not the 600 s the command sleeps
        dsh.prompt()
        wait_until(lambda: not sleepers(token), PROMPTLY, "every process of the sandboxed command to end")
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert (work / "leader.pid").exists() and (work / "escapee.pid").exists()  # written inside, in the tree


def test_the_question_and_the_result_say_the_command_runs_sandboxed(work: Path, spawn) -> None:  # noqa: F811
    call = Behaviour("tool_call", id="call_1", name="run_shell",
                     arguments=json.dumps({"command": "echo in > in.txt; touch /etc/dsh-planted"}))
    with FaultServer(script=[call], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("write")
        # The user knows what they approve: a command bounded by the sandbox (docs/safety.md).
        dsh.wait_screen("  [approve] run_shell (sandboxed): echo in > in.txt; touch /etc/dsh-planted  (y / n / a)")
        dsh.child.send("y")
        dsh.expect_exact("  [tool result] Error: touch: cannot touch '/etc/dsh-planted': Read-only file system\r\n"
                         "    [exit code: 1] (sandboxed)\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert (work / "in.txt").read_text() == "in\n" and not os.path.exists("/etc/dsh-planted")


def test_a_sandboxed_command_killed_by_a_signal_says_which(work: Path, spawn) -> None:  # noqa: F811
    call = Behaviour("tool_call", id="call_1", name="run_shell", arguments=json.dumps({"command": "kill -TERM $$"}))
    with FaultServer(script=[call], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("stop yourself")
        dsh.wait_screen("  [approve] run_shell (sandboxed): kill -TERM $$  (y / n / a)")
        dsh.child.send("y")
        # Not bwrap's "[exit code: 143]": the signal, as without the sandbox.
        dsh.expect_exact("  [tool result] Error: (no output)\r\n    [killed by SIGTERM] (sandboxed)\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
