"""What start-up runs behind the first prompt (the agent's import, the MCP servers' opening) runs in the prompt's
task group: a failure there ends dsh with one line and the terminal as found, never a traceback over the prompt
(docs/architecture.md, "Concurrency: who owns what").

dsh runs in a real pty under a wrapper that makes the agent's modules unimportable (what a broken install
does: ``None`` in ``sys.modules`` fails the import), in one shell with ``stty -a`` before and after.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pexpect
import pytest
from pty_screen import Screen
from test_pty import home, pty_env  # noqa: F401  (fixture: home)

from dsh.llm.loopback.fault_server import closed_port

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-startupTasksPty000000000000000"
ROWS, COLS = 24, 160

WRAPPER = """
import sys
sys.modules["dsh.agent_loop.agent"] = None  # the agent's import fails, behind the first prompt
sys.argv[0] = "dsh"
from dsh.repl.cli import main
main()
"""


def test_an_agent_that_cannot_be_imported_behind_the_prompt_ends_dsh_with_one_line(home: Path) -> None:  # noqa: F811
    dsh = shlex.join([sys.executable, "-c", WRAPPER])
    script = f"stty -a > {home}/before; {dsh}; echo rc=$?; stty -a > {home}/after; echo done"
    screen = Screen(ROWS, COLS)
    with closed_port() as port:
        child = pexpect.spawn("/bin/sh", ["-c", script], cwd=str(REPO), encoding="utf-8", timeout=30,
                              dimensions=(ROWS, COLS),
                              env=pty_env(home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}"))
        try:
            child.expect_exact("done")
            screen.feed(child.before or "")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    lines = [line for line in screen.text().splitlines() if line.strip()]
    assert lines[0].endswith(" · /help · Ctrl-D exits"), lines
    failure = "dsh: failed to start: import of dsh.agent_loop.agent halted; None in sys.modules"
    assert lines[-2:] == [failure, "rc=1"] or lines[-2:] == [f"> {failure}", "rc=1"], lines
    assert "Traceback" not in screen.text() and "Unhandled exception" not in screen.text()
    assert (home / "before").read_text() == (home / "after").read_text()
