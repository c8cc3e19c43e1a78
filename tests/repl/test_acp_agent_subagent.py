"""dsh delegating to dsh over ACP: the ``acp`` subagent provider drives a real ``dsh acp`` child, which talks to
the loopback fault server. The seed's ACP diagnostics hold end to end (docs/subagents.md, docs/contracts.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.subagent.acp import from_config
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REPO = str(Path(__file__).resolve().parents[2])


def _table(url: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    return {
        "provider": "acp", "command": sys.executable, "args": ["-m", "dsh.repl", "acp", "--base-url", url],
        "env": {"PYTHONPATH": REPO, "XDG_STATE_HOME": str(tmp_path / "state"),
                "XDG_CONFIG_HOME": str(tmp_path / "config"), "DEEPSEEK_API_KEY": canaries.API_KEY, **env},
        "startup_timeout": 120,
    }  # fmt: skip


async def _run(table: dict[str, Any], cwd: Path, prompt: str = "delegate this") -> SubagentResult:
    provider = from_config("dsh-acp", table)
    async with provider.run(SubagentRequest(description="test", prompt=prompt, cwd=str(cwd))) as run:
        return await run.result()


async def test_dsh_delegates_to_dsh_and_gets_the_answer(tmp_path: Path) -> None:
    async with FaultServer(script=[Behaviour("text", text="answer from the child dsh")]) as server:
        result = await _run(_table(server.url, tmp_path), tmp_path)
    assert (result.stop_reason, result.diagnostic, result.output) == ("completed", None, "answer from the child dsh")
    (request,) = server.requests
    assert request.json["messages"][-1] == {"role": "user", "content": "delegate this"}


async def test_a_failing_child_turn_is_the_agent_error_line(tmp_path: Path) -> None:
    upstream = Behaviour("http_401", message=f"Authentication Fails, key {canaries.UPSTREAM_KEY} is invalid")
    async with FaultServer(script=[upstream]) as server:
        result = await _run(_table(server.url, tmp_path), tmp_path)
    assert result.stop_reason == "error"
    assert result.diagnostic == ("Subagent failure (provider: dsh-acp; stage: prompt; category: agent-error; "
                                 "error code: -32603 (internal error))")
    # the child's own words (the turn-end line) stay host-side, masked: /why's record, never the diagnostic
    assert result.cause is not None
    words = str(getattr(result.cause, "word_lines", lambda: [])())
    assert "[turn failed AUTH]" in words
    assert canaries.API_KEY not in words and canaries.UPSTREAM_KEY not in words


async def test_a_child_without_a_key_fails_at_new_session(tmp_path: Path) -> None:
    async with FaultServer() as server:
        result = await _run(_table(server.url, tmp_path, DEEPSEEK_API_KEY=""), tmp_path)
    assert result.stop_reason == "error"
    assert result.diagnostic == ("Subagent failure (provider: dsh-acp; stage: new-session; category: agent-error; "
                                 "error code: -32603 (internal error))")
