"""``dsh`` with the ``subagent`` tool wired in, the way the REPL's extension seam is meant to be used.

``python tests/reliability/dsh_with_subagents.py ARGS...`` is ``python -m repl ARGS...`` plus a tool factory
(``dsh.repl.shell.register_tool_factory``) that builds the ``[subagents.NAME]`` tables of the config into the
``subagent`` and job tools (``dsh.agent_loop.subagent.tool.SubagentToolkit``). The reliability suite uses it to
drive real subagent runs through the real REPL while the REPL's own wiring is being finished; once the REPL
registers the toolkit itself, this registration simply replaces its tools with equal ones.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dsh.agent_loop.subagent import ParentContext
from dsh.agent_loop.subagent.tool import SubagentToolkit
from dsh.repl.shell import register_tool_factory


def _subagent_tools(config, shell):  # type: ignore[no-untyped-def]
    if not config.subagents:
        return []
    parent = ParentContext(model=config.model, base_url=config.base_url, api_key=config.api_key, cwd=os.getcwd())
    return SubagentToolkit.from_config(config.subagents, parent).tools()


if __name__ == "__main__":
    register_tool_factory(_subagent_tools)
    from dsh.repl.cli import main

    main(sys.argv[1:])
