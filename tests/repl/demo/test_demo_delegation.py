"""The demo's delegation scenarios (repl/demo/delegation.py and repl/demo/product_delegation.py): each prints
the line it promises, through the real providers, a real agent, the fault server and the REPL's renderer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.jobs import user_notice
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.tool import SubagentToolkit
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.demo.catalogue import DemoTurn
from dsh.repl.demo.delegation import DELEGATION_SCENARIOS, DelegationScenario, demo_subagent_tables, scenario_setup
from dsh.repl.demo.product_delegation import PRODUCT_SCENARIOS, product_demo_tables
from dsh.repl.renderer import Renderer
from tests.agent_loop.subagent.tool_support import agent_for, toolkit

TOOL_RESULT = "  [tool result] "


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize("scenario", DELEGATION_SCENARIOS, ids=[scenario.name for scenario in DELEGATION_SCENARIOS])
async def test_each_delegation_scenario_prints_its_line(scenario: DelegationScenario) -> None:
    renderer = Renderer(color=False)
    rendered: list[str] = []
    async with FaultServer(default="text") as server, toolkit(demo_subagent_tables(), server.url) as kit:
        agent, _events = agent_for(server, kit)
        agent.subscribe(lambda event: rendered.append(renderer.render(event)))
        try:
            turn = DemoTurn(prompt="please delegate", server=server)
            scenario_setup(scenario, Behaviour)(turn)
            with anyio.fail_after(60):
                await agent.run_turn(turn.prompt)
                for job in kit.jobs.jobs:
                    await job.wait()
                await agent.deliver_notices()
            # what the REPL shows for a settled job (the renderer here shows the model's notice text)
            notices = [f"[job] {user_notice(job)}" for job in kit.jobs.jobs if job.status != "killed"]
        finally:
            await agent.aclose()
    screen = "".join(rendered)
    assert any(line.startswith(scenario.expect) for line in screen.split("\n") + notices), screen


def test_demo_scenario_names_are_unique_and_every_provider_exists() -> None:
    names = [scenario.name for scenario in DELEGATION_SCENARIOS]
    assert len(names) == len(set(names))
    tables = demo_subagent_tables()
    assert all(scenario.provider in tables for scenario in DELEGATION_SCENARIOS)


def test_the_toolkit_can_be_built_before_an_event_loop_runs() -> None:
    # the REPL builds it while reading its configuration, before anyio.run
    kit = SubagentToolkit.from_config(demo_subagent_tables(), ParentContext(base_url="http://127.0.0.1:9"))
    assert kit.jobs_summary() == []

    async def session() -> None:
        async with kit:
            assert kit.jobs.available
        assert not kit.jobs.available

    anyio.run(session)


def _product_cases() -> list[Any]:
    tables = product_demo_tables()
    return [pytest.param(tables[s.provider], s.expect, id=s.name) for s in PRODUCT_SCENARIOS]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize(("table", "expect"), _product_cases())
async def test_each_claude_code_and_codex_scenario_prints_its_line(
    tmp_path: Path, table: dict[str, Any], expect: str
) -> None:
    request = SubagentRequest(description="task", prompt="do the task", cwd=str(tmp_path))
    async with build_provider("demo", table).run(request) as run:
        result = await run.result()
    if expect.startswith(TOOL_RESULT):
        assert (result.stop_reason, result.output) == ("completed", expect.removeprefix(TOOL_RESULT))
    else:
        assert result.diagnostic is not None
        assert "    " + result.diagnostic.splitlines()[-1] == expect
