"""The steps of docs/adding-a-provider.md, end to end: one new module (echo_provider.py), one line of
registration, a ``[subagents.NAME]`` table, and runs through the ``subagent`` tool."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from dsh.agent_loop import ToolOutput
from dsh.agent_loop.subagent import PROVIDER_MODULES
from dsh.agent_loop.subagent.tool import SubagentToolkit
from tests.agent_loop.subagent.tool_support import context

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

FAILED = "Subagent failure (provider: echo; stage: reply; category: process-exit; exit code: 3)"


@pytest.fixture
def registered() -> Iterator[None]:
    PROVIDER_MODULES["echo"] = "tests.agent_loop.subagent.echo_provider"  # the one line of registration
    yield
    del PROVIDER_MODULES["echo"]


@pytest.mark.usefixtures("registered")
async def test_the_echo_provider_runs_through_the_subagent_tool() -> None:
    tables = {
        "echo": {"provider": "echo", "prefix": "echo: "},
        "plain": {"provider": "echo"},
        "typo": {"provider": "echo", "prefix": 3},
    }
    async with SubagentToolkit.from_config(tables) as kit:
        subagent, job_output, _job_list, _job_kill = kit.tools()
        ctx = context()
        assert await subagent.run({"description": "d", "prompt": "hello"}, ctx) == ToolOutput("echo: hello")
        plain = await subagent.run({"description": "d", "prompt": "hello", "provider": "plain"}, ctx)
        assert plain == ToolOutput("hello")
        failed = await subagent.run({"description": "d", "prompt": "exit"}, ctx)
        assert failed == ToolOutput(f"subagent run failed\nDiagnostic: {FAILED}", is_error=True, diagnostic=FAILED)
        typo = await subagent.run({"description": "d", "prompt": "hello", "provider": "typo"}, ctx)
        assert typo.diagnostic == "Subagent failure (provider: typo; stage: start; category: configuration)"
        started = await subagent.run({"description": "d", "prompt": "later", "run_in_background": True}, ctx)
        assert started == ToolOutput("started background subagent job subagent-1")
        with anyio.fail_after(30):
            output = await job_output.run({"job_id": "subagent-1", "wait": True}, ctx)
        assert output == ToolOutput("echo: later\n[status: completed]")


@pytest.mark.usefixtures("registered")
async def test_a_secret_in_the_tables_env_is_masked_in_what_the_child_says() -> None:
    # Run masks its settings' env through ProviderSettings, whatever the provider: the child echoes it back.
    token = "plain-echo-token-7c31"
    tables = {"echo": {"provider": "echo", "env": {"ECHO_TOKEN": token}}}
    async with SubagentToolkit.from_config(tables) as kit:
        subagent = kit.tools()[0]
        said = await subagent.run({"description": "d", "prompt": f"the token is {token}"}, context())
    assert said == ToolOutput("the token is ***")


def test_an_unregistered_kind_is_a_usage_error() -> None:
    from dsh.agent_loop.subagent import SubagentConfigError, build_provider

    with pytest.raises(SubagentConfigError, match=r"provider must be one of acp, claude-code, codex, dsh$"):
        build_provider("echo", {"provider": "echo"})
