"""The real gemini-cli as a subagent of a real dsh in a pseudo-terminal: the parent model (the fault server)
delegates to ``[subagents.gemini]`` (``gemini --acp``), whose backend is the loopback Gemini fake.

Ctrl-C while the agent waits on its backend cancels the turn and leaves no agent process; a backend 500
shows the fixed line, and the key the backend echoed reaches neither the screen nor any file dsh wrote
(docs/subagents.md, "gemini-cli as an ACP subagent"). The provider's other cases are in
tests/agent_loop/subagent/test_gemini_cli_acp.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_pty import KEY, Dsh, home, spawn  # noqa: F401  (fixtures)

from dsh.agent_loop.process import live_group_members
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.fake_gemini import GEMINI_CLI_INSTALL, FakeGemini, gemini_cli, gemini_cli_env
from tests.leak_check import child_pids
from tests.real_parts import missing
from tests.waiting import PROMPTLY, wait_until

CANARY_KEY = "AIzaSyCanaryGeminiKey5d18a0f3c6"  # gemini-cli's key, echoed by its backend in the 500 case
DELEGATE = Behaviour(
    "tool_call",
    id="call_gemini",
    name="subagent",
    arguments=json.dumps({"description": "greet", "prompt": "say hello", "provider": "gemini"}),
)
CALL_LINE = '  [tool call] subagent({"description": "greet", "prompt": "say hello", "provider": "gemini"})\r\n'

pytestmark = [pytest.mark.timeout(120), pytest.mark.real_product, pytest.mark.usefixtures("no_leftover_processes")]


@pytest.fixture(autouse=True)
def _agent_installed() -> None:
    if not gemini_cli().exists():
        missing("gemini-cli (npm)", GEMINI_CLI_INSTALL)


def _configure(home: Path, api: FakeGemini) -> Path:  # noqa: F811
    """``[subagents.gemini]`` over the fake; returns the workspace dsh runs in."""
    env = gemini_cli_env(api, home / "gemini-home", key=CANARY_KEY)
    entries = ", ".join(f"{name} = {json.dumps(value)}" for name, value in env.items())
    config = home / "config" / "dsh"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        "max_retries = 0\n\n[subagents.gemini]\nprovider = \"acp\"\n"
        f"command = {json.dumps([str(gemini_cli()), '--acp'])}\nenv = {{ {entries} }}\nstartup_timeout = 60\n",
        encoding="utf-8",
    )
    work = home / "work"
    work.mkdir()
    return work


def _start(spawn, home: Path, api: FakeGemini, server: FaultServer) -> Dsh:  # noqa: F811
    dsh: Dsh = spawn(cwd=_configure(home, api), DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
    dsh.prompt()
    dsh.send("delegate a greeting")
    dsh.expect_exact(CALL_LINE, timeout=30)
    return dsh


def _agent_group(dsh: Dsh) -> int:
    """The process group of the gemini-cli dsh started (it leads it; its relaunched agent is in it too)."""
    (launcher,) = [pid for pid in child_pids(dsh.child.pid) if b"gemini" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return launcher


def test_ctrl_c_while_the_agent_waits_cancels_the_turn_and_reaps_it(home: Path, spawn) -> None:  # noqa: F811
    with FakeGemini("hang") as api, FaultServer(script=[DELEGATE]) as server:
        dsh = _start(spawn, home, api, server)
        wait_until(lambda: api.stream_requests, 60, "gemini-cli to ask its backend for the answer")
        group = _agent_group(dsh)
        dsh.child.sendintr()
        dsh.expect_exact("  [tool result] Error: tool call cancelled\r\n[turn aborted] cancelled\r\n")
        dsh.prompt()
        wait_until(lambda: not live_group_members(group), PROMPTLY, "the agent's process group to be gone")
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0


def test_backend_500_shows_the_fixed_line_and_the_echoed_key_stays_out(home: Path, spawn) -> None:  # noqa: F811
    echo = f"bad key {CANARY_KEY}"
    with FakeGemini("status", status=500, error_message=echo) as api, FaultServer(script=[DELEGATE]) as server:
        dsh = _start(spawn, home, api, server)
        dsh.expect_exact(
            "  [tool result] Error: subagent run failed\r\n"
            "    \x1b[1;33mSubagent failure (provider: gemini; stage: prompt; category: agent-error; "
            "error code: 500)\x1b[0m\r\n",
            timeout=60,
        )
        dsh.prompt()
        dsh.send("/why")  # the agent's own words, host-side and masked
        dsh.expect_exact("bad key ***")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert CANARY_KEY not in dsh.raw
    written = [path for path in (home / "state").rglob("*") if path.is_file()]  # session log, dsh.log, history
    assert any(path.suffix == ".jsonl" for path in written)
    assert [path for path in written if CANARY_KEY in path.read_text(encoding="utf-8", errors="replace")] == []
