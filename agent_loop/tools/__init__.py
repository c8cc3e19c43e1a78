"""The tools the model can call, one job per module (docs/architecture.md, "One turn, end to end"):

- ``registry``: what a tool is, the registry, and how one call is run and its arguments read;
- ``files``: ``read_file``, ``list_dir`` (concurrency-safe);
- ``search``: ``glob`` and ``search_text`` over the files git lists (concurrency-safe);
- ``shell``: :func:`run_command` (a managed child with bounded output) and ``run_shell``;
- ``edits``: ``write_file`` and ``edit_file``, a diff to approve; ``edit_paths`` says when a path is in a
  git directory.
- ``plan``: ``todo_write``, the plan the model keeps (``dsh.agent_loop.plan``).

Every file they open goes through ``dsh.agent_loop.safe_open``. This package re-exports the public names and
assembles the built-in set (:func:`default_tools`); the subagent tool comes from
``dsh.agent_loop.subagent.tool``.
"""

from __future__ import annotations

from dsh.agent_loop.sandbox import Sandbox
from dsh.agent_loop.tools.edits import edit_file_tool, write_file_tool
from dsh.agent_loop.tools.file_access import FileAccess
from dsh.agent_loop.tools.files import list_dir_tool, read_file_tool
from dsh.agent_loop.tools.plan import todo_write_tool
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
from dsh.agent_loop.tools.search import glob_tool, search_text_tool
from dsh.agent_loop.tools.shell import CommandResult, run_command, run_shell_tool
from dsh.agent_loop.tools.web import WebSettings, web_tools

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
    "WebSettings",
    "default_tools",
    "edit_file_tool",
    "glob_tool",
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
                  files: FileAccess | None = None, sandbox: Sandbox | None = None,
                  web: WebSettings | None = None) -> ToolRegistry:
    """The developer tools: read_file, list_dir, glob, search_text, write_file, edit_file, run_shell, todo_write.

    ``approver`` answers for run_shell and the edit tools; ``allow_edits`` lets the edit tools write
    inside the working tree when there is no approver (piped and ``-p`` runs). ``files`` (an editor's, ``dsh
    acp``): read_file and the edit tools read and write files inside the working tree through it. ``sandbox``
    runs each shell command under bubblewrap (docs/safety.md). ``web``: web_fetch too (docs/tools.md).
    """
    return ToolRegistry([
        read_file_tool(files), list_dir_tool(), glob_tool(), search_text_tool(),
        write_file_tool(approver, allow_unattended=allow_edits, files=files),
        edit_file_tool(approver, allow_unattended=allow_edits, files=files),
        run_shell_tool(approver, sandbox=sandbox),
        todo_write_tool(),  # the plan: changes no file, so every permission mode runs it
        *(web_tools(web, approver) if web is not None else ()),
    ])
