"""Tools from MCP servers (``[mcp_servers.NAME]``): configuration, the client on the official SDK, the
manager a session owns, the tools the model sees, and the failure line (docs/mcp.md, DESIGN §8).

Importing this package does not import the SDK: :mod:`dsh.agent_loop.mcp.client` and
:mod:`dsh.agent_loop.mcp.stdio` do, and the manager imports them only when a server starts.
"""

from dsh.agent_loop.mcp.config import McpConfigError, McpServerConfig, parse_servers
from dsh.agent_loop.mcp.diagnostics import Category, McpFailure, McpServerFailure, Stage, failure_line
from dsh.agent_loop.mcp.manager import McpManager, ServerStatus
from dsh.agent_loop.mcp.tools import MCP_DENIED, MCP_NO_APPROVER, McpCallRequest

__all__ = [
    "MCP_DENIED",
    "MCP_NO_APPROVER",
    "Category",
    "McpCallRequest",
    "McpConfigError",
    "McpFailure",
    "McpManager",
    "McpServerConfig",
    "McpServerFailure",
    "ServerStatus",
    "Stage",
    "failure_line",
    "parse_servers",
]
