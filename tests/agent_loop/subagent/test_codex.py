"""The Codex provider: the real ``codex app-server`` (offline) and a scripted fake app-server.

Real-product tests run the binary from ``openai-codex-cli-bin`` with an isolated ``CODEX_HOME`` and a
custom model provider pointed at ``fixtures/fake_responses.py`` on loopback (retries off; ~0.3-1 s
each). The scripted fake (``repl/demo/fake_codex_app_server.py``, via ``command``) covers every
``codexErrorInfo`` variant, every stage, approvals, deadlines and teardown failures.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent import Provider, SubagentConfigError, build_provider
from dsh.agent_loop.subagent.codex import (
    STATUS_VARIANTS,
    STRING_VARIANTS,
    CodexConfig,
    CodexRun,
    classify_error_info,
    from_config,
)
from dsh.agent_loop.subagent.result import SubagentFailure, SubagentResult
from dsh.agent_loop.subagent.tool import foreground_output
from fixtures.fake_responses import FakeResponses, closed_port
from tests.agent_loop.subagent.product_support import (
    PARENT_CANARY,
    PROMPT_CANARY,
    STDERR_CANARY,
    UPSTREAM_CANARY,
    assert_no_canary,
    fake_codex,
    request,
    run_once,
)
from tests.agent_loop.subagent.product_support import codex_failure as failure
from tests.waiting import PROMPTLY, async_wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]


def decision(request_kind: str, decided: str) -> str:
    return (
        f"Codex unattended decision (mode: never; request: {request_kind}; decision: {decided}): "
        "the provider does not request human approval"
    )


# -- codexErrorInfo: every variant --------------------------------------------------------------------


def test_every_string_variant_is_kept_verbatim() -> None:
    assert len(STRING_VARIANTS) == 15
    for name in STRING_VARIANTS:
        assert classify_error_info(name) == (name, None)


@pytest.mark.parametrize("name", sorted(STATUS_VARIANTS))
def test_status_variants_carry_an_integer_http_status_only(name: str) -> None:
    assert classify_error_info({name: {"httpStatusCode": 429}}) == (name, 429)
    assert classify_error_info({name: {"httpStatusCode": None}}) == (name, None)
    assert classify_error_info({name: {}}) == (name, None)
    assert classify_error_info({name: {"httpStatusCode": "429"}}) == (name, None)
    assert classify_error_info({name: {"httpStatusCode": True}}) == (name, None)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"activeTurnNotSteerable": {"turnKind": "review"}}, ("activeTurnNotSteerable", None)),
        ({"activeTurnNotSteerable": {"turnKind": "compact"}}, ("activeTurnNotSteerable", None)),
        ("brandNewVariant", ("unknown", None)),
        ("ContextWindowExceeded", ("unknown", None)),  # not the wire spelling
        ({"modelCap": {"model": "x", "reset_after_seconds": 3}}, ("unknown", None)),
        ({"httpConnectionFailed": {"httpStatusCode": 401}, "other": {}}, ("unknown", None)),
        ({"httpConnectionFailed": None}, ("unknown", None)),
        ({"httpConnectionFailed": 401}, ("unknown", None)),
        ({}, ("unknown", None)),
        (None, ("unknown", None)),
        (42, ("unknown", None)),
        (["other"], ("unknown", None)),
        (f"other {UPSTREAM_CANARY}", ("unknown", None)),
    ],
)
def test_other_values_are_object_variants_or_unknown(info: Any, expected: tuple[str, int | None]) -> None:
    assert classify_error_info(info) == expected


FAILED_TURNS = [
    *[(name, failure("turn", name)) for name in sorted(STRING_VARIANTS - {"contextWindowExceeded"})],
    *[
        ({name: {"httpStatusCode": 503}}, failure("turn", name, "; HTTP status: 503"))
        for name in sorted(STATUS_VARIANTS)
    ],
    *[({name: {"httpStatusCode": None}}, failure("turn", name)) for name in sorted(STATUS_VARIANTS)],
    ({"activeTurnNotSteerable": {"turnKind": "review"}}, failure("turn", "activeTurnNotSteerable")),
    ("brandNewVariant", failure("turn", "unknown")),
    ({"httpConnectionFailed": {"httpStatusCode": 401}, "badRequest": {}}, failure("turn", "unknown")),
    ([1, 2], failure("turn", "unknown")),
]  # fmt: skip


@pytest.mark.parametrize(("info", "diagnostic"), FAILED_TURNS, ids=[json.dumps(i) for i, _ in FAILED_TURNS])
async def test_failed_turn_category(tmp_path: Path, info: Any, diagnostic: str) -> None:
    result = await run_once(fake_codex("fail", info), request(tmp_path))
    # cyberPolicy is not a refusal, and no other category changes the stop reason.
    assert (result.stop_reason, result.diagnostic) == ("error", diagnostic)
    assert_no_canary(result)


async def test_context_window_exceeded_is_max_tokens_with_partial_output(tmp_path: Path) -> None:
    result = await run_once(fake_codex("partial_then_context"), request(tmp_path))
    assert result == SubagentResult("half an answer", "max-tokens", failure("turn", "contextWindowExceeded"))


async def test_error_notification_supplies_the_category_when_the_turn_error_is_null(tmp_path: Path) -> None:
    result = await run_once(fake_codex("error_then_fail", "usageLimitExceeded"), request(tmp_path))
    assert result.diagnostic == failure("turn", "usageLimitExceeded")


# -- stages (the scenario table runs in test_product_scenarios.py) ------------------------------------

async def test_turn_start_error_with_structured_info(tmp_path: Path) -> None:
    info = {"activeTurnNotSteerable": {"turnKind": "compact"}}
    result = await run_once(fake_codex("turn_start_error", info), request(tmp_path))
    assert result.diagnostic == failure("turn-start", "activeTurnNotSteerable")


async def test_silent_turn_start_hits_the_deadline(tmp_path: Path) -> None:
    result = await run_once(fake_codex("turn_start_silent", turn_timeout=0.5), request(tmp_path))
    assert result.diagnostic == failure("turn-start", "timeout")


async def test_missing_binary_fails_at_initialize(tmp_path: Path) -> None:
    provider = from_config("codex", {"command": [str(tmp_path / "no" / "codex")]})
    result = await run_once(provider, request(tmp_path))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("initialize", "configuration"))


async def test_missing_working_directory_fails_at_initialize(tmp_path: Path) -> None:
    result = await run_once(fake_codex("success"), request(tmp_path / "gone"))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("initialize", "configuration"))


# -- approvals, deadline, cancellation ----------------------------------------------------------------


async def test_approvals_are_declined_unattended_and_the_latest_is_recorded(tmp_path: Path) -> None:
    result = await run_once(fake_codex("approvals_then_fail"), request(tmp_path))
    assert result.stop_reason == "error"
    assert result.diagnostic == failure("turn", "sandboxError") + "\n" + decision("command execution", "denied")
    replies = {entry["method"]: entry["reply"] for entry in json.loads(result.output)}
    assert replies["item/commandExecution/requestApproval"]["result"] == {"decision": "decline"}
    assert replies["item/fileChange/requestApproval"]["result"] == {"decision": "decline"}
    assert replies["item/permissions/requestApproval"]["result"] == {"permissions": {}, "scope": "turn"}
    assert replies["item/tool/requestUserInput"]["result"] == {"answers": {}}
    assert replies["mcpServer/elicitation/request"]["result"] == {"action": "decline"}
    assert replies["item/tool/call"]["result"] == {"contentItems": [], "success": False}
    assert replies["execCommandApproval"]["result"] == {"decision": "denied"}
    assert replies["account/chatgptAuthTokens/refresh"]["error"]["code"] == -32601
    assert all("jsonrpc" not in entry["reply"] for entry in json.loads(result.output))
    assert_no_canary(result)


# The turn deadline also covers turn/start's answer: 2 s, so a loaded machine cannot make it fire before the
# fake has answered (the diagnostic would then be a turn-start timeout).
TURN_DEADLINE = 2


async def test_deadline_interrupts_the_turn_and_settles(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    provider = fake_codex("hang_turn", turn_timeout=TURN_DEADLINE, env={"FAKE_CODEX_RECORD": str(record)})
    with anyio.fail_after(PROMPTLY):  # the turn never ends by itself: without the deadline this hangs
        result = await run_once(provider, request(tmp_path))
    # The retrying error Codex reported is why the turn never finished.
    assert result == SubagentResult("still going", "error", failure("turn", "responseStreamDisconnected"))
    sent = [frame.get("method") for frame in json.loads(record.read_text())["received"]]
    assert "turn/interrupt" in sent


async def test_deadline_settles_even_when_the_interrupt_is_ignored(tmp_path: Path) -> None:
    # The fake answers turn/interrupt but never ends the turn: without the interrupt grace this hangs.
    with anyio.fail_after(PROMPTLY):
        result = await run_once(fake_codex("ignore_interrupt", turn_timeout=TURN_DEADLINE), request(tmp_path))
    assert result.diagnostic == failure("turn", "responseStreamDisconnected")


async def test_local_cancel_interrupts_and_settles_aborted(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    async with fake_codex("hang_turn", env={"FAKE_CODEX_RECORD": str(record)}).run(request(tmp_path)) as run:
        assert isinstance(run, CodexRun)
        await run.turn_started.wait()
        await run.cancel()
        result = await run.result()
    assert (result.stop_reason, result.diagnostic) == ("aborted", None)
    sent = [frame.get("method") for frame in json.loads(record.read_text())["received"]]
    assert "turn/interrupt" in sent


async def test_a_cancel_while_turn_start_is_unanswered_still_interrupts_the_turn(tmp_path: Path) -> None:
    # The app-server has the turn but dsh has no turn id yet: the interrupt waits (within its grace) for the
    # id that follows, and the connection keeps reading while the cancel unwinds.
    record = tmp_path / "record.json"
    env = {"FAKE_CODEX_RECORD": str(record), "FAKE_CODEX_TURN_START_DELAY": "0.1"}
    async with fake_codex("hang_turn", env=env).run(request(tmp_path)) as run:
        started = lambda: record.exists() and "turn/start" in record.read_text()  # noqa: E731
        await async_wait_until(started, PROMPTLY, "turn/start to reach the app-server")
        await run.cancel()
        result = await run.result()
    assert result.stop_reason == "aborted"
    sent = [frame.get("method") for frame in json.loads(record.read_text())["received"]]
    assert sent[-1] == "turn/interrupt"


async def test_dispose_mid_turn_stops_the_run_and_is_idempotent(tmp_path: Path) -> None:
    results: list[SubagentResult] = []
    async with fake_codex("hang_turn").run(request(tmp_path)) as run, anyio.create_task_group() as tg:
        assert isinstance(run, CodexRun)

        async def wait() -> None:
            results.append(await run.result())

        tg.start_soon(wait)
        await run.turn_started.wait()
        await run.dispose()
        await run.dispose()
        assert run.process is not None and run.process.exited  # dispose returned once the child was gone
    assert results[0].stop_reason == "aborted"


async def test_caller_cancellation_still_tears_the_child_down(tmp_path: Path) -> None:
    run = fake_codex("hang_turn").run(request(tmp_path))
    assert isinstance(run, CodexRun)
    async with anyio.create_task_group() as tg:
        run.start(tg)
        await run.turn_started.wait()
        tg.cancel_scope.cancel()
    assert run.process is not None and run.process.exited
    assert (await run.result()).stop_reason == "aborted"
    await run.dispose()


# -- the child ----------------------------------------------------------------------------------------


async def test_wire_argv_env_and_thread_parameters(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PARENT_CANARY)
    monkeypatch.setenv("CODEX_API_KEY", PARENT_CANARY)
    monkeypatch.setenv("DSH_TEST_PASSED", "by-name")
    record = tmp_path / "record.json"
    provider = fake_codex(
        "success",
        env={"FAKE_CODEX_RECORD": str(record), "EXPLICIT_ONE": "explicit"},
        pass_env=["DSH_TEST_PASSED"],
        model="gpt-test",
        config={"model_reasoning_effort": "low", "model_providers.local.stream_max_retries": 0, "hide": True},
    )
    result = await run_once(provider, request(workdir))
    assert result == SubagentResult("fake answer", "completed", None)
    seen = json.loads(record.read_text())
    assert seen["argv"] == [
        "-c", 'model_reasoning_effort="low"',
        "-c", "model_providers.local.stream_max_retries=0",
        "-c", "hide=true",
        "app-server", "--listen", "stdio://",
    ]  # fmt: skip
    assert seen["cwd"] == str(workdir)
    env = seen["env"]
    assert PARENT_CANARY not in json.dumps(env)
    assert env["EXPLICIT_ONE"] == "explicit" and env["DSH_TEST_PASSED"] == "by-name"
    frames = seen["received"]
    assert all("jsonrpc" not in frame for frame in frames)
    methods = [frame.get("method") for frame in frames]
    assert methods[:4] == ["initialize", "initialized", "thread/start", "turn/start"]
    thread_start = frames[2]["params"]
    assert thread_start == {
        "cwd": str(workdir), "ephemeral": True, "approvalPolicy": "never", "sandbox": "read-only", "model": "gpt-test",
    }  # fmt: skip
    turn_start = frames[3]["params"]
    assert turn_start["input"] == [{"type": "text", "text": f"do the task {PROMPT_CANARY}"}]


async def test_the_child_leads_its_own_process_group(tmp_path: Path) -> None:
    async with fake_codex("hang_turn").run(request(tmp_path)) as run:
        assert isinstance(run, CodexRun)
        await run.turn_started.wait()
        assert run.process is not None and run.process.pid is not None
        assert os.getpgid(run.process.pid) == run.process.pid != os.getpgid(0)
        await run.cancel()


async def test_child_stderr_never_reaches_our_terminal(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    await run_once(fake_codex("exit_mid_turn"), request(tmp_path))
    captured = capfd.readouterr()
    assert STDERR_CANARY not in captured.err + captured.out


async def test_two_concurrent_runs_stay_isolated(tmp_path: Path) -> None:
    results: dict[str, SubagentResult] = {}

    async def one(name: str, scenario: str, info: Any = None) -> None:
        (tmp_path / name).mkdir()
        results[name] = await run_once(fake_codex(scenario, info), request(tmp_path / name))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "a", "success")
        tg.start_soon(one, "b", "fail", {"httpConnectionFailed": {"httpStatusCode": 401}})
    assert results["a"] == SubagentResult("fake answer", "completed", None)
    assert results["b"].diagnostic == failure("turn", "httpConnectionFailed", "; HTTP status: 401")


BAD_TABLES = [
    {"sandbox": "danger-full-access"},
    {"turn_timeout": 0},
    {"turn_timeout": "10"},
    {"config": {"a": [1]}},
    {"config": {"a b": 1}},
    {"config": "x"},
    {"command": []},
    {"env": {"A": None}},
    {"turn_timout": 5},
]


@pytest.mark.parametrize("config", BAD_TABLES)
def test_invalid_config_names_the_table(config: dict[str, Any]) -> None:
    with pytest.raises(SubagentConfigError, match=r"^\[subagents\.codex\] "):
        CodexConfig.from_mapping("codex", config)


async def test_invalid_config_fails_each_run_without_starting_anything(tmp_path: Path) -> None:
    provider = build_provider("codex", {"provider": "codex", "sandbox": "danger-full-access"})
    assert provider.run_type is CodexRun and provider.problem is not None
    result = await run_once(provider, request(tmp_path))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("initialize", "configuration"))


# -- the real binary, offline -------------------------------------------------------------------------


def _real_codex() -> str:
    codex_cli_bin = pytest.importorskip("codex_cli_bin")
    try:
        return str(codex_cli_bin.bundled_codex_path())
    except FileNotFoundError:
        pytest.skip("openai-codex-cli-bin without its binary")


def real_provider(base_url: str, codex_home: Path, **config: Any) -> Provider:
    _real_codex()
    overrides = {
        "model_provider": "local",
        "model_providers.local.name": "local",
        "model_providers.local.base_url": base_url + "/v1",
        "model_providers.local.env_key": "OPENAI_API_KEY",
        "model_providers.local.wire_api": "responses",
        "model_providers.local.stream_max_retries": 0,
        "model_providers.local.request_max_retries": 0,
        "model": "gpt-test",
        # Codex's shell snapshot runs a login shell in a session of its own; when a test SIGKILLs codex
        # that shell is orphaned beyond anyone's reach, so keep it out of these runs.
        "features.shell_snapshot": False,
    }
    env = {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-test"}
    return from_config("codex", {"env": env, "config": overrides, **config})


@pytest.fixture
def codex_home(tmp_path: Path) -> Path:
    path = tmp_path / "codex-home"
    path.mkdir()
    return path


@pytest.mark.real_product
async def test_real_codex_success_with_parent_secrets_kept_out(
    codex_home: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PARENT_CANARY)  # the explicit entry must win; nothing else leaks
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with FakeResponses("text", text="hi there", phase="final_answer") as api:
        result = await run_once(real_provider(api.url, codex_home), request(workdir))
        assert result == SubagentResult("hi there", "completed", None)
        posts = api.response_requests
        assert posts and all(p.headers.get("authorization") == "Bearer sk-test" for p in posts)
        assert all(PARENT_CANARY not in json.dumps(p.headers) for p in posts)


@pytest.mark.real_product
async def test_real_codex_upstream_401_is_http_connection_failed(codex_home: Path, workdir: Path) -> None:
    with FakeResponses("status", status=401, error_message=f"bad key {UPSTREAM_CANARY}") as api:
        result = await run_once(real_provider(api.url, codex_home), request(workdir))
    assert result.stop_reason == "error"
    assert result.diagnostic == failure("turn", "httpConnectionFailed", "; HTTP status: 401")
    assert_no_canary(result)


@pytest.mark.real_product
async def test_real_codex_upstream_500_is_internal_server_error(codex_home: Path, workdir: Path) -> None:
    with FakeResponses("status", status=500, error_message=f"boom {UPSTREAM_CANARY}") as api:
        result = await run_once(real_provider(api.url, codex_home), request(workdir))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("turn", "internalServerError"))


@pytest.mark.real_product
async def test_real_codex_mid_stream_close_is_other(codex_home: Path, workdir: Path) -> None:
    with FakeResponses("close") as api:
        result = await run_once(real_provider(api.url, codex_home), request(workdir))
    assert (result.stop_reason, result.diagnostic) == ("error", failure("turn", "other"))


@pytest.mark.real_product
async def test_real_codex_context_window_exceeded_is_max_tokens(codex_home: Path, workdir: Path) -> None:
    with FakeResponses("context") as api:
        result = await run_once(real_provider(api.url, codex_home), request(workdir))
    assert (result.stop_reason, result.diagnostic) == ("max-tokens", failure("turn", "contextWindowExceeded"))


@pytest.mark.real_product
async def test_real_codex_refused_upstream_hits_the_deadline_and_settles(codex_home: Path, workdir: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    result = await run_once(real_provider(url, codex_home, turn_timeout=3), request(workdir))
    elapsed = time.monotonic() - started
    # The 3 s deadline, then up to 9 s of interrupt grace and teardown; not the default 600 s deadline.
    assert 3 <= elapsed < 60
    assert result.stop_reason == "error"
    # Codex keeps retrying ("Reconnecting..."): its latest structured fact is the category.
    assert result.diagnostic == failure("turn", "responseStreamDisconnected")


@pytest.mark.real_product
async def test_real_codex_killed_mid_turn_is_a_process_exit(codex_home: Path, workdir: Path) -> None:
    with FakeResponses("hang") as api:
        results: list[SubagentResult] = []
        async with real_provider(api.url, codex_home).run(request(workdir)) as run:
            assert isinstance(run, CodexRun)
            with anyio.fail_after(30):
                while not api.response_requests:
                    await anyio.sleep(0.05)
            assert run.process is not None and run.process.pid is not None
            os.kill(run.process.pid, signal.SIGKILL)
            results.append(await run.result())
    assert results[0].diagnostic == failure("process", "process-exit", "; signal: SIGKILL")


@pytest.mark.real_product
async def test_real_codex_two_concurrent_runs_stay_isolated(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name / "home").mkdir(parents=True)
        (tmp_path / name / "work").mkdir()
    results: dict[str, SubagentResult] = {}
    with FakeResponses("text", text="answer A") as api_a, FakeResponses("status", status=500) as api_b:

        async def one(name: str, api: FakeResponses) -> None:
            provider = real_provider(api.url, tmp_path / name / "home")
            results[name] = await run_once(provider, request(tmp_path / name / "work"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a", api_a)
            tg.start_soon(one, "b", api_b)
    assert results["a"] == SubagentResult("answer A", "completed", None)
    assert results["b"].diagnostic == failure("turn", "internalServerError")


@pytest.mark.real_product
async def test_real_codex_missing_key_is_said_in_the_record_never_to_the_model(codex_home: Path, workdir: Path) -> None:
    with FakeResponses("text", text="never asked") as api:
        provider = real_provider(api.url, codex_home, env={"CODEX_HOME": str(codex_home)})  # no OPENAI_API_KEY
        result = await run_once(provider, request(workdir))
    assert result.stop_reason == "error" and "OPENAI_API_KEY" not in (result.diagnostic or "")
    assert isinstance(result.cause, SubagentFailure) and result.cause.message == result.diagnostic
    said = dict(result.cause.words.said)
    assert "Missing environment variable: `OPENAI_API_KEY`" in said["error message"]
    assert "OPENAI_API_KEY" not in foreground_output(result).text


@pytest.mark.real_product
async def test_real_codex_cancelled_while_its_backend_hangs_settles_without_the_interrupt_grace(
    codex_home: Path, workdir: Path
) -> None:
    with FakeResponses("hang") as api:
        async with real_provider(api.url, codex_home, interrupt_grace=30).run(request(workdir)) as run:
            assert isinstance(run, CodexRun)
            with anyio.fail_after(30):
                while not api.response_requests:
                    await anyio.sleep(0.05)
            with anyio.fail_after(10):  # the 30 s interrupt grace is the deadline's, never a cancel's
                await run.dispose()
    assert (await run.result()).stop_reason == "aborted"
    assert run.teardown is not None and run.teardown.tier in ("exited", "eof")  # no signal was needed
