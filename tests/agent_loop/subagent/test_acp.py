"""The ACP provider against a real ACP agent (repl/demo/acp_agent.py, built on the official SDK).

Each row of the scenario table is its own test; one more test runs twenty of them at once.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.process import Teardown
from dsh.agent_loop.subagent import Provider
from dsh.agent_loop.subagent.acp import AcpRun, AcpSettings, from_config
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from tests.waiting import PROMPTLY

REPO = str(Path(__file__).resolve().parents[3])
# a scripted child: it runs as a process, never imported (tests of agent_loop load no front end)
AGENT = str(Path(REPO, "repl", "demo", "acp_agent.py"))

CANARY_TASK = "sk-canary-task-5b1e"
CANARY_STDERR = "sk-canary-stderr-77aa"
CANARY_ENV = "sk-canary-parentenv-c0de"
CANARY_VALUE = "mystery-sk-canary-stop-91f2"
INTERNAL_ERROR = "error code: -32603 (internal error))"
ALL_CANARIES = (CANARY_TASK, CANARY_STDERR, CANARY_ENV, CANARY_VALUE)

FAIL = "Subagent failure (provider: probe; "


def _perm(policy: str, kind: str, decision: str) -> str:
    return f"Subagent permission decision (policy: {policy}; request: {kind}; decision: {decision})"


@dataclass
class Scenario:
    env: dict[str, str]
    stop_reason: str
    diagnostic: str | None
    output: str | Callable[[str], bool] | None = None  # exact text or predicate; None: don't care
    config: dict[str, Any] = field(default_factory=dict)
    prompt: str = f"please do it {CANARY_TASK}"


# fmt: off
SCENARIOS: dict[str, Scenario] = {
    # -- stop reasons ------------------------------------------------------------------------------
    # The task's canary is key-shaped: the child's echo of it comes back masked, like every key shape.
    "end_turn": Scenario({}, "completed", None, "echo: please do it sk-***"),
    "max_tokens": Scenario({"ACP_FAKE_STOP": "max_tokens", "ACP_FAKE_TEXT": "partial answer"},
                           "max-tokens", None, "partial answer"),
    "refusal": Scenario({"ACP_FAKE_STOP": "refusal", "ACP_FAKE_TEXT": "no"}, "refusal", None, "no",
                        config={"command": [sys.executable, AGENT], "args": []}),  # argv-list form
    "remote_cancelled": Scenario({"ACP_FAKE_STOP": "cancelled", "ACP_FAKE_TEXT": "stopped"}, "aborted", None,
                                 "stopped"),
    "max_turn_requests": Scenario(
        {"ACP_FAKE_STOP": "max_turn_requests", "ACP_FAKE_TEXT": "so far"}, "error",
        FAIL + "stage: prompt; category: remote-limit; stop reason: max_turn_requests)", "so far"),
    "unknown_stop": Scenario({"ACP_FAKE_STOP": CANARY_VALUE, "ACP_FAKE_TEXT": "x"}, "error",
                             FAIL + "stage: prompt; category: unknown)", "x"),
    # -- permission decisions -----------------------------------------------------------------------
    "perm_reject_max_tokens": Scenario(
        {"ACP_FAKE_PERMISSION": "execute", "ACP_FAKE_STOP": "max_tokens", "ACP_FAKE_TEXT": "t"},
        "max-tokens", _perm("reject", "execute", "rejected"), "t [permission: selected reject]"),
    "perm_allow_refusal": Scenario(
        {"ACP_FAKE_PERMISSION": "edit", "ACP_FAKE_STOP": "refusal", "ACP_FAKE_TEXT": "t"},
        "refusal", _perm("allow", "edit", "allowed"), "t [permission: selected allow]",
        config={"permission": "allow"}),
    "perm_remote_aborted": Scenario(
        {"ACP_FAKE_PERMISSION": "fetch", "ACP_FAKE_STOP": "cancelled", "ACP_FAKE_TEXT": "t"},
        "aborted", _perm("reject", "fetch", "rejected"), "t [permission: selected reject]"),
    "perm_remote_limit": Scenario(
        {"ACP_FAKE_PERMISSION": "delete", "ACP_FAKE_STOP": "max_turn_requests", "ACP_FAKE_TEXT": "t"},
        "error",
        FAIL + "stage: prompt; category: remote-limit; stop reason: max_turn_requests)\n"
        + _perm("reject", "delete", "rejected")),
    "perm_unknown_stop": Scenario(
        {"ACP_FAKE_PERMISSION": "think", "ACP_FAKE_STOP": "odd", "ACP_FAKE_TEXT": "t"}, "error",
        FAIL + "stage: prompt; category: unknown)\n" + _perm("allow", "think", "allowed"),
        config={"permission": "allow"}),
    "perm_completed_is_silent": Scenario(
        {"ACP_FAKE_PERMISSION": "execute", "ACP_FAKE_TEXT": "t"}, "completed", None,
        "t [permission: selected reject]"),
    "perm_kind_from_tool_call": Scenario(
        {"ACP_FAKE_PERMISSION": "move", "ACP_FAKE_PERMISSION_BARE": "1", "ACP_FAKE_STOP": "refusal",
         "ACP_FAKE_TEXT": "t"},
        "refusal", _perm("reject", "move", "rejected")),
    "perm_no_matching_option": Scenario(
        {"ACP_FAKE_PERMISSION": "execute", "ACP_FAKE_PERMISSION_OPTIONS": "allow_once,allow_always",
         "ACP_FAKE_STOP": "max_tokens", "ACP_FAKE_TEXT": "t"},
        "max-tokens", _perm("reject", "execute", "cancelled"), "t [permission: cancelled]"),
    "perm_allow_always_fallback": Scenario(
        {"ACP_FAKE_PERMISSION": "read", "ACP_FAKE_PERMISSION_OPTIONS": "allow_always,reject_once",
         "ACP_FAKE_STOP": "max_tokens", "ACP_FAKE_TEXT": "t"},
        "max-tokens", _perm("allow", "read", "allowed"), "t [permission: selected always]",
        config={"permission": "allow"}),
    "perm_then_process_exit": Scenario(
        {"ACP_FAKE_PERMISSION": "execute", "ACP_FAKE_EXIT_AT": "permission", "ACP_FAKE_EXIT_SIGNAL": "SIGKILL"},
        "error", FAIL + "stage: process; category: process-exit; signal: SIGKILL)\n"
        + _perm("reject", "execute", "rejected"), ""),
    # -- initialize -----------------------------------------------------------------------------------
    "initialize_exit_code": Scenario({"ACP_FAKE_EXIT_AT": "initialize", "ACP_FAKE_EXIT_CODE": "9"}, "error",
                                     FAIL + "stage: initialize; category: process-exit; exit code: 9)", ""),
    "initialize_exit_signal": Scenario(
        {"ACP_FAKE_EXIT_AT": "initialize", "ACP_FAKE_EXIT_SIGNAL": "SIGKILL"}, "error",
        FAIL + "stage: initialize; category: process-exit; signal: SIGKILL)", ""),
    "initialize_error_answer": Scenario({"ACP_FAKE_ERROR_AT": "initialize"}, "error",
                                        FAIL + "stage: initialize; category: transport)", ""),
    "initialize_transport": Scenario({"ACP_FAKE_CLOSE_STDOUT_AT": "initialize"}, "error",
                                     FAIL + "stage: initialize; category: transport)", ""),
    "initialize_timeout": Scenario({"ACP_FAKE_HANG": "initialize"}, "error",
                                   FAIL + "stage: initialize; category: timeout)", "",
                                   config={"startup_timeout": 1.5}),
    # -- new-session ----------------------------------------------------------------------------------
    "new_session_exit_code": Scenario({"ACP_FAKE_EXIT_AT": "new-session", "ACP_FAKE_EXIT_CODE": "3"}, "error",
                                      FAIL + "stage: new-session; category: process-exit; exit code: 3)"),
    "new_session_exit_signal": Scenario(
        {"ACP_FAKE_EXIT_AT": "new-session", "ACP_FAKE_EXIT_SIGNAL": "SIGTERM"}, "error",
        FAIL + "stage: new-session; category: process-exit; signal: SIGTERM)"),
    "new_session_missing_id": Scenario({"ACP_FAKE_SESSION_ID": "omit"}, "error",
                                       FAIL + "stage: new-session; category: protocol)"),
    "new_session_blank_id": Scenario({"ACP_FAKE_SESSION_ID": "blank"}, "error",
                                     FAIL + "stage: new-session; category: protocol)"),
    "new_session_error_answer": Scenario({"ACP_FAKE_ERROR_AT": "new-session"}, "error",
                                         FAIL + "stage: new-session; category: agent-error; " + INTERNAL_ERROR),
    "new_session_transport": Scenario({"ACP_FAKE_CLOSE_STDOUT_AT": "new-session"}, "error",
                                      FAIL + "stage: new-session; category: transport)"),
    # -- prompt / process ------------------------------------------------------------------------------
    "prompt_exit_code": Scenario({"ACP_FAKE_EXIT_AT": "prompt", "ACP_FAKE_EXIT_CODE": "5"}, "error",
                                 FAIL + "stage: process; category: process-exit; exit code: 5)",
                                 "partial before exit"),
    "prompt_exit_signal": Scenario({"ACP_FAKE_EXIT_AT": "prompt", "ACP_FAKE_EXIT_SIGNAL": "SIGKILL"}, "error",
                                   FAIL + "stage: process; category: process-exit; signal: SIGKILL)",
                                   "partial before exit"),
    "prompt_exit_grandchild_holds_pipes": Scenario(
        {"ACP_FAKE_EXIT_AT": "prompt", "ACP_FAKE_EXIT_CODE": "6", "ACP_FAKE_GRANDCHILD": "1"}, "error",
        FAIL + "stage: process; category: process-exit; exit code: 6)", "partial before exit"),
    "prompt_exit_zero": Scenario({"ACP_FAKE_EXIT_AT": "prompt", "ACP_FAKE_EXIT_CODE": "0"}, "error",
                                 FAIL + "stage: process; category: process-exit; exit code: 0)"),
    "prompt_transport": Scenario({"ACP_FAKE_CLOSE_STDOUT_AT": "prompt"}, "error",
                                 FAIL + "stage: prompt; category: transport)", ""),
    "prompt_error_answer": Scenario({"ACP_FAKE_ERROR_AT": "prompt"}, "error",
                                    FAIL + "stage: prompt; category: agent-error; " + INTERNAL_ERROR, ""),
    "prompt_timeout": Scenario({"ACP_FAKE_HANG": "prompt", "ACP_FAKE_IGNORE_CANCEL": "1"}, "error",
                               FAIL + "stage: prompt; category: timeout)", "working on it",
                               config={"prompt_timeout": 1.0}),
    "process_start": Scenario({}, "error", FAIL + "stage: process; category: process-start)", "",
                              config={"command": "/nonexistent/acp-agent"}),
    # -- hostile but working agents ------------------------------------------------------------------------
    "garbage_and_stderr": Scenario(
        {"ACP_FAKE_GARBAGE": "1", "ACP_FAKE_STDERR_FLOOD": str(2 * 1024 * 1024),
         "ACP_FAKE_STDERR_TEXT": f"Traceback: secret {CANARY_STDERR}", "ACP_FAKE_TEXT": "fine"},
        "completed", None, "fine"),
    "echo_env": Scenario({"ACP_FAKE_ECHO": "env", "GIVEN_BY_CONFIG": "yes"}, "completed", None,
                         lambda out: "GIVEN_BY_CONFIG=yes" in out.splitlines() and CANARY_ENV not in out
                         and "DSH_PARENT_SECRET" not in out),
    "eof_deaf_term_trapping": Scenario({"ACP_FAKE_IGNORE_EOF": "1", "ACP_FAKE_TRAP_TERM": "1", "ACP_FAKE_TEXT": "ok"},
                                       "completed", None, "ok",
                                       config={"eof_grace": 0.2, "term_grace": 0.2}),
}
# fmt: on


def _provider(name: str, env: dict[str, str], config: dict[str, Any]) -> Provider:
    # A generous startup bound: on a loaded 2-core box many agents importing the SDK at once are slow.
    table: dict[str, Any] = {
        "provider": "acp", "command": sys.executable, "args": [AGENT], "env": env, "startup_timeout": 120,
    }  # fmt: skip
    table.update(config)
    return from_config(name, table)


async def _run(provider: Provider, prompt: str, cwd: str) -> SubagentResult:
    async with provider.run(SubagentRequest(description="test", prompt=prompt, cwd=cwd)) as run:
        return await run.result()


@pytest.fixture
def parent_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_PARENT_SECRET", CANARY_ENV)  # must never reach a child


def _check(key: str, result: SubagentResult) -> None:
    scenario = SCENARIOS[key]
    assert (result.stop_reason, result.diagnostic) == (scenario.stop_reason, scenario.diagnostic)
    if callable(scenario.output):
        assert scenario.output(result.output), result.output
    elif scenario.output is not None:
        assert result.output == scenario.output
    if scenario.diagnostic is not None:
        assert len(scenario.diagnostic.encode()) <= 4096
    for canary in ALL_CANARIES:
        assert canary not in (result.diagnostic or "")
    for canary in (CANARY_STDERR, CANARY_ENV, CANARY_VALUE):  # the task itself may be echoed as output
        assert canary not in result.output
    assert "Traceback" not in (result.diagnostic or "")


@pytest.mark.anyio
@pytest.mark.usefixtures("parent_secret", "no_leftover_processes")
@pytest.mark.parametrize("key", list(SCENARIOS))
async def test_scenario(key: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[key]
    _check(key, await _run(_provider("probe", scenario.env, scenario.config), scenario.prompt, str(tmp_path)))


# Twenty rows with distinct diagnostics, all in flight at once.
CONCURRENT = [key for key in SCENARIOS if SCENARIOS[key].diagnostic and "timeout" not in key][:20]


@pytest.mark.anyio
@pytest.mark.usefixtures("parent_secret", "no_leftover_processes")
async def test_twenty_concurrent_runs_keep_their_diagnostics_apart(tmp_path: Path) -> None:
    results: dict[str, SubagentResult] = {}
    in_flight = [0, 0]  # current, peak
    everyone_started = anyio.Event()

    async def one(key: str) -> None:
        scenario = SCENARIOS[key]
        provider = _provider("probe", scenario.env, scenario.config)
        async with provider.run(SubagentRequest("test", scenario.prompt, str(tmp_path))) as run:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            if in_flight[0] == len(CONCURRENT):
                everyone_started.set()
            results[key] = await run.result()
            await everyone_started.wait()  # nobody is disposed before every run was started
        in_flight[0] -= 1

    async with anyio.create_task_group() as tg:
        for key in CONCURRENT:
            tg.start_soon(one, key)
    assert len(CONCURRENT) == 20 and in_flight[1] == 20
    for key in CONCURRENT:
        _check(key, results[key])
    assert len({results[key].diagnostic for key in CONCURRENT}) >= 15


# -- local cancellation and disposal ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize("ignore_cancel", ["0", "1"])
async def test_local_cancel_settles_aborted_at_once_without_diagnostic(tmp_path: Path, ignore_cancel: str) -> None:
    provider = _provider("probe", {"ACP_FAKE_HANG": "prompt", "ACP_FAKE_IGNORE_CANCEL": ignore_cancel}, {})
    async with provider.run(SubagentRequest("d", "wait", str(tmp_path))) as run:
        with anyio.fail_after(60):
            while not run.partial_output():  # the prompt is in flight: the agent streamed its first words
                await anyio.sleep(0.02)
        await run.cancel()
        # cancel() settles the result itself. With ACP_FAKE_IGNORE_CANCEL the agent never answers the
        # session/cancel, so a result that waited for the agent would hang here.
        with anyio.fail_after(PROMPTLY):
            result = await run.result()
        assert result.stop_reason == "aborted"
        assert result.diagnostic is None
        await run.cancel()  # idempotent
        await run.dispose()
        await run.dispose()
    assert (await run.result()) == result


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_dispose_without_result_tears_down_and_settles(tmp_path: Path) -> None:
    provider = _provider("probe", {"ACP_FAKE_HANG": "prompt"}, {})
    async with provider.run(SubagentRequest("d", "wait", str(tmp_path))) as run:
        await run.dispose()
        result = await run.result()
    assert (result.stop_reason, result.diagnostic) == ("aborted", None)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_cancelled_start_rolls_the_child_back(tmp_path: Path) -> None:
    provider = _provider(
        "probe",
        {"ACP_FAKE_HANG": "initialize", "ACP_FAKE_TRAP_TERM": "1", "ACP_FAKE_IGNORE_EOF": "1"},
        {"eof_grace": 0.2, "term_grace": 0.2},
    )
    with anyio.move_on_after(0.5) as scope:
        await _run(provider, "x", str(tmp_path))
    assert scope.cancelled_caught  # the no_leftover_processes check proves the rollback


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_startup_rollback_with_a_grandchild_leaves_no_process(tmp_path: Path) -> None:
    provider = _provider(
        "probe", {"ACP_FAKE_EXIT_AT": "new-session", "ACP_FAKE_EXIT_CODE": "2", "ACP_FAKE_GRANDCHILD": "1"}, {}
    )
    result = await _run(provider, "x", str(tmp_path))
    assert result.diagnostic == FAIL + "stage: new-session; category: process-exit; exit code: 2)"


@pytest.mark.anyio
async def test_failed_rollback_adds_the_teardown_fact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A child whose exit cannot be observed even after SIGKILL is not reproducible on demand; pin the
    # mapping with the ladder's own outcome replaced (the real ladder still runs first).
    from dsh.agent_loop import process

    real = process.ManagedProcess.terminate

    async def unreaped(self: process.ManagedProcess, *args: Any, **kwargs: Any) -> Teardown:
        await real(self, *args, **kwargs)
        return Teardown(tier="unreaped", exit_status=None)

    monkeypatch.setattr(process.ManagedProcess, "terminate", unreaped)
    provider = _provider("probe", {"ACP_FAKE_SESSION_ID": "blank"}, {})
    assert (await _run(provider, "x", str(tmp_path))).diagnostic == (
        FAIL + "stage: new-session; category: protocol)\n" + FAIL + "stage: teardown; category: process-unreaped)"
    )


# -- configuration (no child is spawned) ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "table",
    [
        {"provider": "acp"},
        {"provider": "acp", "command": ""},
        {"provider": "acp", "command": 7},
        {"provider": "acp", "command": "x", "args": "not-a-list"},
        {"provider": "acp", "command": "x", "args": [1]},
        {"provider": "acp", "command": "x", "env": {"K": 1}},
        {"provider": "acp", "command": "x", "env": ["K=V"]},
        {"provider": "acp", "command": "x", "env": {"K=": "v"}},
        {"provider": "acp", "command": "x", "permission": "ask"},
        {"provider": "acp", "command": "x", "startup_timeout": 0},
        {"provider": "acp", "command": "x", "prompt_timeout": "soon"},
        {"provider": "acp", "command": "x", "permision": "allow"},
        {"provider": "dsh", "command": "x"},
    ],
)
async def test_invalid_configuration_is_initialize_configuration(table: dict[str, Any], tmp_path: Path) -> None:
    result = await _run(from_config("probe", table), "x", str(tmp_path))
    assert (result.stop_reason, result.diagnostic, result.output) == (
        "error",
        FAIL + "stage: initialize; category: configuration)",
        "",
    )


@pytest.mark.anyio
@pytest.mark.parametrize("cwd", ["", "relative/missing", "/nonexistent/workspace"])
async def test_unresolvable_workspace_is_initialize_configuration(cwd: str) -> None:
    result = await _run(_provider("probe", {}, {}), "x", cwd)
    assert result.diagnostic == FAIL + "stage: initialize; category: configuration)"


@pytest.mark.anyio
async def test_unsafe_provider_name_is_not_copied(tmp_path: Path) -> None:
    result = await _run(from_config(f"x {CANARY_VALUE})", {"provider": "acp"}), "x", str(tmp_path))
    assert result.diagnostic == (
        "Subagent failure (provider: unknown; stage: initialize; category: configuration)"
    )


def test_the_table_becomes_settings() -> None:
    table = {"provider": "acp", "command": [sys.executable, AGENT], "env": {"A": "b"}, "permission": "allow",
             "startup_timeout": 5, "prompt_timeout": 60}  # fmt: skip
    provider = from_config("probe", table)
    assert (provider.name, provider.run_type, provider.problem) == ("probe", AcpRun, None)
    assert provider.settings == AcpSettings(
        command=(sys.executable, AGENT), env={"A": "b"}, permission="allow", startup_timeout=5.0, prompt_timeout=60.0
    )
    assert from_config("probe", {"provider": "acp", "command": "agent"}).settings.permission == "reject"


@pytest.mark.usefixtures("no_leftover_processes")
def test_importing_the_provider_does_not_import_the_sdk() -> None:
    code = "import sys, dsh.agent_loop.subagent.acp; print('acp' in sys.modules, 'pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_echo_cwd_and_host_log_hygiene(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    env = {"ACP_FAKE_ECHO": "cwd", "ACP_FAKE_GARBAGE": "1", "ACP_FAKE_STDERR_TEXT": CANARY_STDERR}
    with caplog.at_level(logging.DEBUG):
        result = await _run(_provider("probe", env, {}), f"where {CANARY_TASK}", str(tmp_path))
        failed = await _run(
            _provider("probe", {"ACP_FAKE_ERROR_AT": "new-session", "ACP_FAKE_STDERR_TEXT": CANARY_STDERR}, {}),
            CANARY_TASK,
            str(tmp_path),
        )
    assert (result.stop_reason, result.output) == ("completed", str(tmp_path))
    assert failed.diagnostic == FAIL + "stage: new-session; category: agent-error; error code: -32603 (internal error))"
    # The SDK complained about the garbage lines, but only as sanitized DEBUG records.
    sdk = [r for r in caplog.records if r.getMessage().startswith("acp SDK: ")]
    assert sdk and all(r.levelno == logging.DEBUG and r.exc_info is None for r in sdk)
    # The host log has the failure's closed facts and cause types; the agent's own words (its error's
    # message, its stderr) only in the one warning record of the failed run, masked; never the task.
    assert any("new-session/agent-error (cause: acp.exceptions.RequestError" in r.getMessage() for r in caplog.records)
    words = [r for r in caplog.records if "the agent's own words (host-side only, masked):" in r.getMessage()]
    assert [r.levelno for r in words] == [logging.WARNING]
    assert words[0].getMessage().splitlines()[1:] == [
        "the agent's own words (host-side only, masked):",
        "  error message: Internal error",
        '  error data: {"details":"scripted failure at new-session"}',
        "  stderr (last 3 lines):",
        *["    sk-***"] * 3,  # the key-shaped stderr canary, masked: start-up, initialize, session/new
    ]
    for record in caplog.records:
        text = record.getMessage()
        assert CANARY_STDERR not in text and CANARY_TASK not in text
        if record not in words:
            assert "scripted failure" not in text  # the agent's error message stays in its record


def test_sdk_log_guard_sanitizes_only_sdk_records() -> None:
    import acp

    from dsh.agent_loop.subagent._acp_sdk import SdkLogGuard

    sdk_dir = os.path.dirname(acp.__file__) + os.sep
    guard = SdkLogGuard(sdk_dir)
    try:
        raise ValueError(f"bad frame {CANARY_VALUE}")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "root", logging.ERROR, sdk_dir + "connection.py", 1, "Unhandled error method=%s", (CANARY_VALUE,), exc_info
    )
    assert guard.filter(record)
    assert record.getMessage() == "acp SDK: Unhandled error method=%s (ValueError)"
    assert (record.levelno, record.exc_info) == (logging.DEBUG, None)
    ours = logging.LogRecord("x", logging.WARNING, __file__, 1, "kept %s", ("as is",), None)
    assert guard.filter(ours) and ours.getMessage() == "kept as is" and ours.levelno == logging.WARNING


@pytest.mark.anyio
async def test_permission_requests_after_a_local_cancel_are_answered_cancelled() -> None:
    from acp.schema import PermissionOption, ToolCallUpdate

    from dsh.agent_loop.subagent._acp_sdk import PermissionClient

    options = [
        PermissionOption(option_id="a", name="Allow", kind="allow_once"),
        PermissionOption(option_id="r", name="Reject", kind="reject_once"),
    ]
    client = PermissionClient("allow")
    tool_call = ToolCallUpdate(tool_call_id="c1", kind="execute", title=CANARY_TASK, raw_input={"x": CANARY_TASK})
    answer = await client.request_permission("s", tool_call, options)
    assert answer.outcome.outcome == "selected" and answer.outcome.option_id == "a"
    client.cancelling = True
    answer = await client.request_permission("s", tool_call, options)
    assert answer.outcome.outcome == "cancelled"
    assert client.permission_fact() == _perm("allow", "execute", "cancelled")


def test_the_registry_builds_the_acp_provider() -> None:
    from dsh.agent_loop.subagent import build_provider

    provider = build_provider("probe", {"provider": "acp", "command": sys.executable, "args": [AGENT]})
    assert provider.run_type is AcpRun and provider.name == "probe"


WARN = (
    "Subagent permission warning (provider: probe; mode: {mode}): "
    "tool calls ran without a permission request under policy reject"
)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_reject_selects_an_asking_mode(tmp_path: Path) -> None:
    env = {"ACP_FAKE_MODES": "auto,default", "ACP_FAKE_PERMISSION": "execute", "ACP_FAKE_TEXT": "t"}
    result = await _run(_provider("probe", env, {}), "go", str(tmp_path))
    assert (result.stop_reason, result.output, result.warning) == ("completed", "t [permission: selected reject]", None)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_configured_mode_that_acts_unasked_gives_the_warning(tmp_path: Path) -> None:
    env = {"ACP_FAKE_MODES": "default,auto", "ACP_FAKE_PERMISSION": "execute", "ACP_FAKE_TEXT": "t"}
    result = await _run(_provider("probe", env, {"mode": "auto"}), "go", str(tmp_path))
    assert (result.stop_reason, result.output, result.diagnostic) == ("completed", "t [ran unasked]", None)
    assert result.warning == WARN.format(mode="auto")
    allowed = await _run(_provider("probe", env, {"mode": "auto", "permission": "allow"}), "go", str(tmp_path))
    assert allowed.warning is None  # under allow, acting without asking is what the user chose


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_mode_the_agent_does_not_advertise_is_a_configuration_failure(tmp_path: Path) -> None:
    env = {"ACP_FAKE_MODES": "default,auto"}
    result = await _run(_provider("probe", env, {"mode": "yolo"}), "go", str(tmp_path))
    assert (result.stop_reason, result.diagnostic) == ("error", FAIL + "stage: new-session; category: configuration)")


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_no_asking_mode_advertised_and_acting_unasked_gives_the_warning(tmp_path: Path) -> None:
    env = {"ACP_FAKE_MODES": "auto", "ACP_FAKE_PERMISSION": "edit", "ACP_FAKE_TEXT": "t"}
    result = await _run(_provider("probe", env, {}), "go", str(tmp_path))
    assert result.warning == WARN.format(mode="auto")  # only "auto" advertised: nothing asks
