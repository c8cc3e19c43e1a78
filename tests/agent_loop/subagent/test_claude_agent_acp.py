"""The ACP provider against a real third-party agent: ``@agentclientprotocol/claude-agent-acp`` from npm.

It drives the real Claude Code CLI, pointed at the loopback Anthropic fake (fixtures/fake_anthropic.py)
with a dummy key, fully offline (docs/subagents.md, "A real ACP agent in the tests"). ``.ci/run``
installs it into ``.venv/npm`` (``make npm-agents``); without it these tests skip locally.
Each run takes about 1.5-2.5 s.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent.acp import AcpInitializeRun, from_config
from dsh.agent_loop.subagent.result import SubagentFailure, SubagentRequest, SubagentResult
from fixtures.fake_anthropic import FakeAnthropic
from tests.leak_check import child_pids
from tests.real_parts import missing

REPO = Path(__file__).resolve().parents[3]
AGENT = Path(os.environ.get("DSH_CLAUDE_AGENT_ACP", REPO / ".venv/npm/node_modules/.bin/claude-agent-acp"))
INSTALL = "make npm-agents (npm install --prefix .venv/npm @agentclientprotocol/claude-agent-acp@0.101.0)"
CANARY_KEY = "sk-ant-canary-echoed-3f9d1c"
CANARY_TOKEN = "plain-canary-token-51ab0e"  # no key shape: masked because its env name looks secret
FAIL = "Subagent failure (provider: claude; "
WARN = (
    "Subagent permission warning (provider: claude; mode: auto): "
    "tool calls ran without a permission request under policy reject"
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]


@pytest.fixture(autouse=True)
def _agent_installed() -> None:
    if not AGENT.exists():
        missing("claude-agent-acp (npm)", INSTALL)


def _table(api: FakeAnthropic, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    config = tmp_path / "claude-config"
    config.mkdir(exist_ok=True)
    return {
        "provider": "acp",
        "command": str(AGENT),
        "env": {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": CANARY_KEY,
            "CLAUDE_CONFIG_DIR": str(config),  # never the user's ~/.claude
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no DNS, no probe: loopback only
            "CLAUDE_CODE_MAX_RETRIES": "0",  # a 5xx fails in ~1 s, not ~3 minutes
            "DSH_TEST_SERVICE_TOKEN": CANARY_TOKEN,
        },
        "startup_timeout": 60,
        "prompt_timeout": 60,
        **extra,
    }


async def _run(table: dict[str, Any], cwd: Path) -> SubagentResult:
    provider = from_config("claude", table)
    async with provider.run(SubagentRequest(description="test", prompt="say hello", cwd=str(cwd))) as run:
        return await run.result()


async def test_success(tmp_path: Path) -> None:
    with FakeAnthropic("text") as api:
        result = await _run(_table(api, tmp_path), tmp_path)
    assert (result.stop_reason, result.diagnostic, result.warning) == ("completed", None, None)
    assert "Hello from fake API" in result.output.split("\n\n")
    assert api.message_requests[0].headers.get("x-api-key") == CANARY_KEY


async def test_backend_500_is_agent_error(tmp_path: Path) -> None:
    with FakeAnthropic("status", status=500) as api:
        result = await _run(_table(api, tmp_path), tmp_path)
    assert (result.stop_reason, result.diagnostic) == (
        "error",
        FAIL + "stage: prompt; category: agent-error; error code: -32603 (internal error))",
    )
    assert result.output.startswith("API Error: 500")  # the agent's own message text, as partial output


async def test_backend_echoing_the_key(tmp_path: Path) -> None:
    echo = f"bad key {CANARY_KEY} and token {CANARY_TOKEN}."
    with FakeAnthropic("status", status=500, error_message=echo) as api:
        result = await _run(_table(api, tmp_path), tmp_path)
    assert (result.stop_reason, result.diagnostic) == (
        "error",
        FAIL + "stage: prompt; category: agent-error; error code: -32603 (internal error))",
    )
    assert CANARY_KEY not in result.output and CANARY_TOKEN not in result.output
    assert "bad key *** and token ***." in result.output  # both are values of secret-named env


async def test_no_key_is_authentication_required_and_the_agent_says_so_host_side(tmp_path: Path) -> None:
    with FakeAnthropic("text") as api:
        table = _table(api, tmp_path)
        del table["env"]["ANTHROPIC_API_KEY"]
        result = await _run(table, tmp_path)
        assert not api.message_requests  # it never got as far as the backend
    assert (result.stop_reason, result.diagnostic) == (
        "error",
        FAIL + "stage: prompt; category: agent-error; error code: -32000 (authentication required))",
    )
    assert isinstance(result.cause, SubagentFailure)
    assert result.cause.words.said == (("error message", "Authentication required"),)
    assert CANARY_TOKEN not in "\n".join(result.cause.words.lines())  # its env is masked in its words too


async def test_the_doctor_probe_goes_past_initialize_without_a_prompt(tmp_path: Path) -> None:
    # dsh doctor's check (repl/doctor.py): initialize and session/new. This agent asks for authentication only
    # at the prompt, so the probe passes without a key; the backend is never called.
    with FakeAnthropic("text") as api:
        table = _table(api, tmp_path)
        del table["env"]["ANTHROPIC_API_KEY"]
        provider = dataclasses.replace(from_config("claude", table), run_type=AcpInitializeRun)
        async with provider.run(SubagentRequest(description="doctor", prompt="", cwd=str(tmp_path))) as run:
            result = await run.result()
        assert not api.message_requests
    assert isinstance(run, AcpInitializeRun)
    assert (result.stop_reason, run.auth_required) == ("completed", False)
    assert run.agent_info is not None and run.agent_info[0] == "@agentclientprotocol/claude-agent-acp"


async def test_reject_holds_for_a_bash_tool_call(tmp_path: Path) -> None:
    bash = {"tool_name": "Bash", "tool_input": {"command": "touch created.txt", "description": "make a file"}}
    with FakeAnthropic("tool_once", **bash) as api:
        result = await _run(_table(api, tmp_path), tmp_path)
    # claude-agent-acp starts in "auto"; under reject dsh put it in "default", which asked and was refused.
    assert (result.stop_reason, result.diagnostic, result.warning) == ("completed", None, None)
    assert not (tmp_path / "created.txt").exists()
    # The refusal goes back to the model in the tool result. Not necessarily in the last request: the agent also
    # asks for a session title on the side, and under load that request may come last.
    assert any("User refused permission" in str(request.body) for request in api.message_requests)


async def test_a_configured_acting_mode_warns(tmp_path: Path) -> None:
    bash = {"tool_name": "Bash", "tool_input": {"command": "touch created.txt", "description": "make a file"}}
    with FakeAnthropic("tool_once", **bash) as api:
        result = await _run(_table(api, tmp_path, mode="auto"), tmp_path)
    assert (result.stop_reason, result.diagnostic, result.warning) == ("completed", None, WARN)
    assert (tmp_path / "created.txt").exists()  # the agent acted without asking: the warning says so
    # The agent's own notice (about its auto mode) and its answer are distinct messages: set apart.
    assert "Hello from fake API" in result.output.split("\n\n")


def _agent_pids() -> list[int]:
    """Our children running claude-agent-acp (only our own children are read)."""
    pids = []
    for pid in child_pids(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"claude-agent-acp" in cmdline:
            pids.append(pid)
    return pids


async def test_sigkill_mid_prompt(tmp_path: Path) -> None:
    with FakeAnthropic("hang") as api:
        provider = from_config("claude", _table(api, tmp_path))
        async with provider.run(SubagentRequest(description="t", prompt="say hello", cwd=str(tmp_path))) as run:
            with anyio.fail_after(60):
                while not api.message_requests:  # the prompt is in flight: the backend has the request
                    await anyio.sleep(0.05)
            (pid,) = _agent_pids()
            os.kill(pid, signal.SIGKILL)
            result = await run.result()
    assert (result.stop_reason, result.diagnostic) == (
        "error",
        FAIL + "stage: process; category: process-exit; signal: SIGKILL)",
    )
