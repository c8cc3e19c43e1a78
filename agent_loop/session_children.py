"""The children a session starts: the subagent toolkit and the MCP servers, held open until the session closes.

Each is made only when it has tables (``[subagents.NAME]``, ``[mcp_servers.NAME]``, or a front end's own), by
:mod:`dsh.agent_loop.build`, imported then: the interactive front end draws its first prompt without them
(docs/architecture.md, "Start-up and lazy imports"). The JSON-RPC frames of every child they start go to one
:class:`~dsh.agent_loop.frames.FrameLog`, which ``/report`` reads (docs/reporting.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dsh.agent_loop.events import JobNotice
from dsh.agent_loop.session_config import SessionConfig

if TYPE_CHECKING:
    from dsh.agent_loop.frames import FrameLog
    from dsh.agent_loop.mcp import McpManager
    from dsh.agent_loop.mcp.config import McpServerConfig
    from dsh.agent_loop.subagent.tool import SubagentToolkit
    from dsh.agent_loop.tools import ToolRegistry

__all__ = ["SessionChildren"]

# A settled job's notice in the user's words, and its raw cause: build.settled_notice, bound with the toolkit.
Settle = Callable[["SubagentToolkit", JobNotice], tuple[JobNotice, BaseException | None]]
# The subagents agent files define, as tables, given the configured tables (SessionExtensions.agent_tables).
AgentFiles = Callable[[Mapping[str, Mapping[str, Any]]], Mapping[str, Mapping[str, Any]]]


class SessionChildren:
    """A session's :attr:`toolkit` (the subagent and job tools), its :attr:`mcp` manager and their :attr:`frames`."""

    def __init__(self, config: SessionConfig, *, env: Mapping[str, str],
                 subagent_tables: Mapping[str, Mapping[str, Any]] | None, parent_base_url: str | None,
                 mcp_tables: Mapping[str, Mapping[str, Any]] | None, allow_mcp: bool,
                 notice: Callable[[str], None], on_failure: Callable[[BaseException], None],
                 agent_files: AgentFiles | None = None) -> None:
        """``notice`` says a line about them (a hint, a server's state); ``on_failure`` hears an MCP server's;
        ``agent_files`` gives the tables of the subagents defined in files, the configured ones' names excepted."""
        self._config = config
        self._env = env
        self._subagent_tables = {**(subagent_tables or {}), **config.subagents}
        self._agent_files = agent_files
        self._parent_base_url = parent_base_url or config.base_url
        # A front end's ``[mcp_servers.NAME]``-shaped tables, read beside the config's servers (read at load)
        # when the manager is opened.
        self._mcp_tables: dict[str, Any] = dict(mcp_tables or {})
        self._allow_mcp = allow_mcp
        self._notice = notice
        self._on_failure = on_failure
        self.toolkit: SubagentToolkit | None = None
        self.mcp: McpManager | None = None
        # The JSON-RPC frames of the children started for this session, as closed facts (/report reads it);
        # made when the first child can start (subagents or MCP servers configured).
        self.frames: FrameLog | None = None
        self._scope = contextlib.AsyncExitStack()  # holds the toolkit and the manager open
        self._settle: Settle | None = None
        self._mcp_opened = False
        self._mcp_secrets: tuple[str, ...] | None = None

    async def open_toolkit(self, *, model: str, cwd: str, request_gate: Callable[[], str | None] | None = None) -> None:
        """``[subagents.NAME]`` tables -> the subagent and job tools, inheriting the session's ``model``, and for a
        child dsh on the session's endpoint its client's ``request_gate`` (dsh.llm.request_gate.shared_gate).
        The subagents agent files define (docs/extending.md) join the configured ones, which win a name."""
        if self._agent_files is not None:
            self._subagent_tables = {**self._subagent_tables, **self._agent_files(self._subagent_tables)}
        if not self._subagent_tables:
            return
        from dsh.agent_loop import build  # heavy: the subagent seam, only when subagents are configured

        self.frames = self.frames or build.FrameLog()
        config = self._config
        same_endpoint = self._parent_base_url == config.base_url
        toolkit = build.subagent_toolkit(self._subagent_tables, model=model, base_url=self._parent_base_url,
                                         api_key=config.api_key, cwd=cwd, secrets=config.secrets, frames=self.frames,
                                         dialect=config.dialect if same_endpoint else None,
                                         max_parallel=config.max_parallel,
                                         request_gate=request_gate if same_endpoint else None)
        self.toolkit = await self._scope.enter_async_context(toolkit)
        self._settle = build.settled_notice  # bound now that build is loaded: no import per settled job
        for hint in toolkit.hints:
            self._notice(hint)

    async def open_mcp(self) -> None:
        """``[mcp_servers.NAME]`` tables -> the MCP manager, its servers starting in the background; once."""
        if self._mcp_opened or not self._has_mcp:
            return
        self._mcp_opened = True
        from dsh.agent_loop import build  # heavy: the MCP manager, only when MCP servers are configured

        self.frames = self.frames or build.FrameLog()
        manager = build.mcp_manager(self._mcp_servers()[0], env=self._env, secrets=self._config.secrets,
                                    notice=self._notice, on_failure=self._on_failure, allow_mcp=self._allow_mcp,
                                    frames=self.frames)
        self.mcp = await self._scope.enter_async_context(manager)

    def mcp_secrets(self) -> tuple[str, ...]:
        """The MCP tables' secrets (a header's ``${VAR}``), known before the manager opens (the agent may be
        built first)."""
        if self._mcp_secrets is None:
            if not self._has_mcp:
                self._mcp_secrets = ()
            else:
                _, self._mcp_secrets = self._mcp_servers()
        return self._mcp_secrets

    def _mcp_servers(self) -> tuple[dict[str, McpServerConfig], tuple[str, ...]]:
        """The config file's servers (read at load), then a front end's tables (an ACP client's ``mcpServers``),
        read now (a SettingsError for a bad one); and the values of theirs to mask."""
        from dsh.agent_loop.mcp.config import parse_servers, secret_values  # only with servers: the reader, no manager

        servers = {**self._config.mcp_servers, **parse_servers(self._mcp_tables)}
        return servers, secret_values(servers.values(), self._env)

    @property
    def _has_mcp(self) -> bool:
        return bool(self._config.mcp_servers or self._mcp_tables)

    async def sync_mcp_tools(self, tools: ToolRegistry) -> None:
        """Before a turn: wait for servers still starting (each at most its startup_timeout), then give the
        agent's ``tools`` those of the ready ones (a failed server's are gone, a changed listing replaces the old)."""
        if self.mcp is None:
            return
        await self.mcp.wait_ready()
        current = {tool.name: tool for tool in self.mcp.tools()}
        for name in tools.names:
            if name.startswith("mcp__") and name not in current:
                tools.remove(name)
        for tool in current.values():
            tools.add(tool, replace=True)

    def settled(self, event: JobNotice) -> tuple[JobNotice, BaseException | None]:
        """A settled job's notice in the user's words (the model keeps the event's own text), and its raw
        cause (/why's, for a failure)."""
        if self.toolkit is None or self._settle is None:
            return event, None
        return self._settle(self.toolkit, event)

    async def aclose(self) -> None:
        """Background jobs and MCP servers end with the session that owns them."""
        self.toolkit = None
        self.mcp = None
        with contextlib.suppress(Exception):
            await self._scope.aclose()
