"""The real npm MCP servers dsh's client is tested against, driven by the raw ``mcp`` SDK client.

``@modelcontextprotocol/server-everything`` and ``@modelcontextprotocol/server-filesystem`` (pins in the
Makefile's NPM_AGENTS; ``make npm-agents`` installs them into ``.venv/npm``). These tests pin what they
list and answer, so a new pin that changes either shows here before it confuses the client's tests
(/work/wt/notes/mcpfixtures.md keeps the listings). Each starts in well under a second.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.waiting import PROMPTLY

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]


@asynccontextmanager
async def npm_session(argv: list[str], *, home: Path) -> AsyncIterator[ClientSession]:
    # A fresh HOME: a server never reads or writes the user's own.
    params = StdioServerParameters(command=argv[0], args=argv[1:], env={"HOME": str(home)}, cwd=home)
    with open(os.devnull, "w") as quiet:  # both greet on stderr
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(PROMPTLY):
                await session.initialize()
            yield session


def _text(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def test_server_everything_lists_annotated_tools_and_echoes(
    tmp_path: Path, npm_server: Callable[..., list[str]],
) -> None:
    async with npm_session(npm_server("everything", "stdio"), home=tmp_path) as session:
        assert session.server_info is not None and session.server_info.name == "mcp-servers/everything"
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert {"echo", "get-sum", "get-env", "get-tiny-image", "get-structured-content"} <= set(tools)
        annotations = tools["echo"].annotations
        assert annotations is not None and (annotations.read_only_hint, annotations.destructive_hint) == (True, False)
        assert _text(await session.call_tool("echo", {"message": "hello from dsh"})) == ["Echo: hello from dsh"]


async def test_server_filesystem_lists_its_tools_and_reads_a_file(
    tmp_path: Path, npm_server: Callable[..., list[str]],
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "note.txt").write_text("the file's words\n", encoding="utf-8")
    async with npm_session(npm_server("filesystem", str(root)), home=tmp_path) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert {"read_text_file", "write_file", "list_directory", "list_allowed_directories"} <= set(tools)
        write = tools["write_file"].annotations
        assert write is not None and (write.read_only_hint, write.destructive_hint) == (False, True)
        result = await session.call_tool("read_text_file", {"path": str(root / "note.txt")})
        assert (result.is_error, _text(result)) == (False, ["the file's words\n"])
        outside = await session.call_tool("read_text_file", {"path": sys.executable})
        assert outside.is_error and "outside allowed directories" in _text(outside)[0]
