"""The ``skill`` tool: the model reads one skill's instructions, by name (agent_loop/skills.py; docs/extending.md).

Registered only when the session has skills, so a session without any sends the same tool list as before. The
body is read when called, by the rules every skill file is read by (agent_loop/extension_files.py), and the
agent's redactor masks it as any tool output is masked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsh.agent_loop.extension_files import LeftOut
from dsh.agent_loop.front_matter import fold_line
from dsh.agent_loop.skills import Skill, load_body
from dsh.agent_loop.tools.registry import Tool, ToolContext, ToolOutput, arguments_schema, param

__all__ = ["SKILL_TOOL", "skill_tools"]

SKILL_TOOL = "skill"


def skill_tools(skills: Sequence[Skill]) -> list[Tool]:
    """``[skill tool]`` over ``skills``; ``[]`` when there are none."""
    if not skills:
        return []
    by_name = {skill.name: skill for skill in skills}

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        name = args.get("name")
        skill = by_name.get(name) if isinstance(name, str) else None
        if skill is None:
            asked = fold_line(name, 64) if isinstance(name, str) else "(none)"
            return ToolOutput(f"no skill {asked!r}; the skills are: {', '.join(by_name)}", is_error=True)
        try:
            text, _ = load_body(skill, ctx.redact)
        except LeftOut as why:
            return ToolOutput(f"skill {skill.name} could not be read: {why}", is_error=True)
        return ToolOutput(text)

    return [Tool(
        SKILL_TOOL,
        "Read the instructions of one of the skills listed in the system prompt, by its name. Call it when a task "
        "matches a skill's description, before you start the task.",
        arguments_schema({"name": param("string", "the skill's name, as listed")}, "name"),
        run,
        concurrency_safe=True,
    )]
