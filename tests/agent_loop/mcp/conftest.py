"""How every test here starts an MCP server: the fixture servers of fixtures/mcp_servers.py over stdio (run
from the repository root) and streamable HTTP (in this process, on 127.0.0.1), and the pinned npm servers
(skipped with how to install them when absent; never under CI=true, tests/real_parts.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from fixtures.mcp_servers import HttpServer, stdio_command
from tests.real_parts import missing
from tests.waiting import PROMPTLY

REPO = Path(__file__).resolve().parents[3]
NPM_BIN = REPO / ".venv/npm/node_modules/.bin"
NPM_INSTALL = "make npm-agents (npm install --prefix .venv/npm @modelcontextprotocol/server-{name}@2026.8.31)"


class StdioServers:
    """A fixture server over stdio, one way for every test: ``python -m fixtures.mcp_servers MODE OPTIONS``
    with the repository root as its working directory."""

    cwd = REPO

    def argv(self, mode: str, *options: str) -> list[str]:
        return stdio_command(mode, *options)

    def table(self, mode: str, *options: str, **table: Any) -> dict[str, Any]:
        """An ``[mcp_servers.NAME]`` table for dsh's client; ``table`` adds keys (approve, timeouts)."""
        return {"command": self.argv(mode, *options), "cwd": str(self.cwd), **table}

    def popen(self, mode: str, *options: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        """The server as a raw child (the test ends it): stdin and stdout piped, stderr discarded, unless told."""
        streams: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
        return subprocess.Popen(self.argv(mode, *options), cwd=self.cwd, **(streams | kwargs))

    @contextlib.asynccontextmanager
    async def session(self, mode: str, *options: str, env: dict[str, str] | None = None, errlog: Any = None,
                      handler: Any = None) -> AsyncIterator[ClientSession]:
        """The raw SDK client's session with the server, initialized."""
        argv = self.argv(mode, *options)
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=self.cwd, env=env)
        async with (
            stdio_client(params, errlog=errlog or sys.stderr) as (read, write),
            ClientSession(read, write, message_handler=handler) as session,
        ):
            with anyio.fail_after(PROMPTLY):
                await session.initialize()
            yield session


@pytest.fixture
def stdio_server() -> StdioServers:
    return StdioServers()


@pytest.fixture
def http_server() -> Iterator[Callable[..., HttpServer]]:
    """``http_server(mode, token=..., record=..., secret_env=...)``: a streamable-HTTP fixture server, ready
    when returned and stopped when the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda mode="ok", **options: stack.enter_context(HttpServer(mode, **options))


@pytest.fixture
def npm_server() -> Callable[..., list[str]]:
    """``npm_server(name, *args)``: the argv of a pinned npm MCP server (``mcp-server-NAME``), or the test is
    skipped with how to install it (failed under CI=true)."""

    def argv(name: str, *args: str) -> list[str]:
        command = NPM_BIN / f"mcp-server-{name}"
        if not command.exists():
            missing(f"@modelcontextprotocol/server-{name} (npm)", NPM_INSTALL.format(name=name))
        return [str(command), *args]

    return argv
