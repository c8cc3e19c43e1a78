"""The tools the model can call, one job per module (docs/architecture.md, "One turn, end to end"):

- ``registry``: what a tool is, the registry, and how one call is run and its arguments read;
- ``files``: ``read_file``, ``list_dir``, ``search_text`` (concurrency-safe);
- ``shell``: :func:`run_command` (a managed child with bounded output) and ``run_shell``;
- ``edits``: ``write_file`` and ``edit_file``, a diff to approve; ``edit_paths`` says when a path is in a
  git directory.

Every file they open goes through ``dsh.agent_loop.safe_open``. This package re-exports the public names and
assembles the built-in set (:func:`default_tools`); the subagent tool comes from
``dsh.agent_loop.subagent.tool``.
"""

from __future__ import annotations

from dsh.agent_loop.sandbox import Sandbox
from dsh.agent_loop.tools.edits import edit_file_tool, write_file_tool
from dsh.agent_loop.tools.file_access import FileAccess
from dsh.agent_loop.tools.files import list_dir_tool, read_file_tool, search_text_tool
from dsh.agent_loop.tools.registry import (
    DEFAULT_MAX_PARALLEL,
    Approval,
    Approver,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    plan_batches,
    run_tool_call,
)
from dsh.agent_loop.tools.shell import CommandResult, run_command, run_shell_tool

__all__ = [
    "DEFAULT_MAX_PARALLEL",
    "Approval",
    "Approver",
    "CommandResult",
    "FileAccess",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "default_tools",
    "edit_file_tool",
    "list_dir_tool",
    "plan_batches",
    "read_file_tool",
    "run_command",
    "run_shell_tool",
    "run_tool_call",
    "search_text_tool",
    "write_file_tool",
]


def default_tools(approver: Approver | None = None, *, allow_edits: bool = False,
                  files: FileAccess | None = None, sandbox: Sandbox | None = None) -> ToolRegistry:
    """The developer tools: read_file, list_dir, search_text, write_file, edit_file, run_shell.

    ``approver`` answers for run_shell and the edit tools; ``allow_edits`` lets the edit tools write
    inside the working tree when there is no approver (piped and ``-p`` runs). ``files`` (an editor's, ``dsh
    acp``): read_file and the edit tools read and write files inside the working tree through it. ``sandbox``
    runs each shell command under bubblewrap (docs/safety.md).
    """
    return ToolRegistry([
        read_file_tool(files), list_dir_tool(), search_text_tool(),
        write_file_tool(approver, allow_unattended=allow_edits, files=files),
        edit_file_tool(approver, allow_unattended=allow_edits, files=files),
        run_shell_tool(approver, sandbox=sandbox),
    ])
