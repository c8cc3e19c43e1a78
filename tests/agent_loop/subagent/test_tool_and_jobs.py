"""The ``subagent`` tool, background jobs and the job tools — through a real Agent, real child processes
(``dsh serve --stdio`` and the scripted child) and the real fault server; plus the demo scenarios."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop import Agent, RetryPolicy, ToolContext, ToolOutput, ToolRegistry
from dsh.agent_loop.events import Event, to_wire
from dsh.agent_loop.jobs import JobManager, job_tools, notice_text, run_subagent, status_line
from dsh.agent_loop.subagent import ParentContext, SubagentConfigError, build_provider
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.agent_loop.subagent.tool import SubagentToolkit, foreground_output, subagent_tool
from dsh.llm import DeepSeekClient
from dsh.repl.demo.catalogue import DemoTurn
from dsh.repl.demo.delegation import DELEGATION_SCENARIOS, demo_subagent_tables, scenario_setup
from dsh.repl.demo.fault_server import Behaviour, FaultServer
from dsh.repl.render import Renderer
from tests import canaries

REPO = str(Path(__file__).resolve().parents[3])
SCRIPTED = [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"]
FAST = {"exit_wait": 1.0, "eof_grace": 1.0, "term_grace": 1.0}
CHILD_ERROR = "Subagent failure (provider: dsh; stage: session-run; category: child-error; stop reason: error)"
TASK = f"Summarise the notes {canaries.TASK_TEXT}"
DESCRIPTION = f"summary {canaries.TOOL_INPUT}"


def scripted(**script: Any) -> dict[str, Any]:
    script.setdefault("stderr", f"noise {canaries.CHILD_STDERR}")
    return {"provider": "dsh", "command": SCRIPTED, **FAST,
            "env": {"PYTHONPATH": REPO, "DSH_SCRIPTED_CHILD": json.dumps(script), "X": canaries.CHILD_ENV}}


def toolkit(tables: dict[str, dict[str, Any]], url: str = "http://127.0.0.1:9") -> SubagentToolkit:
    return SubagentToolkit.from_config(tables, ParentContext(model="probe-model", base_url=url))


def context(notices: list[tuple[str, str]] | None = None) -> ToolContext:
    def post(text: str, job_id: str) -> None:
        if notices is not None:
            notices.append((text, job_id))

    return ToolContext(cwd=Path(REPO), turn=1, notify=lambda event: None, post_notice=post)


def call(name: str, **arguments: Any) -> Behaviour:
    return Behaviour("tool_call", id=f"call_{name}", name=name, arguments=json.dumps(arguments))


class Screen:
    """The REPL's renderer over every event of an agent, plus the raw events."""

    def __init__(self) -> None:
        self.renderer = Renderer(color=False)
        self.text = ""
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.text += self.renderer.render(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [to_wire(event)["data"] for event in self.events if event.type == kind]


def agent_for(server: FaultServer, kit: SubagentToolkit) -> tuple[Agent, Screen]:
    client = DeepSeekClient(base_url=server.url, api_key=None)
    agent = Agent(client, model="probe-model", tools=ToolRegistry(kit.tools()), cwd=REPO,
                  retry=RetryPolicy(max_retries=0))
    screen = Screen()
    agent.subscribe(screen)
    return agent, screen


# -- exact texts -------------------------------------------------------------------------------------

D = "Subagent failure (provider: p; stage: session-run; category: protocol)"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (SubagentResult("done", "completed"), ToolOutput("done")),
        (SubagentResult("", "completed"), ToolOutput("(the subagent returned no output)")),
        (SubagentResult("half", "error", D),
         ToolOutput(f"subagent run failed\nDiagnostic: {D}\nPartial output before the run ended:\nhalf", True, D)),
        (SubagentResult("", "error", D), ToolOutput(f"subagent run failed\nDiagnostic: {D}", True, D)),
        (SubagentResult("", "error"), ToolOutput("subagent run failed", True, None)),
        (SubagentResult("so far", "aborted"),
         ToolOutput("subagent run was cancelled\nPartial output before the run ended:\nso far", True, None)),
        (SubagentResult("cut", "max-tokens"), ToolOutput(
            "subagent run hit its token limit before finishing\nPartial output before the run ended:\ncut", True)),
        (SubagentResult("", "refusal"), ToolOutput("subagent declined the task", True)),
        (SubagentResult("x", "sideways"),
         ToolOutput("subagent run failed\nPartial output before the run ended:\nx", True)),
    ],
)
def test_foreground_texts_are_exact(result: SubagentResult, expected: ToolOutput) -> None:
    assert foreground_output(result) == expected


def test_status_lines_and_the_notice_are_exact() -> None:
    assert status_line("running", None) == "[status: running]"
    assert status_line("completed", SubagentResult("ok", "completed")) == "[status: completed]"
    assert status_line("killed", SubagentResult("", "aborted")) == "[status: killed]"
    assert status_line("failed", SubagentResult("", "error", D)) == f"[status: failed, error; diagnostic: {D}]"
    assert status_line("failed", SubagentResult("", "max-tokens")) == "[status: failed, max-tokens]"
    assert notice_text("subagent-3", "probe", "failed", SubagentResult("", "error", D)) == (
        f"background job subagent-3 (subagent: probe) finished [status: failed, error; diagnostic: {D}]. "
        "Read its output with job_output."
    )
    assert notice_text("subagent-1", "probe", "completed", SubagentResult("", "completed")) == (
        "background job subagent-1 (subagent: probe) finished [status: completed]. Read its output with job_output."
    )


# -- registry and configuration -----------------------------------------------------------------------


def test_registry_rejects_unknown_providers_and_names_without_echoing_values() -> None:
    with pytest.raises(SubagentConfigError) as unknown:
        build_provider("probe", {"provider": "telepathy"})
    assert str(unknown.value) == "[subagents.probe] provider must be one of: acp, claude-code, codex, dsh"
    with pytest.raises(SubagentConfigError):
        build_provider("bad name!", {"provider": "dsh"})
    with pytest.raises(SubagentConfigError):
        SubagentToolkit.from_config({"x": {"provider": "nope"}})
    assert build_provider("d", {"provider": "dsh-sdk"}).name == "d"


def test_no_configured_subagent_means_no_tools() -> None:
    assert SubagentToolkit.from_config({}).tools() == []
    names = [tool.name for tool in toolkit({"a": scripted(), "b": scripted()}).tools()]
    assert names == ["subagent", "job_output", "job_list", "job_kill"]


@pytest.mark.anyio
async def test_tool_argument_errors_never_echo_tool_input() -> None:
    tool = subagent_tool(toolkit({"probe": scripted()}).providers, JobManager())
    ctx = context()
    outputs = [
        await tool.run({"description": "d"}, ctx),
        await tool.run({"description": "", "prompt": "p"}, ctx),
        await tool.run({"description": "d", "prompt": "p", "provider": canaries.TOOL_INPUT}, ctx),
        await tool.run({"description": "d", "prompt": "p", "run_in_background": "yes"}, ctx),
    ]
    assert [o.text for o in outputs] == [
        "subagent: prompt must be a non-empty string",
        "subagent: description must be a non-empty string",
        "subagent: unknown provider (configured: probe)",
        "subagent: run_in_background must be true or false",
    ]
    assert all(o.is_error for o in outputs)
    (job_output, _job_list, job_kill) = job_tools(JobManager())
    for tool_ in (job_output, job_kill):
        unknown = await tool_.run({"job_id": canaries.TOOL_INPUT}, ctx)
        assert unknown == ToolOutput("unknown job id (known jobs: none)", is_error=True)


class _BrokenProvider:
    name = "broken"

    async def start(self, request: SubagentRequest) -> Any:
        raise RuntimeError(f"provider bug {canaries.TASK_TEXT}")


@pytest.mark.anyio
async def test_a_provider_that_raises_still_gives_a_safe_failure() -> None:
    result = await run_subagent(_BrokenProvider(), SubagentRequest("d", TASK, REPO))  # type: ignore[arg-type]
    diagnostic = "Subagent failure (provider: broken; stage: unknown; category: unknown)"
    assert result == SubagentResult("", "error", diagnostic)


# -- through the tool, with real children -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_shutdown_failure_joins_a_failed_result_only() -> None:
    kit = toolkit({
        "failing": scripted(reason={"kind": "error"}, shutdown="error"),
        "fine": scripted(shutdown="error"),
    })
    tool = kit.tools()[0]
    failed = await tool.run({"description": "d", "prompt": "p", "provider": "failing"}, context())
    assert failed.diagnostic == (
        "Subagent failure (provider: failing; stage: session-run; category: child-error; stop reason: error)\n"
        "Subagent failure (provider: failing; stage: shutdown; category: unknown)"
    )
    fine = await tool.run({"description": "d", "prompt": "p", "provider": "fine"}, context())
    assert fine == ToolOutput("(the subagent returned no output)")


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_foreground_failure_through_the_agent_renders_the_diagnostic_on_its_own_line() -> None:
    upstream = Behaviour("http_401", message=f"key {canaries.UPSTREAM_KEY} is invalid")
    script = [call("subagent", description=DESCRIPTION, prompt=TASK, provider="dsh"), upstream,
              Behaviour("text", text="The subagent failed.")]
    async with FaultServer(script=script) as server:
        kit = toolkit({"dsh": {"provider": "dsh", "env": {"X": canaries.CHILD_ENV}, **FAST}}, server.url)
        agent, screen = agent_for(server, kit)
        try:
            with anyio.fail_after(60):
                reason = await agent.run_turn("delegate it")
        finally:
            await agent.aclose()
            await kit.aclose()
        assert reason.kind == "completed"
        (result,) = screen.of("tool/result")
        assert result["output"] == f"subagent run failed\nDiagnostic: {CHILD_ERROR}"
        assert result["is_error"] is True and result["diagnostic"] == CHILD_ERROR
        assert f"  [tool result] Error: subagent run failed\n    {CHILD_ERROR}\n" in screen.text
        # the model got the same text back as the tool message
        tool_message = server.requests[-1].json["messages"][-1]
        assert tool_message["role"] == "tool" and tool_message["content"] == result["output"]
        for canary in (canaries.TASK_TEXT, canaries.TOOL_INPUT, canaries.UPSTREAM_KEY, canaries.CHILD_ENV):
            assert canary not in result["output"]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_background_job_shows_the_same_diagnostic_as_the_foreground() -> None:
    kit = toolkit({"probe": scripted(prompt="exit", exit_code=9, text="half")})
    tool, job_output, job_list, _job_kill = kit.tools()
    diagnostic = "Subagent failure (provider: probe; stage: session-run; category: transport; exit code: 9)"
    notices: list[tuple[str, str]] = []
    try:
        foreground = await tool.run({"description": DESCRIPTION, "prompt": TASK}, context(notices))
        started = await tool.run({"description": DESCRIPTION, "prompt": TASK, "run_in_background": True},
                                 context(notices))
        assert started == ToolOutput("started background subagent job subagent-1")
        with anyio.fail_after(30):
            output = await job_output.run({"job_id": "subagent-1", "wait": True}, context())
    finally:
        await kit.aclose()
    assert foreground == ToolOutput(
        f"subagent run failed\nDiagnostic: {diagnostic}\nPartial output before the run ended:\nhalf", True, diagnostic
    )
    assert output == ToolOutput(f"half\n[status: failed, error; diagnostic: {diagnostic}]", diagnostic=diagnostic)
    assert notices == [(
        f"background job subagent-1 (subagent: probe) finished [status: failed, error; diagnostic: {diagnostic}]. "
        "Read its output with job_output.",
        "subagent-1",
    )]
    listing = await job_list.run({}, context())
    assert listing.text == f"subagent-1 (subagent: probe) [status: failed, error; diagnostic: {diagnostic}]"
    assert kit.jobs_summary() == [listing.text]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_job_output_streams_new_output_and_kill_is_local_cancellation() -> None:
    kit = toolkit({"slow": scripted(prompt="hang", text="working on it")})
    tool, job_output, job_list, job_kill = kit.tools()
    notices: list[tuple[str, str]] = []
    try:
        await tool.run({"description": "d", "prompt": "p", "run_in_background": True}, context(notices))
        job = kit.jobs.get("subagent-1")
        assert job is not None
        with anyio.fail_after(30):
            while not job.output_so_far():
                await anyio.sleep(0.02)
        ask = {"job_id": "subagent-1"}
        assert (await job_output.run(ask, context())).text == "working on it\n[status: running]"
        assert (await job_output.run(ask, context())).text == "(no new output)\n[status: running]"
        waited = await job_output.run({**ask, "wait": True, "timeout_ms": 100}, context())
        assert waited.text == "(no new output)\n[status: running]"
        assert (await job_list.run({}, context())).text == "subagent-1 (subagent: slow) [status: running]"
        assert (await job_kill.run(ask, context())) == ToolOutput("killed background job subagent-1\n[status: killed]")
        assert (await job_output.run(ask, context())) == ToolOutput("(no new output)\n[status: killed]")
        again = await job_kill.run(ask, context())
        assert again.text == "background job subagent-1 had already finished\n[status: killed]"
    finally:
        await kit.aclose()
    assert notices == []  # the owner killed it: no completion notice


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_closing_the_job_manager_kills_and_disposes_every_run() -> None:
    kit = toolkit({"slow": scripted(prompt="hang", text="x"), "stuck": scripted(initialize="hang")})
    tool = kit.tools()[0]
    notices: list[tuple[str, str]] = []
    for provider in ("slow", "slow", "stuck"):
        await tool.run({"description": "d", "prompt": "p", "provider": provider, "run_in_background": True},
                       context(notices))
    await anyio.sleep(0.3)
    with anyio.fail_after(30):
        await kit.aclose()
    assert [job.status for job in kit.jobs.jobs] == ["killed", "killed", "killed"]
    assert notices == []
    with pytest.raises(RuntimeError):
        await kit.jobs.spawn(kit.providers["slow"], SubagentRequest("d", "p", REPO))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_an_idle_owner_gets_the_notice_as_its_next_turn() -> None:
    child_text = Behaviour("slow_text", text="background answer", delay=0.1)
    script = [call("subagent", description="d", prompt="look it up", provider="dsh", run_in_background=True),
              Behaviour("text", text="Started."), Behaviour("text", text="Noted the result.")]
    # the child streams from its own endpoint, so the two request orders cannot interleave
    async with FaultServer(script=script) as server, FaultServer(script=[child_text]) as child_server:
        kit = toolkit({"dsh": {"provider": "dsh", "base_url": child_server.url, **FAST}}, server.url)
        agent, screen = agent_for(server, kit)
        try:
            with anyio.fail_after(60):
                await agent.run_turn("start a job")  # ends before the child's slow answer is done
                job = kit.jobs.get("subagent-1")
                assert job is not None
                await job.wait()
            notice = "background job subagent-1 (subagent: dsh) finished [status: completed]. " \
                     "Read its output with job_output."
            assert screen.of("job/notice") == [{"job_id": "subagent-1", "text": notice}]
            assert f"[job] {notice}\n" in screen.text
            assert agent.pending_notices == 1
            with anyio.fail_after(30):
                await agent.deliver_notices()  # what the REPL does for an idle owner
            assert server.requests[-1].json["messages"][-1] == {"role": "user", "content": notice}
            assert job.take_new_output() == "background answer"
        finally:
            await agent.aclose()
            await kit.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_busy_owner_gets_the_notice_at_its_next_step() -> None:
    script = [call("subagent", description="d", prompt="p", provider="fails", run_in_background=True),
              call("job_output", job_id="subagent-1", wait=True), Behaviour("text", text="Done.")]
    async with FaultServer(script=script) as server:
        kit = toolkit({"fails": scripted(reason={"kind": "error"})}, server.url)
        agent, _screen = agent_for(server, kit)
        try:
            with anyio.fail_after(60):
                await agent.run_turn("go")
        finally:
            await agent.aclose()
            await kit.aclose()
    diagnostic = "Subagent failure (provider: fails; stage: session-run; category: child-error; stop reason: error)"
    notice = (f"background job subagent-1 (subagent: fails) finished [status: failed, error; diagnostic: "
              f"{diagnostic}]. Read its output with job_output.")
    third = server.requests[2].json["messages"]
    assert {"role": "user", "content": notice} in third
    assert third[-1] == {"role": "user", "content": notice}  # joined after the job_output result
    assert agent.pending_notices == 0


KINDS = [
    ({"reason": {"kind": "error"}}, "stage: session-run; category: child-error; stop reason: error)"),
    ({"prompt": "garbage"}, "stage: session-run; category: protocol)"),
    ({"prompt": "exit", "exit_code": 7}, "stage: session-run; category: transport; exit code: 7)"),
    ({"prompt": "exit", "signal": "SIGKILL"}, "stage: session-run; category: transport; signal: SIGKILL)"),
    ({"reason": {"kind": "disposed"}}, "stage: session-run; category: child-disposed; stop reason: disposed)"),
]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_twenty_parallel_subagent_calls_keep_their_diagnostics_apart() -> None:
    tables = {f"p{n}": scripted(**KINDS[n % len(KINDS)][0]) for n in range(20)}
    calls = [{"id": f"call_{n}", "name": "subagent",
              "arguments": {"description": "d", "prompt": f"task {n}", "provider": f"p{n}"}} for n in range(20)]
    script = [Behaviour("parallel_tool_calls", calls=calls), Behaviour("text", text="All done.")]
    async with FaultServer(script=script) as server:
        kit = toolkit(tables, server.url)
        agent, screen = agent_for(server, kit)
        try:
            with anyio.fail_after(120):
                await agent.run_turn("fan out")
        finally:
            await agent.aclose()
            await kit.aclose()
    results = {r["id"]: r["diagnostic"] for r in screen.of("tool/result")}
    assert results == {
        f"call_{n}": f"Subagent failure (provider: p{n}; {KINDS[n % len(KINDS)][1]}" for n in range(20)
    }


# -- the demo scenarios ---------------------------------------------------------------------------------


@dataclass
class DemoOutcome:
    text: str
    tool_results: list[dict[str, Any]] = field(default_factory=list)


async def _play(scenario_index: int) -> DemoOutcome:
    scenario = DELEGATION_SCENARIOS[scenario_index]
    async with FaultServer(default="text") as server:
        kit = toolkit(demo_subagent_tables(), server.url)
        agent, screen = agent_for(server, kit)
        try:
            turn = DemoTurn(prompt="please delegate", server=server)
            scenario_setup(scenario, Behaviour)(turn)
            with anyio.fail_after(60):
                await agent.run_turn(turn.prompt)
                for job in kit.jobs.jobs:
                    await job.wait()
                await agent.deliver_notices()
        finally:
            await agent.aclose()
            await kit.aclose()
        return DemoOutcome(screen.text, screen.of("tool/result"))


@pytest.fixture(scope="module")
def demo_outcomes() -> Iterator[dict[str, DemoOutcome]]:
    outcomes: dict[str, DemoOutcome] = {}

    async def play_all() -> None:
        limiter = anyio.CapacityLimiter(4)

        async def one(index: int) -> None:
            async with limiter:
                outcomes[DELEGATION_SCENARIOS[index].name] = await _play(index)

        async with anyio.create_task_group() as tg:
            for index in range(len(DELEGATION_SCENARIOS)):
                tg.start_soon(one, index)

    anyio.run(play_all)
    yield outcomes


@pytest.mark.parametrize("name", [scenario.name for scenario in DELEGATION_SCENARIOS])
def test_each_demo_scenario_prints_its_line(name: str, demo_outcomes: dict[str, DemoOutcome]) -> None:
    scenario = next(s for s in DELEGATION_SCENARIOS if s.name == name)
    lines = demo_outcomes[name].text.split("\n")
    assert any(line.startswith(scenario.expect) for line in lines), demo_outcomes[name].text


def test_demo_scenario_names_are_unique_and_every_provider_exists() -> None:
    names = [scenario.name for scenario in DELEGATION_SCENARIOS]
    assert len(names) == len(set(names))
    tables = demo_subagent_tables()
    assert all(scenario.provider in tables for scenario in DELEGATION_SCENARIOS)


def test_the_toolkit_can_be_built_before_an_event_loop_runs() -> None:
    # the REPL builds it while reading its configuration, before anyio.run
    kit = SubagentToolkit.from_config(demo_subagent_tables(), ParentContext(base_url="http://127.0.0.1:9"))
    assert kit.jobs_summary() == []
    anyio.run(kit.aclose)
