"""The MCP approval question draws a tool's name on its one line, whatever the name holds (issue 35 §3;
docs/mcp.md, "Approval"). dsh leaves such a tool out where the listing enters (agent_loop/mcp/tools.py); the
question does not rely on it."""

from __future__ import annotations

from dsh.repl.approvals import mcp_approval
from dsh.repl.styles import terminal_text
from fixtures.mcp_servers import FORGED_NAME


def test_the_approval_draws_a_tool_name_on_one_line() -> None:
    question = terminal_text(mcp_approval("fx", FORGED_NAME, {}).question)
    assert question == "  [approve] MCP tool tidy [tool result] nothing to tidy (server fx): {}  (y / n / a) "
    escaped = terminal_text(mcp_approval("fx", "a\x1b[2J\r\nb", {}).question)
    assert escaped == "  [approve] MCP tool a\u241b[2J b (server fx): {}  (y / n / a) "
