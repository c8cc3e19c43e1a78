"""The ACP provider against a second real third-party agent: ``@google/gemini-cli`` 0.61 (``gemini --acp``).

The real CLI talks to the loopback Gemini API fake (fixtures/fake_gemini.py) with a canary key, its state
in a fresh home, fully offline (docs/subagents.md, "gemini-cli as an ACP subagent"). ``make npm-agents``
installs it into ``.venv/npm``; without it these tests skip locally (and fail under CI=true).
Each run takes about 3-5 s, most of it the CLI's start-up.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent.acp import from_config
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from fixtures.fake_gemini import GEMINI_CLI_INSTALL, FakeGemini, gemini_cli, gemini_cli_env
from tests.leak_check import child_pids
from tests.real_parts import missing

AGENT = gemini_cli()
CANARY_KEY = "AIzaSyCanaryGeminiKey0c7e91d4b2"  # key-shaped: masked by its shape and as a secret env value
CANARY_TOKEN = "plain-canary-token-9e4f0a"  # no key shape: masked because its env name looks secret
FAIL = "Subagent failure (provider: gemini; "
ANSWER = "Hello from fake Gemini"

pytestmark = [pytest.mark.anyio, pytest.mark.real_product, pytest.mark.usefixtures("no_leftover_processes")]


@pytest.fixture(autouse=True)
def _agent_installed() -> None:
    if not AGENT.exists():
        missing("gemini-cli (npm)", GEMINI_CLI_INSTALL)


def _table(api: FakeGemini, tmp_path: Path, *, key: str | None = CANARY_KEY, **extra: Any) -> dict[str, Any]:
    env = gemini_cli_env(api, tmp_path / "gemini-home", key=key)
    return {
        "provider": "acp",
        "command": [str(AGENT), "--acp"],
        "env": {**env, "DSH_TEST_SERVICE_TOKEN": CANARY_TOKEN},
        "startup_timeout": 60,
        "prompt_timeout": 60,
        **extra,
    }


def _request(cwd: Path) -> SubagentRequest:
    return SubagentRequest(description="test", prompt="say hello", cwd=str(cwd))


async def _run(table: dict[str, Any], cwd: Path) -> SubagentResult:
    async with from_config("gemini", table).run(_request(cwd)) as run:
        return await run.result()


def _assert_no_canary(result: SubagentResult) -> None:
    for text in (result.output, result.diagnostic or ""):
        assert CANARY_KEY not in text and CANARY_TOKEN not in text


async def test_answer_reaches_the_parent(workdir: Path, tmp_path: Path) -> None:
    with FakeGemini("text", text=ANSWER) as api:
        result = await _run(_table(api, tmp_path), workdir)
    assert (result.stop_reason, result.output, result.diagnostic, result.warning) == ("completed", ANSWER, None, None)
    # The key went to the fake, as gemini-cli sends it (a header, never the query string).
    (answer_request,) = api.stream_requests
    assert answer_request.headers.get("x-goog-api-key") == CANARY_KEY
    assert all(CANARY_KEY not in line for line in api.paths)


async def test_no_key_is_the_agents_authentication_required(workdir: Path, tmp_path: Path) -> None:
    with FakeGemini("text") as api:
        result = await _run(_table(api, tmp_path, key=None), workdir)
    # gemini-cli answers session/new with -32000 ("Gemini API key is missing or not configured.").
    assert (result.stop_reason, result.output, result.diagnostic) == (
        "error",
        "",
        FAIL + "stage: new-session; category: agent-error; error code: -32000 (authentication required))",
    )
    assert api.requests == []  # it never reached the backend


async def test_backend_500_is_the_agents_error_and_the_echoed_secrets_stay_out(workdir: Path, tmp_path: Path) -> None:
    echo = f"bad key {CANARY_KEY} and token {CANARY_TOKEN}."
    with FakeGemini("status", status=500, error_message=echo) as api:
        result = await _run(_table(api, tmp_path), workdir)
    # gemini-cli answers session/prompt with the HTTP status as the JSON-RPC code (500) and the upstream
    # body as the message: the code is a closed fact, the message stays host-side.
    assert (result.stop_reason, result.output, result.diagnostic) == (
        "error",
        "",
        FAIL + "stage: prompt; category: agent-error; error code: 500)",
    )
    assert len(api.stream_requests) == 1  # maxAttempts = 1: no backoff
    _assert_no_canary(result)


@pytest.mark.parametrize(("policy", "ran"), [("reject", False), ("allow", True)])
async def test_the_permission_policy_decides_a_shell_command(
    workdir: Path, tmp_path: Path, policy: str, ran: bool
) -> None:
    # gemini-cli starts in its "default" mode, which asks: the policy's answer is what happens.
    with FakeGemini("tool_once", text=ANSWER) as api:
        result = await _run(_table(api, tmp_path, permission=policy), workdir)
    assert (result.stop_reason, result.output, result.diagnostic, result.warning) == ("completed", ANSWER, None, None)
    assert (workdir / "created.txt").exists() is ran
    (tool_result,) = _function_responses(api)
    assert ("error" in tool_result) is not ran  # refused: 'Tool "run_shell_command" was canceled by the user.'


def _function_responses(api: FakeGemini) -> list[dict[str, Any]]:
    """What the agent sent back to the model for its function calls, in every answer request."""
    last_contents = [request.body["contents"][-1] for request in api.stream_requests]
    return [part["functionResponse"]["response"] for content in last_contents for part in content["parts"]
            if "functionResponse" in part]  # fmt: skip


def _gemini_processes() -> tuple[int, int]:
    """(the CLI dsh started, the agent it relaunched itself as): only our own descendants are read."""
    (launcher,) = [pid for pid in child_pids(os.getpid()) if b"gemini" in _cmdline(pid)]
    (agent,) = child_pids(launcher)
    return launcher, agent


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def _wait_for_the_prompt(api: FakeGemini) -> None:
    with anyio.fail_after(60):
        while not api.stream_requests:  # the prompt is in flight: the backend holds the answer request
            await anyio.sleep(0.05)


@pytest.mark.parametrize(
    ("victim", "ending"),
    [
        # The process dsh started: its death is observed as such.
        ("launcher", "signal: SIGKILL)"),
        # The relaunched agent: the launcher reports a child that died of a signal as exit code 1.
        ("agent", "exit code: 1)"),
    ],
)
async def test_sigkill_mid_prompt(workdir: Path, tmp_path: Path, victim: str, ending: str) -> None:
    with FakeGemini("hang") as api:
        async with from_config("gemini", _table(api, tmp_path)).run(_request(workdir)) as run:
            await _wait_for_the_prompt(api)
            launcher, agent = _gemini_processes()
            os.kill(launcher if victim == "launcher" else agent, signal.SIGKILL)
            result = await run.result()
    expected = FAIL + "stage: process; category: process-exit; " + ending
    assert (result.stop_reason, result.diagnostic) == ("error", expected)


async def test_cancel_mid_prompt_settles_aborted_and_reaps_the_agent(workdir: Path, tmp_path: Path) -> None:
    with FakeGemini("hang") as api:
        async with from_config("gemini", _table(api, tmp_path)).run(_request(workdir)) as run:
            await _wait_for_the_prompt(api)
            launcher, agent = _gemini_processes()
            await run.cancel()
            result = await run.result()
    assert (result.stop_reason, result.diagnostic) == ("aborted", None)
    # Both node processes are gone once the run is disposed (no_leftover_processes checks every descendant).
    assert not Path(f"/proc/{launcher}").exists() and not Path(f"/proc/{agent}").exists()
