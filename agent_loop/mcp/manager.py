"""Every configured MCP server of one session: started in the background, watched, restarted, reaped.

:class:`McpManager` is an async context manager the session enters when it opens (its task group is the
session's for the servers: structured concurrency, nothing detached; docs/architecture.md). Entering starts
every enabled server and returns at once, so the first prompt never waits; a turn calls :meth:`wait_ready`,
which waits for a server still starting at most its ``startup_timeout``. A server that fails is announced
once (``notice``, the closed line) and its record goes to ``on_failure`` (``/why``) and dsh.log, masked;
the session carries on without its tools. The SDK is imported only when a server starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from dsh.agent_loop.child_words import AgentWords
from dsh.agent_loop.frames import FrameLog
from dsh.agent_loop.mcp.config import McpServerConfig, secret_values
from dsh.agent_loop.mcp.diagnostics import CallFailed, McpFailure, McpServerFailure, McpStrayLines, failure_line
from dsh.agent_loop.mcp.tools import McpToolSpec, build_tool, format_result, offer, tool_names
from dsh.agent_loop.owned_group import OwnedTaskGroup
from dsh.agent_loop.tools.registry import Tool, ToolOutput
from dsh.llm._version import install_line

if TYPE_CHECKING:
    from dsh.agent_loop.mcp.client import ServerConnection

__all__ = ["McpManager", "ServerStatus"]

_log = logging.getLogger("dsh.mcp")
MISSING_EXTRA = f"MCP servers need the mcp extra: {install_line('mcp')}"
_SETTLE_BACKSTOP = 5.0  # seconds past a server's deadline before a turn stops waiting for it regardless


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``/mcp`` shows of one server: its state, its tool count when ready, its line when failed."""

    name: str
    state: str  # starting | ready | failed | disabled | stopped
    tools: int = 0
    line: str | None = None


class McpManager:
    def __init__(
        self,
        configs: Mapping[str, McpServerConfig],
        *,
        environ: Mapping[str, str],
        mask: Callable[[str], str],
        notice: Callable[[str], None],
        on_failure: Callable[[BaseException], None] | None = None,
        allow_mcp: bool = False,
        frames: FrameLog | None = None,
    ) -> None:
        """``configs``: the ``[mcp_servers.NAME]`` tables, read (agent_loop/mcp/config.py). ``frames``: where each
        server's JSON-RPC frames are remembered, as closed facts (agent_loop/frames.py)."""
        self.configs: dict[str, McpServerConfig] = dict(configs)
        self._environ = environ
        self._mask = mask
        self._notice = notice
        self._on_failure = on_failure
        self.allow_mcp = allow_mcp
        self._frames = frames
        self._connections: dict[str, ServerConnection] = {}
        self._group = OwnedTaskGroup()
        self._specs: list[McpToolSpec] | None = None  # rebuilt when a server's tools change
        self._left_out_said: dict[str, str | None] = {}  # each server's last "left out" line, said once
        self._loaded = anyio.Event()  # the SDK is imported and every enabled server started
        self._closing = False
        self._sdk_missing = False  # the mcp extra is not installed: no server can start

    async def __aenter__(self) -> McpManager:
        await self._group.open()
        group = self._group.group
        assert group is not None
        group.start_soon(self._start_all, name="mcp servers")
        return self

    async def _start_all(self) -> None:
        # The SDK takes ~0.6 s to import: in a worker thread, after the prompt, never before it
        # (bench: mcp_first_prompt_ms, docs/performance.md). Only then do the servers start.
        enabled = [name for name, config in self.configs.items() if config.enabled]
        if enabled and importlib.util.find_spec("mcp") is None:
            self._sdk_missing = True
            self._notice(f"{MISSING_EXTRA} (not started: {', '.join(enabled)})")
        elif enabled:
            await anyio.to_thread.run_sync(importlib.import_module, "dsh.agent_loop.mcp.client")
        if not self._closing and not self._sdk_missing:
            for config in self.configs.values():
                if config.enabled:
                    self._start(config)
        self._loaded.set()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every server and reap it (each connection's ladder runs in its own task)."""
        self._closing = True
        for connection in self._connections.values():
            connection.stop()
        await self._group.close()

    def _start(self, config: McpServerConfig) -> None:
        from dsh.agent_loop.mcp.client import ServerConnection  # the SDK: only when a server starts

        group = self._group.group
        assert group is not None, "McpManager not entered"
        tap = self._frames.tap(f"mcp {config.name}") if self._frames is not None else None
        connection = ServerConnection(config, environ=self._environ, on_change=self._changed, frames=tap,
                                      on_stray=self._stray)
        self._connections[config.name] = connection
        group.start_soon(connection.run, name=f"mcp server {config.name}")

    async def restart(self, name: str) -> str | None:
        """``/mcp restart NAME``: stop the server (reaped), then start it again in the background; or why not."""
        config = self.configs.get(name)
        if config is None:
            raise KeyError(name)
        await self._loaded.wait()
        if self._sdk_missing:
            return MISSING_EXTRA
        old = self._connections.get(name)
        if old is not None:
            old.stop()
            await old.done.wait()
        self._start(config)
        self._specs = None
        return None

    def secrets(self) -> tuple[str, ...]:
        """Values to mask (:func:`~dsh.agent_loop.mcp.config.secret_values`)."""
        return secret_values(self.configs.values(), self._environ)

    # --- state ----------------------------------------------------------------------------------

    def _changed(self, connection: ServerConnection) -> None:
        self._specs = None
        failure = connection.failure
        # A call's failure is recorded (and logged) once, by _call, and is that call's tool result already.
        if connection.state == "failed" and failure is not None and failure.stage.value != "call":
            record = self._record(connection, failure)
            if self._on_failure is not None:
                self._on_failure(record)
            self._notice(str(record))

    def _stray(self, connection: ServerConnection, first: str) -> None:
        """The first stdout line of a connection that was not JSON-RPC (skipped): for /why and dsh.log, masked,
        bounded and inert like the server's other words; never on the screen (docs/mcp.md, "Limits")."""
        words = AgentWords.gather((("first stdout line that is not JSON-RPC", first),), "", self._mask)
        record = McpStrayLines(connection.config.name, words, lambda: connection.stray_lines)
        _log.warning("%s; %s", record, " | ".join(words.lines()[1:]))
        if self._on_failure is not None:
            self._on_failure(record)

    def _record(self, connection: ServerConnection, failure: McpFailure) -> McpServerFailure:
        line = failure_line(connection.config.name, failure)
        words = AgentWords.gather(failure.words, connection.stderr, self._mask)
        # dsh.log: the line, the server's own words (masked), the exception type; never on the screen.
        _log.warning("%s; %s", line, self._mask(" | ".join(words.lines()[1:])) or "no words")
        return McpServerFailure(line, words, cause=failure.cause)

    def status(self) -> list[ServerStatus]:
        rows: list[ServerStatus] = []
        for name, config in self.configs.items():
            connection = self._connections.get(name)
            if not config.enabled:
                rows.append(ServerStatus(name, "disabled"))
            elif self._sdk_missing:
                rows.append(ServerStatus(name, "failed", line=MISSING_EXTRA))
            elif connection is None:
                rows.append(ServerStatus(name, "starting" if not self._loaded.is_set() else "stopped"))
            elif connection.state == "failed" and connection.failure is not None:
                rows.append(ServerStatus(name, "failed", line=failure_line(name, connection.failure)))
            else:
                count = len(self._server_specs(name)) if connection.state == "ready" else 0
                rows.append(ServerStatus(name, connection.state, tools=count))
        return rows

    async def wait_ready(self) -> None:
        """Wait for the servers still starting: each settles (ready or failed) by its own deadline, its
        startup_timeout counted from its start, so after this no server is left "starting" (a turn then sees
        a hung server's failure, not a server that looks slow); and for the re-listing of a server that said its
        tools changed, so the turn's requests carry the list the server now has."""
        await self._loaded.wait()
        async with anyio.create_task_group() as group:
            for connection in self._connections.values():
                if not connection.settled.is_set():
                    group.start_soon(self._wait_one, connection)
                elif connection.relisting is not None:
                    group.start_soon(self._wait_relisted, connection.relisting, connection.config.startup_timeout)

    @staticmethod
    async def _wait_one(connection: ServerConnection) -> None:
        # The connection fails itself at its deadline; this bound is only a backstop against a bug there,
        # never what decides (a timer of its own here raced the connection's and could wake first).
        with anyio.move_on_after(connection.deadline - anyio.current_time() + _SETTLE_BACKSTOP):
            await connection.settled.wait()

    @staticmethod
    async def _wait_relisted(relisting: anyio.Event, timeout: float) -> None:
        # A server that said its tools changed: the turn gets the new list. The re-listing has the server's
        # startup_timeout (it fails itself then, keeping the last good list); this bound is a backstop.
        with anyio.move_on_after(timeout + _SETTLE_BACKSTOP):
            await relisting.wait()

    # --- tools ----------------------------------------------------------------------------------

    def specs(self) -> list[McpToolSpec]:
        """Every ready server's allowed tools, named uniquely in config order (deterministic)."""
        if self._specs is None:
            taken: set[str] = set()
            specs: list[McpToolSpec] = []
            for name, connection in self._connections.items():
                if connection.state != "ready":
                    continue
                config = connection.config
                # A description and a schema go to the model as they are: masked like a tool result.
                offered = offer((tool for tool in connection.tools if config.tool_allowed(tool.name)), self._mask)
                names = tool_names(name, [tool.name for tool, _, _ in offered.kept], taken)
                for (tool, description, schema), dsh_name in zip(offered.kept, names, strict=True):
                    specs.append(McpToolSpec(name, tool.name, dsh_name, description, schema, read_only=tool.read_only))
                self._say_left_out(name, offered.line(name))
            self._specs = specs
        return self._specs

    def _say_left_out(self, server: str, line: str | None) -> None:
        """What a server's listing lost to the limits, said once per listing that changes it."""
        if line is not None and self._left_out_said.get(server) != line:
            _log.warning("%s", line)
            self._notice(line)
        self._left_out_said[server] = line

    def _server_specs(self, name: str) -> list[McpToolSpec]:
        return [spec for spec in self.specs() if spec.server == name]

    def tools(self) -> list[Tool]:
        return [build_tool(spec, self._call, auto=self._auto(spec.server)) for spec in self.specs()]

    def _auto(self, server: str) -> Callable[[], bool]:
        return lambda: self.allow_mcp or self.configs[server].approve == "auto"

    async def _call(self, spec: McpToolSpec, arguments: dict[str, Any]) -> ToolOutput:
        connection = self._connections.get(spec.server)
        if connection is None:
            return ToolOutput(f"Error: the MCP server {spec.server} is not running", is_error=True)
        try:
            result = await connection.call(spec.tool, arguments, connection.config.call_timeout)
        except CallFailed as exc:
            record = self._record(connection, exc.failure)
            if self._on_failure is not None:
                self._on_failure(record)
            line = str(record)
            return ToolOutput(f"Error: the MCP server {spec.server} failed the call\n{line}", is_error=True,
                              diagnostic=line, cause=record)
        return format_result(result)
