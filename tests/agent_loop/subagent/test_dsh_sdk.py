"""The dsh-sdk provider against real child processes: ``dsh serve --stdio`` talking to the real fault
server, and the scripted child (repl/demo/scripted_dsh_child.py) for protocol faults a real child
cannot produce. Every row of seed 002's "DSH SDK facts" table is pinned here.

Children cost CPU to start, so the scenario table runs once per module, concurrently (bounded), with a
fault server of its own for each real-child scenario; the parametrized tests assert one row each.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.dsh_sdk import DshSdkRun, from_config
from dsh.agent_loop.subagent.process import live_group_members
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.repl.demo.fault_server import Behaviour, FaultServer, RecordedRequest
from tests import canaries

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
    note: str | None = None  # what dispose() reports


def _scripted(**script: Any) -> dict[str, Any]:
    return {"stderr": f"child stderr {canaries.CHILD_STDERR}", "error_message": f"boom {canaries.UPSTREAM_KEY}",
            **script}


SHUTDOWN_NOTE = FAIL + "stage: shutdown; category: unknown)"

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
    "shutdown_error": Case("completed", None, script=_scripted(shutdown="error"), note=SHUTDOWN_NOTE),
    "shutdown_timeout": Case("completed", None, script=_scripted(shutdown="hang"), note=SHUTDOWN_NOTE,
                             table={"shutdown_timeout": 0.5}),
    "stubborn_child": Case("completed", None, note=SHUTDOWN_NOTE, table={"shutdown_timeout": 0.5},
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
    note: str | None
    pid: int | None
    requests: list[RecordedRequest]
    seconds: float


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
    async with FaultServer(script=case.upstream) as server:
        parent = ParentContext(model="probe-model", base_url=server.url, api_key=canaries.API_KEY)
        provider = build_provider("probe", _table(case), parent)
        started = time.monotonic()
        run = await provider.start(SubagentRequest(DESCRIPTION, case.prompt, case.cwd))
        assert isinstance(run, DshSdkRun)
        pid = run._process.pid if run._process is not None else None
        try:
            with anyio.fail_after(60):
                if case.cancel_on_output:
                    async with anyio.create_task_group() as tg:

                        async def cancel_soon() -> None:
                            while not run.partial_output():
                                await anyio.sleep(0.02)
                            await run.cancel()

                        tg.start_soon(cancel_soon)
                        result = await run.result()
                        tg.cancel_scope.cancel()
                else:
                    result = await run.result()
        finally:
            note = await run.dispose()
        assert await run.result() is result  # settled once
        assert await run.dispose() == note  # idempotent
        return Outcome(result, note, pid, list(server.requests), time.monotonic() - started)


@pytest.fixture(scope="module")
def outcomes() -> Iterator[tuple[dict[str, Outcome], list[str]]]:
    collector = _Collect()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)
    results: dict[str, Outcome] = {}

    async def run_all() -> None:
        limiter = anyio.CapacityLimiter(6)

        async def one(name: str, case: Case) -> None:
            async with limiter:
                results[name] = await _drive(case)

        async with anyio.create_task_group() as tg:
            for name, case in CASES.items():
                tg.start_soon(one, name, case)

    try:
        anyio.run(run_all)
    finally:
        root.removeHandler(collector)
        root.setLevel(old_level)
    yield results, collector.lines


@pytest.mark.parametrize("name", list(CASES))
def test_stop_reason_and_diagnostic(name: str, outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    case, outcome = CASES[name], outcomes[0][name]
    assert outcome.result.stop_reason == case.stop_reason
    assert outcome.result.diagnostic == case.diagnostic
    if case.output is not None:
        assert outcome.result.output == case.output
    assert outcome.note == case.note


@pytest.mark.parametrize("name", list(CASES))
def test_no_process_survives_the_run(name: str, outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    pid = outcomes[0][name].pid
    if pid is None:
        return  # never spawned (configuration)
    # the child's whole process group is gone (startup rollbacks included); zombies do not count: an
    # orphaned grandchild may have been adopted by this test process (a subreaper) and await its reaping
    assert live_group_members(pid) == []


def test_no_canary_in_any_diagnostic_output_or_log_line(outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    results, log_lines = outcomes
    assert log_lines, "the provider logs its failures host-side"
    for name, outcome in results.items():
        for text in (outcome.result.diagnostic or "", outcome.note or ""):
            for canary in CANARIES:
                assert canary not in text, (name, canary)
    for line in log_lines:
        for canary in CANARIES:
            assert canary not in line, line


def test_exit_code_and_signal_are_independent(outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    results = outcomes[0]
    for name in ("prompt_exit_code", "prompt_exit_code_zero", "initialize_exit_code"):
        diagnostic = results[name].result.diagnostic or ""
        assert "exit code: " in diagnostic and "signal: " not in diagnostic
    for name in ("prompt_signal", "prompt_signal_term", "initialize_signal"):
        diagnostic = results[name].result.diagnostic or ""
        assert "signal: SIG" in diagnostic and "exit code" not in diagnostic


def test_the_real_child_inherits_model_base_url_and_key(outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    (request,) = outcomes[0]["completed"].requests
    assert request.json["model"] == "probe-model"
    assert request.headers["authorization"] == f"Bearer {canaries.API_KEY}"
    (overridden,) = outcomes[0]["table_overrides_model"].requests
    assert overridden.json["model"] == "table-model"
    # the task text reached the child as its prompt (it is the child's work, not a diagnostic)
    assert request.json["messages"][-1]["content"] == TASK


def test_refusal_never_reached_the_model(outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    assert outcomes[0]["rejected_is_refusal"].requests == []


def test_local_cancel_keeps_a_prefix_and_settles_at_once(outcomes: tuple[dict[str, Outcome], list[str]]) -> None:
    real = outcomes[0]["local_cancel"]
    assert real.result.output and "a b c d e f g h i j k l m n o p".startswith(real.result.output)
    ignored = outcomes[0]["local_cancel_ignored_by_child"]
    assert ignored.seconds < 10  # a child that ignores session/cancel does not hold the parent


# -- behaviours outside the table ------------------------------------------------------------------



def _scripted_provider(name: str, **script: Any) -> Any:
    table = {"provider": "dsh", "command": SCRIPTED, **FAST,
             "env": {"PYTHONPATH": REPO, "DSH_SCRIPTED_CHILD": json.dumps(script)}}
    return from_config(name, table, ParentContext(model="m", base_url="http://127.0.0.1:9"))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_cancel_before_result_settles_aborted_without_diagnostic() -> None:
    run = await _scripted_provider("probe", prompt="hang").start(SubagentRequest("d", "p", REPO))
    try:
        await run.cancel()
        result = await run.result()
    finally:
        await run.dispose()
    assert result == SubagentResult("", "aborted", None)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_dispose_while_the_prompt_runs_is_a_local_cancel() -> None:
    run = await _scripted_provider("probe", prompt="hang", text="partial").start(SubagentRequest("d", "p", REPO))
    results: list[SubagentResult] = []
    async with anyio.create_task_group() as tg:

        async def wait_result() -> None:
            results.append(await run.result())

        tg.start_soon(wait_result)
        with anyio.fail_after(10):
            while not run.partial_output():
                await anyio.sleep(0.02)
        await run.dispose()
    assert results == [SubagentResult("partial", "aborted", None)]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_cancelled_caller_rolls_back_startup() -> None:
    provider = _scripted_provider("probe", initialize="hang")
    with anyio.move_on_after(0.5) as scope:
        await provider.start(SubagentRequest("d", "p", REPO))
    assert scope.cancelled_caught  # the no_leftover_processes fixture proves the child is gone


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_cancelled_caller_tells_the_child_and_leaves_nothing_behind() -> None:
    run = await _scripted_provider("probe", prompt="hang", text="x").start(SubagentRequest("d", "p", REPO))
    try:
        with anyio.move_on_after(0.5) as scope:
            await run.result()
        assert scope.cancelled_caught
    finally:
        await run.dispose()


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
        run = await _scripted_provider(name, **script).start(SubagentRequest("d", f"task {index}", REPO))
        try:
            got[name] = (await run.result()).diagnostic
        finally:
            await run.dispose()

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

