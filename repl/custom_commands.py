"""The REPL's side of skills and custom slash commands: ``/skill``, ``/NAME``, their ``/help`` and ``/context`` lines.

The session finds them (agent_loop/extensions.py); here the front end decides which custom commands it keeps: a
file named like a built-in command never shadows it, and one line names the file skipped, once per session
(:func:`table`). ``/skill NAME [request]`` sends the skill's instructions as the turn's prompt, the request after
them, as Claude Code does when a skill is invoked by name: the body is sent, not printed, and one line says which
skill was loaded and what it cost. See docs/extending.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from dsh.agent_loop.commands_files import CustomCommand, expand
from dsh.agent_loop.extension_files import LeftOut
from dsh.agent_loop.extensions import Extensions
from dsh.agent_loop.front_matter import fold_line
from dsh.agent_loop.skills import load_body
from dsh.agent_loop.usage import estimate_tokens
from dsh.repl.host import Host
from dsh.repl.usage import compact_count

if TYPE_CHECKING:
    from dsh.agent_loop.reasons import EndReason

__all__ = ["NO_SKILLS", "completions", "context_lines", "help_lines", "run_custom", "run_skill", "skill_names", "table"]

NO_SKILLS = "no skills (folders: .agents/skills/, .claude/skills/, ~/.config/dsh/skills/; docs/extending.md)"

# The commands the front end keeps of each session's catalogue, by name; the skipped lines were said when the
# entry was made. Weak: a catalogue dropped with its session is forgotten here too.
_TABLES: WeakKeyDictionary[Extensions, dict[str, CustomCommand]] = WeakKeyDictionary()


def table(host: Host, builtins: Collection[str]) -> dict[str, CustomCommand]:
    """The custom commands ``/NAME`` runs: the session's, less those named like a built-in (one line each, once)."""
    extensions = host.session.extensions()
    kept = _TABLES.get(extensions)
    if kept is None:
        kept = {}
        for command in extensions.commands:
            if command.name.lower() in builtins:
                host.say(f"[context] {command.path} skipped: /{command.name} is a built-in command")
            else:
                kept[command.name] = command
        _TABLES[extensions] = kept
    return kept


async def run_custom(host: Host, builtins: Collection[str], name: str, arguments: str) -> EndReason | None:
    """``/NAME arguments`` when a custom command has that name: its turn; None (nothing ran) when none has."""
    command = table(host, builtins).get(name)
    if command is None:
        return None
    return await host.run_turn(expand(command, arguments))


def skill_names(host: Host) -> list[tuple[str, str]]:
    """Each skill's name and description: ``/skill``'s completion."""
    return [(skill.name, skill.description) for skill in host.session.extensions().skills]


async def run_skill(host: Host, arg: str) -> EndReason | None:
    """``/skill`` lists the skills; ``/skill NAME [request]`` runs a turn with its instructions, the request after."""
    name, _, request = arg.partition(" ")
    extensions = host.session.extensions()
    if not name:
        width = max((len(skill.name) for skill in extensions.skills), default=0)
        lines = [f"  {skill.name:<{width}}  {skill.description}" for skill in extensions.skills]
        host.say("\n".join(["skills (/skill NAME [request] sends one's instructions):", *lines]) if lines
                 else NO_SKILLS)
        return None
    skill = extensions.skill(name)
    if skill is None:
        near = difflib.get_close_matches(name, [skill.name for skill in extensions.skills], n=1, cutoff=0.6)
        hint = f": did you mean {near[0]}?" if near else ""
        host.say(f"no skill {fold_line(name, 40)!r}{hint} (/skill lists them)")
        return None
    try:
        body, masked = load_body(skill, host.session.ensure_agent().redactor)
    except LeftOut as why:
        host.say(f"[context] {skill.path} left out: {why}")
        return None
    sent = " with secrets masked" if masked else ""
    host.say(f"skill {skill.name}: its instructions (≈{compact_count(estimate_tokens(body))} tokens) are sent with "
             f"this prompt{sent}")
    request = request.strip()
    return await host.run_turn(f"{body}\n\n{request}" if request else body)


def help_lines(host: Host, builtins: Collection[str]) -> list[str]:
    """``/help``'s lines for the custom commands (none when there are none)."""
    commands = table(host, builtins)
    if not commands:
        return []
    lines = ["custom commands (docs/extending.md):"]
    for command in commands.values():
        usage = f"/{command.name}" + (f" {command.argument_hint}" if command.argument_hint else "")
        summary = command.description or f"(from {command.source})"
        lines.append(f"  {usage:<18} {summary}")
    return lines


def completions(host: Host, builtins: Collection[str], typed: str) -> list[tuple[str, str]]:
    """The custom commands whose name starts with ``typed``, with their descriptions, for the completion menu."""
    return [(name, command.description) for name, command in table(host, builtins).items() if name.startswith(typed)]


def context_lines(host: Host) -> list[str]:
    """``/context``'s lines for the skills: each one's line in the prompt, and its body when used."""
    skills = host.session.extensions().skills
    if not skills:
        return []
    width = max(len(skill.name) for skill in skills)
    lines = ["skills (each one's line is in every request; its instructions only when used):"]
    for skill in skills:
        lines.append(f"  {skill.name:<{width}}  ≈ {compact_count(estimate_tokens(skill.line))} in the prompt, "
                     f"≈ {compact_count(skill.body_tokens)} when used")
    return lines
