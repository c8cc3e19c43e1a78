"""Tools from MCP servers (``[mcp_servers.NAME]``): configuration, the client on the official SDK, the
manager a session owns, the tools the model sees, and the failure line (docs/mcp.md).

The public names load on first use, like the package roots': reading the configuration (which the config
file's check does before the first prompt) loads neither the manager nor the SDK. The SDK itself is imported
only by :mod:`dsh.agent_loop.mcp.client` and :mod:`dsh.agent_loop.mcp.stdio`, when a server starts.
"""

from __future__ import annotations

from dsh.llm._exports import lazy_getattr

TYPE_CHECKING = False  # not typing.TYPE_CHECKING, which would cost every importer `typing`
if TYPE_CHECKING:
    from dsh.agent_loop.mcp.config import McpServerConfig, parse_servers
    from dsh.agent_loop.mcp.diagnostics import Category, McpFailure, McpServerFailure, Stage, failure_line
    from dsh.agent_loop.mcp.manager import McpManager, ServerStatus
    from dsh.agent_loop.mcp.tools import MCP_DENIED, MCP_NO_APPROVER, McpCallRequest

# module -> the names this package exports from it, loaded on first use (tests/test_package_exports.py)
_EXPORTS = {
    "dsh.agent_loop.mcp.config": "McpServerConfig parse_servers",
    "dsh.agent_loop.mcp.diagnostics": "Category McpFailure McpServerFailure Stage failure_line",
    "dsh.agent_loop.mcp.manager": "McpManager ServerStatus",
    "dsh.agent_loop.mcp.tools": "MCP_DENIED MCP_NO_APPROVER McpCallRequest",
}

__all__ = [
    "MCP_DENIED",
    "MCP_NO_APPROVER",
    "Category",
    "McpCallRequest",
    "McpFailure",
    "McpManager",
    "McpServerConfig",
    "McpServerFailure",
    "ServerStatus",
    "Stage",
    "failure_line",
    "parse_servers",
]

if not TYPE_CHECKING:  # hidden from the type checker, so that a name not exported here is an error there
    __getattr__ = lazy_getattr(globals(), _EXPORTS)
