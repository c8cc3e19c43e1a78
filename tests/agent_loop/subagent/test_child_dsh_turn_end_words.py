"""A child dsh that failed on its own (its request got HTTP 401): its turn-end line is among the agent's own
words that ``/why`` and dsh.log show, masked (docs/subagents.md, "The agent's own words"); the diagnostic
the model gets stays the closed line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.result import SubagentFailure, SubagentRequest
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries

DIAGNOSTIC = "Subagent failure (provider: helper; stage: session-run; category: child-error; stop reason: error)"


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_why_holds_the_child_dsh_turn_end_line_masked(workdir: Path) -> None:
    message = f"Authentication Fails, bad key {canaries.UPSTREAM_KEY}\x1b[2J"
    async with FaultServer(script=[Behaviour("http_401", message=message)]) as server:
        parent = ParentContext(model="probe-model", base_url=server.url, api_key=canaries.API_KEY)
        provider = build_provider("helper", {"provider": "dsh"}, parent)
        async with provider.run(SubagentRequest("probe", "do the task", str(workdir))) as run:
            result = await run.result()
    assert result.stop_reason == "error"
    assert result.diagnostic == DIAGNOSTIC
    assert isinstance(result.cause, SubagentFailure)
    assert result.cause.word_lines() == [
        "the agent's own words (host-side only, masked):",
        "  turn end: error (AUTH, HTTP 401, request id fault-0001): Authentication Fails, bad key sk-***\\x1b[2J",
    ]
    assert canaries.UPSTREAM_KEY not in str(result.cause) and "Authentication" not in (result.diagnostic or "")
