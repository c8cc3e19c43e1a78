"""A session with an MCP server whose tool answers with a secret the session only knows from a header's
``${VAR}``: the model, the session log, dsh.log and the failure record all get it masked (docs/mcp.md;
the agent's redactor is built with McpManager.secrets())."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh.agent_loop.mcp import McpServerFailure, parse_servers
from dsh.agent_loop.session import Session
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.mcp_servers import HttpServer
from tests.agent_loop.session_configs import StubConfig
from tests.canaries import API_KEY, CHILD_ENV

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

VARIABLE = "DSH_TEST_MCP_HEADER_VALUE"  # a name that does not look secret: only the ${} use makes it one


async def test_a_secret_a_server_echoes_is_masked_everywhere(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    http_server: Callable[..., HttpServer],
) -> None:
    monkeypatch.setenv(VARIABLE, CHILD_ENV)  # the in-process fixture reads the value it leaks from here
    caplog.set_level(logging.WARNING, logger="dsh.mcp")
    web = http_server("echo-env-secret", secret_env=VARIABLE)
    table = {"url": web.url, "headers": {"X-Token": f"${{{VARIABLE}}}"}, "approve": "auto"}
    config = StubConfig(base_url=server.url, api_key=API_KEY, mcp_servers=parse_servers({"sec": table}))
    assert CHILD_ENV not in config.secrets  # the session's own secrets do not know it
    session = Session(config, sessions_root=tmp_path / "sessions", env={VARIABLE: CHILD_ENV})
    await session.start()
    try:
        calls = [["c1", "mcp__sec__secret", {}], ["c2", "mcp__sec__secret_is_error", {}],
                 ["c3", "mcp__sec__secret_raises", {}]]
        server.push(Behaviour("parallel_tool_calls", calls=calls, interleave=True))
        await session.run_turn("go")
        log_path = session.log.path if session.log is not None else None
        record = session.last_failure
    finally:
        await session.aclose()
    sent = server.requests[-1].json["messages"]
    results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    line = "MCP server failure (server: sec; stage: call; category: tool-error)"
    assert results == {"c1": "token=***", "c2": "Error: rejected token ***",
                       "c3": f"Error: the MCP server sec failed the call\n{line}"}
    described = {t["function"]["name"]: t["function"]["description"] for t in server.requests[-1].json["tools"]}
    assert described["mcp__sec__secret_in_description"] == "Authenticated with ***."
    # Its input schema too: every string masked and cleaned of escapes (fixtures/mcp_servers._hostile_schema).
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in server.requests[-1].json["tools"]}
    shown = "]0;token ***[31mtoken ***"
    assert schemas["mcp__sec__secret_in_schema"] == {
        "type": "object", "title": shown, "description": shown,
        "properties": {"arg[2Jtoken ***": {"type": "string", "title": shown, "description": shown,
                                           "enum": [shown, "plain"], "default": shown}},
    }
    assert CHILD_ENV not in json.dumps(server.requests[-1].json["tools"])
    assert log_path is not None and CHILD_ENV not in log_path.read_text(encoding="utf-8")
    assert any(line in message for message in caplog.messages)
    assert not any(CHILD_ENV in message for message in caplog.messages)
    assert isinstance(record, McpServerFailure) and str(record) == line
    words = "\n".join(record.words.lines())
    assert "backend refused token ***" in words and CHILD_ENV not in words
    assert CHILD_ENV not in json.dumps([m.get("content") for m in sent])
