"""The ``subagent`` tool through a real Agent, real child processes (``dsh serve --stdio`` and the scripted
child) and the real fault server; the registry. The demo's delegation scenarios: tests/repl/demo/."""

from __future__ import annotations

import anyio
import pytest

from dsh.agent_loop import ToolOutput
from dsh.agent_loop.subagent import SubagentConfigError, build_provider
from dsh.agent_loop.subagent.jobs import JobManager
from dsh.agent_loop.subagent.result import SubagentResult
from dsh.agent_loop.subagent.tool import SubagentToolkit, foreground_output, subagent_tool
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries
from tests.agent_loop.subagent.tool_support import (
    CHILD_ERROR,
    DESCRIPTION,
    FAST,
    TASK,
    agent_for,
    call,
    context,
    scripted,
    toolkit,
)

# -- exact texts -------------------------------------------------------------------------------------

D = "Subagent failure (provider: p; stage: session-run; category: protocol)"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (SubagentResult("done", "completed"), ToolOutput("done")),
        (SubagentResult("", "completed"), ToolOutput("(the subagent returned no output)")),
        (
            SubagentResult("half", "error", D),
            ToolOutput(f"subagent run failed\nDiagnostic: {D}\nPartial output before the run ended:\nhalf", True, D),
        ),
        (SubagentResult("", "error", D), ToolOutput(f"subagent run failed\nDiagnostic: {D}", True, D)),
        (SubagentResult("", "error"), ToolOutput("subagent run failed", True, None)),
        (
            SubagentResult("so far", "aborted"),
            ToolOutput("subagent run was cancelled\nPartial output before the run ended:\nso far", True, None),
        ),
        (
            SubagentResult("cut", "max-tokens"),
            ToolOutput(
                "subagent run hit its token limit before finishing\nPartial output before the run ended:\ncut", True
            ),
        ),
        (SubagentResult("", "refusal"), ToolOutput("subagent declined the task", True)),
        (
            SubagentResult("x", "sideways"),
            ToolOutput("subagent run failed\nPartial output before the run ended:\nx", True),
        ),
    ],
)
def test_foreground_texts_are_exact(result: SubagentResult, expected: ToolOutput) -> None:
    assert foreground_output(result) == expected


# -- registry and configuration -----------------------------------------------------------------------


def test_registry_rejects_unknown_providers_and_names_without_echoing_values() -> None:
    with pytest.raises(SubagentConfigError) as unknown:
        build_provider("probe", {"provider": "telepathy"})
    assert str(unknown.value) == "[subagents.probe] provider must be one of acp, claude-code, codex, dsh"
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
    background = await tool.run({"description": "d", "prompt": "p", "run_in_background": True}, ctx)
    assert background == ToolOutput("subagent: background jobs are not available here", is_error=True)


# -- through the tool, with real children -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_a_shutdown_failure_joins_a_failed_result_only() -> None:
    kit = toolkit(
        {
            "failing": scripted(reason={"kind": "error"}, shutdown="error"),
            "fine": scripted(shutdown="error"),
        }
    )
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
async def test_foreground_failure_through_the_agent_carries_the_diagnostic_to_the_event_and_the_model() -> None:
    upstream = Behaviour("http_401", message=f"key {canaries.UPSTREAM_KEY} is invalid")
    script = [
        call("subagent", description=DESCRIPTION, prompt=TASK, provider="dsh"),
        upstream,
        Behaviour("text", text="The subagent failed."),
    ]
    async with FaultServer(script=script) as server:
        async with toolkit({"dsh": {"provider": "dsh", "env": {"X": canaries.CHILD_ENV}, **FAST}}, server.url) as kit:
            agent, recorder = agent_for(server, kit)
            try:
                with anyio.fail_after(60):
                    reason = await agent.run_turn("delegate it")
            finally:
                await agent.aclose()
        assert reason.kind == "completed"
        (result,) = recorder.of("tool/result")
        assert result["output"] == f"subagent run failed\nDiagnostic: {CHILD_ERROR}"
        assert result["is_error"] is True and result["diagnostic"] == CHILD_ERROR
        # the model got the same text back as the tool message
        tool_message = server.requests[-1].json["messages"][-1]
        assert tool_message["role"] == "tool" and tool_message["content"] == result["output"]
        for canary in (canaries.TASK_TEXT, canaries.TOOL_INPUT, canaries.UPSTREAM_KEY, canaries.CHILD_ENV):
            assert canary not in result["output"]


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
    calls = [
        {
            "id": f"call_{n}",
            "name": "subagent",
            "arguments": {"description": "d", "prompt": f"task {n}", "provider": f"p{n}"},
        }
        for n in range(20)
    ]
    script = [Behaviour("parallel_tool_calls", calls=calls), Behaviour("text", text="All done.")]
    async with FaultServer(script=script) as server, toolkit(tables, server.url) as kit:
        agent, recorder = agent_for(server, kit)
        try:
            with anyio.fail_after(120):
                await agent.run_turn("fan out")
        finally:
            await agent.aclose()
    results = {r["id"]: r["diagnostic"] for r in recorder.of("tool/result")}
    assert results == {f"call_{n}": f"Subagent failure (provider: p{n}; {KINDS[n % len(KINDS)][1]}" for n in range(20)}


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_plan_mode_refuses_a_delegation_and_no_other_mode_changes_it() -> None:
    """A subagent edits and runs commands outside the sandbox: plan refuses it before any child starts, in the
    foreground and as a job; default, accept-edits and auto run it as configured (docs/safety.md)."""
    from dsh.agent_loop.permissions import PLAN_REFUSAL, Mode, Permissions

    kit = toolkit({"probe": scripted(text="delegated")})
    tool = subagent_tool(kit.providers, kit.jobs)
    ctx = context()
    ctx.permissions = Permissions(Mode.PLAN, auto_allowed=True)
    async with kit:
        for background in (False, True):
            args = {"description": "d", "prompt": "p", "run_in_background": background}
            assert await tool.run(args, ctx) == ToolOutput(PLAN_REFUSAL, is_error=True)
        assert kit.jobs_summary() == []  # no job was started
        for mode in (Mode.DEFAULT, Mode.ACCEPT_EDITS, Mode.AUTO):
            assert ctx.permissions.set(mode) is None
            assert await tool.run({"description": "d", "prompt": "p"}, ctx) == ToolOutput("delegated")
