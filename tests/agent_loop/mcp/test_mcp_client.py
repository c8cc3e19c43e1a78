"""The MCP client against real servers over stdio: @modelcontextprotocol/server-everything (npm, pinned in the
Makefile) and small hostile servers written here (until fixtures/mcp_servers.py lands). Exact lines."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.mcp import MCP_NO_APPROVER, McpCallRequest, McpConfigError, McpManager, McpServerFailure
from dsh.agent_loop.mcp.tools import MAX_NAME_CHARS, tool_names
from dsh.agent_loop.tools.registry import ToolContext
from tests.canaries import CHILD_ENV, CHILD_STDERR
from tests.real_parts import missing

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[3]
EVERYTHING = REPO / ".venv/npm/node_modules/.bin/mcp-server-everything"
PY = sys.executable


def _everything() -> dict[str, Any]:
    if not EVERYTHING.exists():
        missing("@modelcontextprotocol/server-everything", "make npm-agents")
    return {"command": str(EVERYTHING), "args": ["stdio"]}


def _ctx(approver: Any = None) -> ToolContext:
    return ToolContext(cwd=Path("."), turn=1, notify=lambda event: None, approver=approver)


class _Seen:
    def __init__(self) -> None:
        self.notices: list[str] = []
        self.failures: list[BaseException] = []


def _manager(tables: dict[str, Any], seen: _Seen, **kwargs: Any) -> McpManager:
    return McpManager(tables, environ=os.environ, mask=lambda text: text.replace(CHILD_ENV, "***"),
                      notice=seen.notices.append, on_failure=seen.failures.append, **kwargs)


async def test_everything_server_lists_and_calls_its_tools() -> None:
    seen = _Seen()
    async with _manager({"ev": _everything()}, seen) as manager:
        await manager.wait_ready()
        [status] = manager.status()
        assert (status.state, status.tools > 5, status.line) == ("ready", True, None)
        tools = {tool.name: tool for tool in manager.tools()}
        assert tools["mcp__ev__echo"].concurrency_safe  # readOnlyHint: runs without asking
        output = await tools["mcp__ev__echo"].run({"message": "hi"}, _ctx())
        assert (output.text, output.is_error) == ("Echo: hi", False)
        image = await tools["mcp__ev__get-tiny-image"].run({}, _ctx())
        assert "[image: image/png, " in image.text and " bytes]" in image.text
    assert seen.notices == []


async def test_a_tool_that_is_not_read_only_asks_and_is_denied_without_an_approver() -> None:
    seen = _Seen()
    asked: list[object] = []

    async def approver(request: object) -> str:
        asked.append(request)
        return "no"

    async with _manager({"ev": _everything()}, seen) as manager:
        await manager.wait_ready()
        tool = {tool.name: tool for tool in manager.tools()}["mcp__ev__toggle-simulated-logging"]
        assert (await tool.run({}, _ctx())).text == MCP_NO_APPROVER
        assert (await tool.run({}, _ctx(approver))).text == "Error: the user denied this MCP tool call"
        assert asked == [McpCallRequest("ev", "toggle-simulated-logging", {})]
        manager.allow_mcp = True
        assert not (await tool.run({}, _ctx())).is_error


@pytest.mark.parametrize(
    ("table", "line"),
    [
        ({"command": "/nonexistent/mcp-server"},
         "MCP server failure (server: s; stage: spawn; category: process-start)"),
        ({"command": ["sh", "-c", f"echo {CHILD_STDERR} {CHILD_ENV} >&2; exit 3"]},
         "MCP server failure (server: s; stage: initialize; category: process-exit; exit code: 3)"),
        ({"command": ["sh", "-c", "echo not-json-rpc; exec sleep 60"]},
         "MCP server failure (server: s; stage: initialize; category: protocol)"),
        ({"command": ["sh", "-c", "exec sleep 60"], "startup_timeout": 0.5},
         "MCP server failure (server: s; stage: initialize; category: timeout)"),
    ],
    ids=["missing-command", "exit-at-start", "garbage-stdout", "hang-at-initialize"],
)
async def test_a_failing_server_is_announced_once_with_its_closed_line(table: dict[str, Any], line: str) -> None:
    seen = _Seen()
    async with _manager({"s": table}, seen) as manager:
        await manager.wait_ready()
        assert [row.line for row in manager.status()] == [line]
        assert manager.tools() == []
    assert seen.notices == [line]
    [record] = seen.failures
    assert isinstance(record, McpServerFailure) and str(record) == line
    assert CHILD_STDERR not in line and CHILD_ENV not in line
    if "exit code: 3" in line:  # the server's own words stay host-side, masked
        assert record.words.stderr == (f"{CHILD_STDERR} ***",)


async def test_a_crash_during_a_call_is_a_tool_error_naming_the_server(tmp_path: Path) -> None:
    server = tmp_path / "crash.py"
    server.write_text(
        "from mcp.server.mcpserver import MCPServer\n"
        "import os\n"
        "app = MCPServer('crash')\n"
        "@app.tool()\n"
        "def boom() -> str:\n"
        "    os._exit(7)\n"
        "app.run()\n"
    )
    seen = _Seen()
    async with _manager({"c": {"command": [PY, str(server)], "approve": "auto"}}, seen) as manager:
        await manager.wait_ready()
        [tool] = manager.tools()
        output = await tool.run({}, _ctx())
    line = "MCP server failure (server: c; stage: call; category: process-exit; exit code: 7)"
    assert (output.text, output.is_error, output.diagnostic) == (
        f"Error: the MCP server c failed the call\n{line}", True, line)
    assert [row.line for row in manager.status()] == [line]
    assert seen.notices == []  # the tool result carries it


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "[mcp_servers.x]: set exactly one of command (stdio) or url (streamable HTTP)"),
        ({"command": "a", "colour": 1}, "[mcp_servers.x] has unknown key 'colour'"),
        ({"command": "a", "startup_timeout": 0}, "[mcp_servers.x]: startup_timeout must be a number"),
        ({"command": "a", "approve": "yes"}, '[mcp_servers.x]: approve must be "ask" or "auto"'),
        ({"url": "ftp://h"}, "[mcp_servers.x]: url must be an http:// or https:// URL"),
    ],
)
def test_a_bad_table_is_a_config_error_naming_table_and_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        McpManager({"x": table}, environ={}, mask=str, notice=lambda text: None)
    assert str(caught.value).startswith(message)


@given(st.text(max_size=20), st.lists(st.text(max_size=300), max_size=30))
def test_tool_names_are_api_safe_bounded_unique_and_deterministic(server: str, tools: list[str]) -> None:
    names = tool_names(server, tools, set())
    assert names == tool_names(server, tools, set())
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) <= MAX_NAME_CHARS and name.startswith("mcp__")
        assert all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in name)
