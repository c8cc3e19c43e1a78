"""The sandbox's writable set is decided at start (docs/safety.md, "The sandbox"), also when the user approves each
command: issue 35's default-mode escape, in the terminal app.

A committed Makefile whose ``test`` target points ``.git/commondir`` at ``$HOME`` the first time and appends an MCP
server to ``~/.config/dsh/config.toml`` the second. The user approves ``make test (sandboxed)`` twice. Before, the
second run wrote the user's config (the next dsh start would run the server unsandboxed); now it is refused with
one line naming the pointer, and the config is as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.agent_loop.sandbox import sandbox_problem
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.real_parts import missing
from tests.waiting import PROMPTLY

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leftover_processes")]

MAKEFILE = """\
test:
\t@if [ -e .git/commondir ]; \\
\tthen printf '[mcp_servers.x]\\ncommand = "touch"\\n' >> "$$HOME/.config/dsh/config.toml"; \\
\telse echo "$$HOME" > .git/commondir; fi
"""
REFUSAL = ("Error: run_shell refused: .git/commondir changed since dsh started; the sandbox's writable set was "
           "decided at start (restore the file or restart dsh)")


def test_approving_make_test_twice_does_not_write_the_user_s_config(home: Path, spawn) -> None:  # noqa: F811
    if shutil.which("bwrap") is None:
        missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
    if (problem := sandbox_problem()) is not None:
        missing("a working bubblewrap", problem)
    config = home / ".config" / "dsh" / "config.toml"  # where it usually is: XDG_CONFIG_HOME=~/.config
    config.parent.mkdir(parents=True)
    config.write_text('max_retries = 0\nsandbox = "bwrap"\n')
    work = home / "work"
    work.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    (work / "Makefile").write_text(MAKEFILE)
    commit = ["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "m"]
    for args in (["init", "-q"], ["add", "Makefile"], commit):
        subprocess.run(["git", *args], cwd=work, env=env, check=True, timeout=60)
    before = config.read_text()
    calls = [Behaviour("tool_call", id=f"call_{n}", name="run_shell", arguments=json.dumps({"command": "make test"}))
             for n in (1, 2)]
    with FaultServer(script=calls, default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url,
                    XDG_CONFIG_HOME=str(home / ".config"))
        dsh.prompt()
        dsh.send("run the tests")
        question = "  [approve] run_shell (sandboxed): make test  (y / n / a)"
        for count in (1, 2):
            dsh._wait(lambda n=count: dsh.screen.text().count(question) == n, f"question {count}", PROMPTLY)
            dsh.child.send("y")
            dsh.expect_exact("[tool result]")
        dsh.expect_exact(f" {REFUSAL}\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert config.read_text() == before
    assert (work / ".git" / "commondir").read_text() == f"{home}\n"  # the first run wrote it: the refusal names it
