"""Subagents in a real terminal: Ctrl-C during a Codex run whose backend hangs, and /why after an agent
that died at start-up (issue 23, item 3).

The Codex child is the scripted app-server (repl/demo/fake_codex_app_server.py) playing a hung backend
that never confirms ``turn/interrupt``; the ACP "agent" is a Python one-liner that writes a Node-style
``Cannot find module`` to stderr and exits 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from test_pty import KEY, Dsh, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

REPO = Path(__file__).resolve().parents[2]
FAKE_CODEX = str(REPO / "repl" / "demo" / "fake_codex_app_server.py")
SECRET = "tokenValue-9c4e11aa07"


def _config(root: Path, tables: str) -> None:
    (root / "config" / "dsh").mkdir(parents=True, exist_ok=True)
    (root / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + tables, encoding="utf-8")


def _delegate(provider: str) -> Behaviour:
    arguments = {"description": "probe", "prompt": "do the task", "provider": provider}
    return Behaviour("tool_call", name="subagent", arguments=json.dumps(arguments), id=f"call_{provider}")


def test_ctrl_c_during_a_hung_codex_run_says_cancelling_and_ends_the_turn(home: Path, spawn) -> None:  # noqa: F811
    record = home / "codex-record.json"
    # interrupt_grace is the turn deadline's wait: a Ctrl-C must not sit through it. The app-server takes 2 s
    # to exit once its stdin is closed: the toolbar's "cancelling…" is on the screen that long at least.
    _config(home, f"""
[subagents.codex]
provider = "codex"
command = ["{sys.executable}", "{FAKE_CODEX}"]
interrupt_grace = 600
eof_grace = 30
env = {{ FAKE_CODEX_SCENARIO = "deaf_to_interrupt", FAKE_CODEX_RECORD = "{record}", FAKE_CODEX_LINGER = "2" }}
""")
    with FaultServer(script=[_delegate("codex")], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("delegate it")
        dsh.wait_screen("Ctrl-C cancels")
        dsh.expect_exact("[tool call] subagent(")
        dsh._wait(lambda: "turn/start" in record.read_text() if record.exists() else False, "the turn to start", 30)
        dsh.child.sendintr()
        dsh.wait_screen("cancelling…")
        dsh.expect_exact("[turn aborted] cancelled\r\n", timeout=20)  # not the 600 s interrupt grace
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    sent = [frame.get("method") for frame in json.loads(record.read_text())["received"]]
    assert sent[-1] == "turn/interrupt"


def test_why_after_an_agent_died_at_start_shows_its_stderr_masked(home: Path, spawn) -> None:  # noqa: F811
    died = home / "died_at_start.py"  # what a Node agent with a missing file says, then exit 1
    died.write_text("import sys\n"
                    "sys.stderr.write(\"Error: Cannot find module '/opt/agent/index.js'\\n\")\n"
                    f"sys.stderr.write('token {SECRET}\\n')\n"
                    "sys.exit(1)\n", encoding="utf-8")
    _config(home, f"""
[subagents.broken]
provider = "acp"
command = ["{sys.executable}", "{died}"]
env = {{ AGENT_TOKEN = "{SECRET}" }}
""")
    with FaultServer(script=[_delegate("broken")], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("delegate it")
        dsh.expect_exact("Subagent failure (provider: broken; stage: initialize; category: process-exit; "
                         "exit code: 1)", timeout=30)
        dsh.expect_exact("done")
        dsh.prompt()
        dsh.send("/why")
        for line in (
            "last failure (SUBAGENT):",
            "  dsh.agent_loop.subagent.result.SubagentFailure: Subagent failure (provider: broken; "
            "stage: initialize; category: process-exit; exit code: 1)",
            "  the agent's own words (host-side only, masked):",
            "    stderr (last 2 lines):",
            "      Error: Cannot find module '/opt/agent/index.js'",
            "      token ***",
        ):
            dsh.expect_exact(line + "\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert SECRET not in dsh.raw
    host_log = (home / "state" / "dsh" / "dsh.log").read_text(encoding="utf-8")
    assert "      Error: Cannot find module '/opt/agent/index.js'" not in host_log  # the log has its own indent
    assert "    Error: Cannot find module '/opt/agent/index.js'\n    token ***\n" in host_log
    assert SECRET not in host_log
