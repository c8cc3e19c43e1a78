"""Background subagent jobs and the job tools (``dsh.agent_loop.subagent.jobs``), with real scripted children."""

from __future__ import annotations

import anyio
import pytest

from dsh.agent_loop import ToolOutput
from dsh.agent_loop.subagent import Outcome, Provider, Run
from dsh.agent_loop.subagent.diagnostics import Failure
from dsh.agent_loop.subagent.jobs import JobManager, job_tools, notice_text, run_subagent, status_line
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries
from tests.agent_loop.subagent.tool_support import (
    DESCRIPTION,
    FAST,
    REPO,
    TASK,
    agent_for,
    call,
    context,
    scripted,
    toolkit,
)

D = "Subagent failure (provider: p; stage: session-run; category: protocol)"


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


class _Broken(Run):
    """A provider that breaks its contract: its body raises instead of returning an outcome."""

    configuration = Failure(None, None)

    async def execute(self) -> Outcome:
        raise RuntimeError(f"provider bug {canaries.TASK_TEXT}")


@pytest.mark.anyio
async def test_a_provider_that_raises_still_gives_a_safe_failure() -> None:
    result = await run_subagent(Provider("broken", _Broken), SubagentRequest("d", TASK, REPO))
    diagnostic = "Subagent failure (provider: broken; stage: unknown; category: unknown)"
    assert result == SubagentResult("", "error", diagnostic)


@pytest.mark.anyio
async def test_unknown_job_ids_are_not_echoed() -> None:
    (job_output, _job_list, job_kill) = job_tools(JobManager())
    for tool_ in (job_output, job_kill):
        unknown = await tool_.run({"job_id": canaries.TOOL_INPUT}, context())
        assert unknown == ToolOutput("unknown job id (known jobs: none)", is_error=True)


# -- background jobs through the tools, with real children -------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_background_job_shows_the_same_diagnostic_as_the_foreground() -> None:
    kit = toolkit({"probe": scripted(prompt="exit", exit_code=9, text="half")})
    tool, job_output, job_list, _job_kill = kit.tools()
    diagnostic = "Subagent failure (provider: probe; stage: session-run; category: transport; exit code: 9)"
    notices: list[tuple[str, str]] = []
    async with kit:
        foreground = await tool.run({"description": DESCRIPTION, "prompt": TASK}, context(notices))
        started = await tool.run(
            {"description": DESCRIPTION, "prompt": TASK, "run_in_background": True}, context(notices)
        )
        assert started == ToolOutput("started background subagent job subagent-1")
        with anyio.fail_after(30):
            output = await job_output.run({"job_id": "subagent-1", "wait": True}, context())
    assert foreground == ToolOutput(
        f"subagent run failed\nDiagnostic: {diagnostic}\nPartial output before the run ended:\nhalf", True, diagnostic
    )
    assert output == ToolOutput(f"half\n[status: failed, error; diagnostic: {diagnostic}]", diagnostic=diagnostic)
    assert notices == [
        (
            f"background job subagent-1 (subagent: probe) finished [status: failed, error; diagnostic: {diagnostic}]. "
            "Read its output with job_output.",
            "subagent-1",
        )
    ]
    listing = await job_list.run({}, context())
    assert listing.text == f"subagent-1 (subagent: probe) [status: failed, error; diagnostic: {diagnostic}]"
    assert kit.jobs_summary() == [listing.text]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_job_output_streams_new_output_and_kill_is_local_cancellation() -> None:
    kit = toolkit({"slow": scripted(prompt="hang", text="working on it")})
    tool, job_output, job_list, job_kill = kit.tools()
    notices: list[tuple[str, str]] = []
    async with kit:
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
    assert notices == []  # the owner killed it: no completion notice


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_closing_the_job_manager_kills_and_disposes_every_run() -> None:
    kit = toolkit({"slow": scripted(prompt="hang", text="working"), "stuck": scripted(initialize="hang")})
    tool = kit.tools()[0]
    notices: list[tuple[str, str]] = []
    async with kit:
        for provider in ("slow", "slow", "stuck"):
            await tool.run(
                {"description": "d", "prompt": "p", "provider": provider, "run_in_background": True}, context(notices)
            )
        with anyio.fail_after(30):
            while not all(job.output_so_far() for job in kit.jobs.jobs[:2]):  # the slow ones are mid-prompt
                await anyio.sleep(0.02)
            await kit.jobs.aclose()
    assert [job.status for job in kit.jobs.jobs] == ["killed", "killed", "killed"]
    assert notices == []
    with pytest.raises(RuntimeError):
        await kit.jobs.spawn(kit.providers["slow"], SubagentRequest("d", "p", REPO))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_an_idle_owner_gets_the_notice_as_its_next_turn() -> None:
    child_text = Behaviour("slow_text", text="background answer", delay=0.1)
    script = [
        call("subagent", description="d", prompt="look it up", provider="dsh", run_in_background=True),
        Behaviour("text", text="Started."),
        Behaviour("text", text="Noted the result."),
    ]
    # the child streams from its own endpoint, so the two request orders cannot interleave
    async with FaultServer(script=script) as server, FaultServer(script=[child_text]) as child_server:
        kit = toolkit({"dsh": {"provider": "dsh", "base_url": child_server.url, **FAST}}, server.url)
        agent, recorder = agent_for(server, kit)
        await kit.__aenter__()
        try:
            with anyio.fail_after(60):
                await agent.run_turn("start a job")  # ends before the child's slow answer is done
                job = kit.jobs.get("subagent-1")
                assert job is not None
                await job.wait()
            notice = (
                "background job subagent-1 (subagent: dsh) finished [status: completed]. "
                "Read its output with job_output."
            )
            assert recorder.of("job/notice") == [{"job_id": "subagent-1", "text": notice}]
            assert agent.pending_notices == 1
            with anyio.fail_after(30):
                await agent.deliver_notices()  # what the REPL does for an idle owner
            assert server.requests[-1].json["messages"][-1] == {"role": "user", "content": notice}
            assert job.take_new_output() == "background answer"
        finally:
            await agent.aclose()
            await kit.__aexit__(None, None, None)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_busy_owner_gets_the_notice_at_its_next_step() -> None:
    script = [
        call("subagent", description="d", prompt="p", provider="fails", run_in_background=True),
        call("job_output", job_id="subagent-1", wait=True),
        Behaviour("text", text="Done."),
    ]
    async with (
        FaultServer(script=script) as server,
        toolkit({"fails": scripted(reason={"kind": "error"})}, server.url) as kit,
    ):
        agent, _recorder = agent_for(server, kit)
        try:
            with anyio.fail_after(60):
                await agent.run_turn("go")
        finally:
            await agent.aclose()
    diagnostic = "Subagent failure (provider: fails; stage: session-run; category: child-error; stop reason: error)"
    notice = (
        f"background job subagent-1 (subagent: fails) finished [status: failed, error; diagnostic: "
        f"{diagnostic}]. Read its output with job_output."
    )
    third = server.requests[2].json["messages"]
    assert {"role": "user", "content": notice} in third
    assert third[-1] == {"role": "user", "content": notice}  # joined after the job_output result
    assert agent.pending_notices == 0
