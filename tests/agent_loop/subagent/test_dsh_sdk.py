"""The dsh-sdk provider against real child processes: ``dsh serve --stdio`` talking to the real fault
server, and the scripted child (repl/demo/scripted_dsh_child.py) for protocol faults a real child
cannot produce. Every fact the provider can report is pinned here.

Each row of the table is its own test, with a fault server of its own for a real-child row.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.process import live_group_members
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.dsh_sdk import DshSdkRun, from_config
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.llm.loopback.fault_server import Behaviour, FaultServer, RecordedRequest
from tests import canaries
from tests.waiting import PROMPTLY

REPO = str(Path(__file__).resolve().parents[3])
SCRIPTED = [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"]
FAIL = "Subagent failure (provider: probe; "
TASK = f"please summarise the notes {canaries.TASK_TEXT}"
DESCRIPTION = f"summarise {canaries.TOOL_INPUT}"
CANARIES = (
    canaries.API_KEY,
    canaries.CHILD_ENV,
    canaries.CHILD_STDERR,
    canaries.UPSTREAM_KEY,
    canaries.TASK_TEXT,
    canaries.TOOL_INPUT,
)
FAST = {"exit_wait": 1.0, "eof_grace": 1.0, "term_grace": 1.0}


@dataclass
class Case:
    stop_reason: str
    diagnostic: str | None
    output: str | None = ""  # exact; None: not checked
    script: dict[str, Any] | None = None  # the scripted child; None: the real child
    upstream: list[Behaviour | str] = field(default_factory=list)  # the real child's fault-server script
    prompt: str = TASK
    table: dict[str, Any] = field(default_factory=dict)
    cwd: str = REPO
    cancel_on_output: bool = False  # local cancel once the first output arrived
    shutdown_fails: bool = False  # the host log says so; a completed run still has no diagnostic


def _scripted(**script: Any) -> dict[str, Any]:
    return {"stderr": f"child stderr {canaries.CHILD_STDERR}", "error_message": f"boom {canaries.UPSTREAM_KEY}",
            **script}


# fmt: off
CASES: dict[str, Case] = {
    # -- the real child: every reachable child reason ------------------------------------------------
    "completed": Case("completed", None, "the child's answer", upstream=[Behaviour("text", text="the child's answer")]),
    "max_tokens": Case("max-tokens", None, "The answer is cut here", upstream=["length"]),
    "child_error": Case("error", FAIL + "stage: session-run; category: child-error; stop reason: error)", "",
                        upstream=[Behaviour("http_401", message=f"bad key {canaries.UPSTREAM_KEY}")]),
    "child_error_keeps_partial_output": Case(
        "error", FAIL + "stage: session-run; category: child-error; stop reason: error)", "Half an answer",
        upstream=["reset_mid_stream"]),
    "rejected_is_refusal": Case("refusal", None, "", prompt=f"{TASK} AKIAABCDEFGHIJKLMNOP"),
    "local_cancel": Case("aborted", None, None, cancel_on_output=True,
                         upstream=[Behaviour("slow_text", text="a b c d e f g h i j k l m n o p", delay=0.2)]),
    "table_overrides_model": Case("completed", None, None, upstream=["text"], table={"model": "table-model"}),
    # -- the scripted child: reasons and faults a real fresh session cannot produce -------------------
    "remote_aborted": Case("aborted", None, "so far",
                           script=_scripted(text="so far", reason={"kind": "aborted", "reason": "cancelled"})),
    "disposed": Case("aborted", FAIL + "stage: session-run; category: child-disposed; stop reason: disposed)",
                     script=_scripted(reason={"kind": "disposed"})),
    "aborted_because_disposed": Case(
        "aborted", FAIL + "stage: session-run; category: child-disposed; stop reason: aborted)",
        script=_scripted(reason={"kind": "aborted", "reason": "disposed"})),
    "blocked_is_refusal": Case("refusal", None, script=_scripted(reason={"kind": "blocked"})),
    "interrupted_is_plain_error": Case("error", None, script=_scripted(reason={"kind": "interrupted"})),
    "error_with_partial_output": Case(
        "error", FAIL + "stage: session-run; category: child-error; stop reason: error)", "half of it",
        script=_scripted(text="half of it", reason={"kind": "error", "code": "SERVER",
                                                    "message": f"upstream said {canaries.UPSTREAM_KEY}"})),
    "unknown_kind_is_not_copied": Case(
        "error", FAIL + "stage: session-run; category: child-unknown)",
        script=_scripted(reason={"kind": f"mystery-{canaries.TASK_TEXT}", "message": canaries.CHILD_ENV})),
    "non_string_kind": Case("error", FAIL + "stage: session-run; category: child-unknown)",
                            script=_scripted(reason={"kind": 7})),
    "missing_terminal": Case("error", FAIL + "stage: session-run; category: missing-terminal)", "answer",
                             script=_scripted(prompt="no_terminal", text="answer")),
    "prompt_garbage": Case("error", FAIL + "stage: session-run; category: protocol)",
                           script=_scripted(prompt="garbage")),
    "prompt_ten_megabyte_line": Case("error", FAIL + "stage: session-run; category: protocol)",
                                     script=_scripted(prompt="huge_line")),
    "prompt_error_response": Case("error", FAIL + "stage: session-run; category: protocol)",
                                  script=_scripted(prompt="error")),
    "prompt_result_not_an_object": Case("error", FAIL + "stage: session-run; category: protocol)",
                                        script=_scripted(prompt="bad_result")),
    "prompt_exit_code": Case("error", FAIL + "stage: session-run; category: transport; exit code: 9)",
                             script=_scripted(prompt="exit", exit_code=9)),
    "prompt_exit_code_zero": Case("error", FAIL + "stage: session-run; category: transport; exit code: 0)",
                                  script=_scripted(prompt="exit", exit_code=0)),
    "prompt_signal": Case("error", FAIL + "stage: session-run; category: transport; signal: SIGKILL)",
                          script=_scripted(prompt="exit", signal="SIGKILL")),
    "prompt_signal_term": Case("error", FAIL + "stage: session-run; category: transport; signal: SIGTERM)",
                               script=_scripted(prompt="exit", signal="SIGTERM")),
    "exit_while_a_grandchild_holds_stdout": Case(
        "error", FAIL + "stage: session-run; category: transport; exit code: 5)",
        script=_scripted(prompt="exit", exit_code=5, grandchild=True)),
    "exit_after_terminal": Case(
        "error", FAIL + "stage: session-run; category: transport; stop reason: completed; exit code: 3)",
        script=_scripted(prompt="exit_after_terminal", exit_code=3)),
    # -- initialize ---------------------------------------------------------------------------------
    "initialize_error_response": Case("error", FAIL + "stage: initialize; category: protocol)",
                                      script=_scripted(initialize="error")),
    "initialize_garbage": Case("error", FAIL + "stage: initialize; category: protocol)",
                               script=_scripted(initialize="garbage")),
    "initialize_ten_megabyte_line": Case("error", FAIL + "stage: initialize; category: protocol)",
                                         script=_scripted(initialize="huge_line")),
    "initialize_result_not_an_object": Case("error", FAIL + "stage: initialize; category: protocol)",
                                            script=_scripted(initialize="bad_result")),
    "initialize_exit_code": Case("error", FAIL + "stage: initialize; category: transport; exit code: 3)",
                                 script=_scripted(initialize="exit", exit_code=3)),
    "initialize_signal": Case("error", FAIL + "stage: initialize; category: transport; signal: SIGKILL)",
                              script=_scripted(initialize="exit", signal="SIGKILL")),
    "initialize_timeout": Case("error", FAIL + "stage: initialize; category: unknown)",
                               script=_scripted(initialize="hang"), table={"startup_timeout": 1.0}),
    "initialize_bad_cwd": Case("error", FAIL + "stage: initialize; category: configuration)",
                               script=_scripted(), cwd="/nonexistent/workspace"),
    "initialize_missing_binary": Case("error", FAIL + "stage: initialize; category: configuration)",
                                      table={"command": ["/nonexistent/bin/dsh", "serve", "--stdio"]}),
    "initialize_bad_table": Case("error", FAIL + "stage: initialize; category: configuration)",
                                 table={"permission": "sometimes"}),
    # -- shutdown -----------------------------------------------------------------------------------
    "shutdown_error": Case("completed", None, script=_scripted(shutdown="error"), shutdown_fails=True),
    "shutdown_timeout": Case("completed", None, script=_scripted(shutdown="hang"), shutdown_fails=True,
                             table={"shutdown_timeout": 0.5}),
    "stubborn_child": Case("completed", None, shutdown_fails=True, table={"shutdown_timeout": 0.5},
                           script=_scripted(shutdown="hang", ignore_eof=True, trap_sigterm=True)),
    "stderr_flood": Case("completed", None, script=_scripted(stderr_flood=2_000_000)),
    # -- local cancellation of the scripted child ------------------------------------------------------
    "local_cancel_scripted": Case("aborted", None, "streamed so far", cancel_on_output=True,
                                  script=_scripted(prompt="hang", text="streamed so far")),
    "local_cancel_ignored_by_child": Case("aborted", None, "streamed so far", cancel_on_output=True,
                                          script=_scripted(prompt="hang", cancel="ignore", text="streamed so far")),
}
# fmt: on


@dataclass
class Outcome:
    result: SubagentResult
    pid: int | None
    requests: list[RecordedRequest]
    seconds_after_cancel: float | None  # from the local cancel until the run was disposed
    log_lines: list[str]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _table(case: Case) -> dict[str, Any]:
    table: dict[str, Any] = {"provider": "dsh", "env": {"CANARY_SETTING": canaries.CHILD_ENV}, **FAST}
    if case.script is not None:
        table["command"] = SCRIPTED
        table["env"] = {**table["env"], "PYTHONPATH": REPO, "DSH_SCRIPTED_CHILD": json.dumps(case.script)}
    table.update(case.table)
    return table


async def _drive(case: Case) -> Outcome:
    collector = _Collect()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)
    try:
        async with FaultServer(script=case.upstream) as server:
            parent = ParentContext(model="probe-model", base_url=server.url, api_key=canaries.API_KEY)
            provider = build_provider("probe", _table(case), parent)
            cancelled_at: float | None = None
            async with provider.run(SubagentRequest(DESCRIPTION, case.prompt, case.cwd)) as run:
                assert isinstance(run, DshSdkRun)
                with anyio.fail_after(60):
                    if case.cancel_on_output:
                        while not run.partial_output():
                            await anyio.sleep(0.02)
                        cancelled_at = time.monotonic()
                        await run.cancel()
                    result = await run.result()
                    pid = run.process.pid if run.process is not None else None
            assert await run.result() is result  # settled once
            await run.dispose()  # idempotent
            after_cancel = None if cancelled_at is None else time.monotonic() - cancelled_at
            return Outcome(result, pid, list(server.requests), after_cancel, collector.lines)
    finally:
        root.removeHandler(collector)
        root.setLevel(old_level)


def _inherits_model_base_url_and_key(outcome: Outcome) -> None:
    (request,) = outcome.requests
    assert request.json["model"] == "probe-model"
    assert request.headers["authorization"] == f"Bearer {canaries.API_KEY}"
    # the task text reached the child as its prompt (it is the child's work, not a diagnostic)
    assert request.json["messages"][-1]["content"] == TASK


def _table_model_wins(outcome: Outcome) -> None:
    (overridden,) = outcome.requests
    assert overridden.json["model"] == "table-model"


def _refusal_never_reached_the_model(outcome: Outcome) -> None:
    assert outcome.requests == []


def _cancel_keeps_a_prefix(outcome: Outcome) -> None:
    assert outcome.result.output and "a b c d e f g h i j k l m n o p".startswith(outcome.result.output)


def _cancel_does_not_wait_for_the_child(outcome: Outcome) -> None:
    # A child that ignores session/cancel (and would hang for ever) does not hold the parent: the run
    # settles and is disposed promptly (the child's start-up, seconds on a loaded box, is not counted).
    assert outcome.seconds_after_cancel is not None and outcome.seconds_after_cancel < PROMPTLY


def _exit_code_only(outcome: Outcome) -> None:
    diagnostic = outcome.result.diagnostic or ""
    assert "exit code: " in diagnostic and "signal: " not in diagnostic


def _signal_only(outcome: Outcome) -> None:
    diagnostic = outcome.result.diagnostic or ""
    assert "signal: SIG" in diagnostic and "exit code" not in diagnostic


EXTRA_CHECKS = {
    "completed": _inherits_model_base_url_and_key,
    "table_overrides_model": _table_model_wins,
    "rejected_is_refusal": _refusal_never_reached_the_model,
    "local_cancel": _cancel_keeps_a_prefix,
    "local_cancel_ignored_by_child": _cancel_does_not_wait_for_the_child,
    "prompt_exit_code": _exit_code_only,
    "prompt_exit_code_zero": _exit_code_only,
    "initialize_exit_code": _exit_code_only,
    "prompt_signal": _signal_only,
    "prompt_signal_term": _signal_only,
    "initialize_signal": _signal_only,
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(CASES))
async def test_case(name: str) -> None:
    case = CASES[name]
    outcome = await _drive(case)
    assert outcome.result.stop_reason == case.stop_reason
    assert outcome.result.diagnostic == case.diagnostic
    if case.output is not None:
        assert outcome.result.output == case.output
    assert any("shutdown failed" in line for line in outcome.log_lines) == case.shutdown_fails
    # The child's whole process group is gone (startup rollbacks included); zombies do not count: an
    # orphaned grandchild may have been adopted by this test process (a subreaper) and await its reaping.
    if outcome.pid is not None:
        assert live_group_members(outcome.pid) == []
    # The agent's own words (its stderr's last lines) go to the host log in one record of a failed run, masked.
    words = [line for line in outcome.log_lines if "the agent's own words (host-side only, masked):" in line]
    assert len(words) <= 1 and (not words or case.diagnostic is not None)
    for canary in CANARIES:
        assert canary not in (outcome.result.diagnostic or ""), canary
        for line in outcome.log_lines:
            assert canary not in line or (canary == canaries.CHILD_STDERR and line in words), line
    if case.diagnostic is not None:
        assert outcome.log_lines, "the provider logs its failures host-side"
    check = EXTRA_CHECKS.get(name)
    if check is not None:
        check(outcome)


# -- behaviours outside the table ------------------------------------------------------------------



def _scripted_provider(name: str, **script: Any) -> Any:
    table = {"provider": "dsh", "command": SCRIPTED, **FAST,
             "env": {"PYTHONPATH": REPO, "DSH_SCRIPTED_CHILD": json.dumps(script)}}
    return from_config(name, table, ParentContext(model="m", base_url="http://127.0.0.1:9"))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_cancel_before_result_settles_aborted_without_diagnostic() -> None:
    async with _scripted_provider("probe", prompt="hang").run(SubagentRequest("d", "p", REPO)) as run:
        await run.cancel()
        result = await run.result()
    assert result == SubagentResult("", "aborted", None)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_dispose_while_the_prompt_runs_is_a_local_cancel() -> None:
    run = _scripted_provider("probe", prompt="hang", text="partial").run(SubagentRequest("d", "p", REPO))
    results: list[SubagentResult] = []
    async with anyio.create_task_group() as tg:
        run.start(tg)

        async def wait_result() -> None:
            results.append(await run.result())

        tg.start_soon(wait_result)
        with anyio.fail_after(60):  # the child's start-up comes first: seconds on a loaded machine
            while not run.partial_output():
                await anyio.sleep(0.02)
        await run.dispose()
    assert results == [SubagentResult("partial", "aborted", None)]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_cancelled_caller_rolls_back_startup() -> None:
    provider = _scripted_provider("probe", initialize="hang")
    with anyio.move_on_after(0.5) as scope:
        async with provider.run(SubagentRequest("d", "p", REPO)) as run:
            await run.result()
    assert scope.cancelled_caught  # the no_leftover_processes fixture proves the child is gone


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_cancelled_caller_tells_the_child_and_leaves_nothing_behind() -> None:
    async with _scripted_provider("probe", prompt="hang", text="x").run(SubagentRequest("d", "p", REPO)) as run:
        with anyio.move_on_after(0.5) as scope:
            await run.result()
        assert scope.cancelled_caught


KINDS = [
    ({"reason": {"kind": "error"}}, "stage: session-run; category: child-error; stop reason: error)"),
    ({"prompt": "garbage"}, "stage: session-run; category: protocol)"),
    ({"prompt": "no_terminal"}, "stage: session-run; category: missing-terminal)"),
    ({"prompt": "exit", "exit_code": 4}, "stage: session-run; category: transport; exit code: 4)"),
    ({"initialize": "error"}, "stage: initialize; category: protocol)"),
]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_twenty_concurrent_runs_keep_their_diagnostics_apart() -> None:
    expected: dict[str, str] = {}
    got: dict[str, str | None] = {}

    async def one(index: int) -> None:
        script, tail = KINDS[index % len(KINDS)]
        name = f"probe-{index}"
        expected[name] = f"Subagent failure (provider: {name}; {tail}"
        async with _scripted_provider(name, **script).run(SubagentRequest("d", f"task {index}", REPO)) as run:
            got[name] = (await run.result()).diagnostic

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for index in range(20):
                tg.start_soon(one, index)
    assert got == expected


def test_building_the_dsh_provider_imports_no_heavy_sdk() -> None:
    import subprocess

    code = (
        "import sys; from dsh.agent_loop.subagent import build_provider; "
        "build_provider('x', {'provider': 'dsh'}); "
        "print(sorted(m for m in ('acp', 'claude_agent_sdk', 'openai') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                            env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

