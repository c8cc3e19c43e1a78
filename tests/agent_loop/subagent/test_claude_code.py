"""The Claude Code provider: the real SDK driving the real CLI (offline) and a scripted fake CLI.

Real-product tests run the bundled ``claude`` against ``fixtures/fake_anthropic.py`` on loopback, with
an isolated config dir, retries off and non-essential traffic off (~1 s each). The scripted fake
(``repl/demo/fake_claude_cli.py``, via the provider's ``command``) covers every remaining category and
stage (its scenario table runs in test_product_scenarios.py). Every test checks that no process survives it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent import Provider, SubagentConfigError, build_provider
from dsh.agent_loop.subagent.claude_code import DENY_MESSAGE, ClaudeCodeConfig, ClaudeCodeRun, from_config
from dsh.agent_loop.subagent.result import SubagentResult
from fixtures.fake_anthropic import FakeAnthropic
from tests.agent_loop.subagent.product_support import (
    PARENT_CANARY,
    STDERR_CANARY,
    UPSTREAM_CANARY,
    assert_no_canary,
    fake_claude,
    request,
    run_once,
)
from tests.agent_loop.subagent.product_support import claude_failure as failure
from tests.waiting import PROMPTLY

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

DECISION = (
    "Claude Code unattended decision (mode: dontAsk; request: tool permission; decision: denied): "
    "the provider does not request human approval"
)


# -- scripted fake CLI (its scenario table: test_product_scenarios.py) --------------------------------


async def test_permission_request_is_denied_and_recorded_after_the_failure_line(tmp_path: Path) -> None:
    result = await run_once(fake_claude("permission_then_error"), request(tmp_path))
    assert result.stop_reason == "error"
    assert result.diagnostic == failure("query-run", "error_during_execution", "; exit code: 1") + "\n" + DECISION
    # The CLI saw a deny (the fake reports the behaviour it received in its assistant text).
    assert result.output == "permission answer: deny"
    assert_no_canary(result)


async def test_decision_line_names_the_configured_mode(tmp_path: Path) -> None:
    result = await run_once(fake_claude("permission_then_error", permission_mode="acceptEdits"), request(tmp_path))
    assert result.diagnostic is not None
    assert result.diagnostic.splitlines()[1] == DECISION.replace("mode: dontAsk", "mode: acceptEdits")


async def test_teardown_failure_when_the_cli_outlives_stdin_eof_and_sigterm(tmp_path: Path) -> None:
    provider = fake_claude("linger_after_success", env={"FAKE_CLAUDE_STUBBORN": "1"})
    async with provider.run(request(tmp_path)) as run:
        assert isinstance(run, ClaudeCodeRun)
        await run.started.wait()  # not timed: the first run imports the SDK, seconds on a loaded machine
        with anyio.fail_after(PROMPTLY):  # the CLI never exits by itself: the ladder's 0.5 s graces end it
            result = await run.result()
    assert result.stop_reason == "error"
    assert result.diagnostic == failure("teardown", "unknown", "; signal: SIGKILL")
    assert result.output == "fake answer"  # the answer is kept, as partial output


async def test_argv_env_and_cwd_of_the_child(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", PARENT_CANARY)
    monkeypatch.setenv("DSH_TEST_PARENT_SECRET", PARENT_CANARY)
    monkeypatch.setenv("DSH_TEST_PASSED", "passed-by-name")
    record = tmp_path / "record.json"
    provider = fake_claude(
        "success",
        env={"FAKE_CLAUDE_RECORD": str(record), "EXPLICIT_ONE": "explicit"},
        pass_env=["DSH_TEST_PASSED"],
        model="claude-fake-1",
        max_turns=3,
        max_budget_usd=0.5,
    )
    result = await run_once(provider, request(workdir))
    assert result.stop_reason == "completed"
    seen = json.loads(record.read_text())
    assert seen["cwd"] == str(workdir)
    argv = seen["argv"]
    for flag in (
        ["--output-format", "stream-json"],
        ["--input-format", "stream-json"],
        ["--permission-mode", "dontAsk"],
        ["--permission-prompt-tool", "stdio"],
        ["--model", "claude-fake-1"],
        ["--max-turns", "3"],
        ["--max-budget-usd", "0.5"],
    ):
        assert any(argv[i : i + 2] == flag for i in range(len(argv))), flag
    assert "--no-session-persistence" in argv
    assert "--setting-sources=" in argv
    env = seen["env"]
    assert PARENT_CANARY not in json.dumps(env)
    assert "ANTHROPIC_API_KEY" not in env and "DSH_TEST_PARENT_SECRET" not in env
    assert env["EXPLICIT_ONE"] == "explicit"
    assert env["DSH_TEST_PASSED"] == "passed-by-name"
    assert env["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"
    assert env["CLAUDE_CODE_SDK_READS_SESSION_STATE"] == "1"
    assert env["PATH"] == os.environ["PATH"]


async def test_the_child_leads_its_own_process_group(tmp_path: Path) -> None:
    async with fake_claude("hang").run(request(tmp_path)) as run:
        assert isinstance(run, ClaudeCodeRun)
        await run.started.wait()
        pid = run.transport.process.pid
        assert os.getpgid(pid) == pid != os.getpgid(0)
        await run.cancel()


async def test_local_cancel_settles_aborted_without_diagnostic(tmp_path: Path) -> None:
    async with fake_claude("hang").run(request(tmp_path)) as run:
        await run.started.wait()
        await run.cancel()
        result = await run.result()
    assert (result.stop_reason, result.diagnostic) == ("aborted", None)
    assert result.output in ("", "partial work")  # whatever arrived before the cancel


async def test_dispose_during_a_run_stops_it_and_is_idempotent(tmp_path: Path) -> None:
    results: list[SubagentResult] = []
    async with fake_claude("hang").run(request(tmp_path)) as run, anyio.create_task_group() as tg:

        async def wait() -> None:
            results.append(await run.result())

        tg.start_soon(wait)
        await run.started.wait()
        await run.dispose()
        await run.dispose()
        assert run.transport.process.exited  # dispose returned only once the child was gone
    assert results[0].stop_reason == "aborted" and results[0].diagnostic is None
    assert await run.result() is results[0]


async def test_dispose_before_start_starts_nothing(tmp_path: Path) -> None:
    run = fake_claude("success").run(request(tmp_path))
    await run.dispose()
    result = await run.result()
    assert (result.stop_reason, result.diagnostic) == ("aborted", None)
    assert run.transport is None


async def test_result_is_computed_once(tmp_path: Path) -> None:
    async with fake_claude("success").run(request(tmp_path)) as run:
        first = await run.result()
        assert await run.result() is first


async def test_caller_cancellation_still_tears_the_child_down(tmp_path: Path) -> None:
    run = fake_claude("hang").run(request(tmp_path))
    with anyio.move_on_after(30):
        async with anyio.create_task_group() as tg:
            run.start(tg)
            await run.started.wait()
            tg.cancel_scope.cancel()
    assert run.transport.process.exited
    assert (await run.result()).stop_reason == "aborted"
    await run.dispose()


async def test_two_concurrent_runs_stay_isolated(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    results: dict[str, SubagentResult] = {}

    async def one(name: str, scenario: str) -> None:
        provider = fake_claude(scenario, env={"FAKE_CLAUDE_DELAY": "0.3"})
        results[name] = await run_once(provider, request(tmp_path / name))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "a", "slow_success")
        tg.start_soon(one, "b", "error_max_turns")
    assert results["a"] == SubagentResult("slow fake answer", "completed", None)
    assert results["b"].diagnostic == failure("query-run", "error_max_turns", "; exit code: 1")


async def test_child_stderr_never_reaches_our_terminal(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    result = await run_once(fake_claude("exit_mid_run"), request(tmp_path))
    assert result.stop_reason == "error"
    captured = capfd.readouterr()
    assert STDERR_CANARY not in captured.err + captured.out


async def test_missing_configured_cli_fails_at_query_start(tmp_path: Path) -> None:
    provider = from_config("probe", {"cli_path": str(tmp_path / "no" / "claude")})
    result = await run_once(provider, request(tmp_path))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("query-start", "configuration"))


async def test_missing_working_directory_fails_at_query_start(tmp_path: Path) -> None:
    result = await run_once(fake_claude("success"), request(tmp_path / "gone"))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("query-start", "configuration"))


BAD_TABLES = [
    {"permission_mode": "default"},
    {"permission_mode": "auto"},
    {"max_turns": 0},
    {"max_turns": True},
    {"max_budget_usd": "1"},
    {"env": {"A": 1}},
    {"pass_env": "HOME"},
    {"setting_sources": ["everything"]},
    {"command": []},
    {"cli_path": 3},
    {"cli_pth": "/typo"},
]


@pytest.mark.parametrize("config", BAD_TABLES)
def test_invalid_config_names_the_table_and_key(config: dict[str, Any]) -> None:
    with pytest.raises(SubagentConfigError, match=r"^\[subagents\.probe\] ") as raised:
        ClaudeCodeConfig.from_mapping("probe", config)
    for value in config.values():
        if isinstance(value, str) and value.startswith("/"):
            assert value not in str(raised.value)


@pytest.mark.parametrize("config", BAD_TABLES[:3])
async def test_invalid_config_fails_each_run_without_starting_anything(tmp_path: Path, config: dict[str, Any]) -> None:
    provider = build_provider("probe", {"provider": "claude-code", **config})
    assert provider.run_type is ClaudeCodeRun and provider.problem is not None
    result = await run_once(provider, request(tmp_path))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("query-start", "configuration"))


def test_deny_message_is_fixed_text() -> None:
    assert "unattended" in DENY_MESSAGE


# -- the real CLI, offline ---------------------------------------------------------------------------


def _bundled_cli() -> Path:
    sdk = pytest.importorskip("claude_agent_sdk")
    path = Path(sdk.__file__).parent / "_bundled" / "claude"
    if not path.is_file():
        pytest.skip("claude-agent-sdk without a bundled CLI")
    return path


def real_provider(api: FakeAnthropic, config_dir: Path, **config: Any) -> Provider:
    _bundled_cli()
    env = {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    return from_config("claude", {"env": env, "model": "claude-fake-1", **config})


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    path = tmp_path / "claude-config"
    path.mkdir()
    return path


@pytest.mark.real_product
async def test_real_cli_success_with_parent_secrets_kept_out(
    config_dir: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Secrets in the parent environment must not reach the CLI (they would override our config).
    monkeypatch.setenv("ANTHROPIC_API_KEY", PARENT_CANARY)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", PARENT_CANARY)
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", f"x-canary: {PARENT_CANARY}")
    with FakeAnthropic("text", text="Hello from fake API") as api:
        result = await run_once(real_provider(api, config_dir), request(workdir))
        assert result == SubagentResult("Hello from fake API", "completed", None)
        posts = api.message_requests
        assert posts, "the CLI never called the fake API"
        for post in posts:
            assert post.headers.get("x-api-key") == "sk-ant-test"
            assert PARENT_CANARY not in json.dumps(post.headers)
            assert PARENT_CANARY not in json.dumps(post.body)
    # The CLI's stderr (it complains about the unknown model) stays in the host-side ring.
    captured = capfd.readouterr()
    assert "unrecognized_model" not in captured.err + captured.out
    # No session was persisted for an unattended run.
    assert not (config_dir / "projects").exists() or not any((config_dir / "projects").rglob("*.jsonl"))
    assert list(workdir.iterdir()) == []


@pytest.mark.real_product
async def test_real_cli_error_max_turns(config_dir: Path, workdir: Path) -> None:
    with FakeAnthropic("tool_use") as api:
        result = await run_once(real_provider(api, config_dir, max_turns=1), request(workdir))
    assert result.stop_reason == "error"
    assert result.diagnostic == failure("query-run", "error_max_turns", "; exit code: 1")


@pytest.mark.real_product
async def test_real_cli_api_500_is_an_invalid_success(config_dir: Path, workdir: Path) -> None:
    with FakeAnthropic("status", status=500, error_message=f"upstream broke {UPSTREAM_CANARY}") as api:
        result = await run_once(real_provider(api, config_dir), request(workdir))
        assert len(api.message_requests) == 1  # retries are off
    assert result.stop_reason == "error"
    assert result.diagnostic == failure("query-run", "invalid-success", "; exit code: 1")
    assert_no_canary(result)
    assert UPSTREAM_CANARY not in result.output  # the API error prose is not the agent's output


@pytest.mark.real_product
async def test_real_cli_killed_mid_run_is_a_process_exit_with_its_signal(config_dir: Path, workdir: Path) -> None:
    with FakeAnthropic("hang") as api:
        results: list[SubagentResult] = []
        async with real_provider(api, config_dir).run(request(workdir)) as run:
            assert isinstance(run, ClaudeCodeRun)
            with anyio.fail_after(60):
                while not api.message_requests:  # the CLI is mid-request
                    await anyio.sleep(0.05)
            os.kill(run.transport.process.pid, signal.SIGKILL)
            results.append(await run.result())
    assert results[0].stop_reason == "error"
    assert results[0].diagnostic == failure("process", "process-exit", "; signal: SIGKILL")


@pytest.mark.real_product
async def test_real_sdk_with_a_missing_cli_fails_at_query_start(workdir: Path) -> None:
    _bundled_cli()
    provider = from_config("claude", {"cli_path": "/nonexistent/claude"})
    result = await run_once(provider, request(workdir))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("query-start", "configuration"))


@pytest.mark.real_product
async def test_real_cli_two_concurrent_runs_stay_isolated(tmp_path: Path) -> None:
    dirs = {}
    for name in ("a", "b"):
        for sub in ("config", "work"):
            (tmp_path / name / sub).mkdir(parents=True)
        dirs[name] = tmp_path / name
    results: dict[str, SubagentResult] = {}
    with FakeAnthropic("text", text="answer A") as api_a, FakeAnthropic("tool_use") as api_b:

        async def one(name: str, api: FakeAnthropic, max_turns: int | None = None) -> None:
            extra = {"max_turns": max_turns} if max_turns else {}
            provider = real_provider(api, dirs[name] / "config", **extra)
            results[name] = await run_once(provider, request(dirs[name] / "work"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a", api_a)
            tg.start_soon(one, "b", api_b, 1)
    assert results["a"] == SubagentResult("answer A", "completed", None)
    assert results["b"].diagnostic == failure("query-run", "error_max_turns", "; exit code: 1")
