"""What a project and the user add to dsh from files: skills and custom slash commands, found once per session.

:func:`discover_extensions` lists the folders (stat calls and reads of small files only) when the session first
needs them, behind the first prompt, never at import (docs/performance.md). The repository's root is found as
``AGENTS.md`` discovery finds it (agent_loop/project.py: the git work tree, else the working directory); the
user's folders are under dsh's config directory. See docs/extending.md for the folders and their precedence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.agent_loop.agent_files import AgentFile, find_agents
from dsh.agent_loop.commands_files import CustomCommand, find_commands
from dsh.agent_loop.extension_files import Folder
from dsh.agent_loop.git_root import find_git_dir
from dsh.agent_loop.skills import Skill, find_skills, skills_block
from dsh.llm.redact import Redactor

__all__ = ["Extensions", "discover_agents", "discover_extensions"]

USER_ROOT_NAME = "dsh's config directory"


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity (the REPL remembers what it said per catalogue)
class Extensions:
    skills: tuple[Skill, ...] = ()
    commands: tuple[CustomCommand, ...] = ()
    notices: tuple[str, ...] = ()  # one line each: a file left out, a name read twice

    @property
    def prompt_block(self) -> str:
        return skills_block(self.skills)

    def skill(self, name: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.name == name), None)


def discover_extensions(cwd: Path, user_dir: Path | None, redactor: Redactor) -> Extensions:
    """The skills and commands for a session in ``cwd``; ``user_dir`` is ``$XDG_CONFIG_HOME/dsh`` (None: none)."""
    root = _root(cwd)
    skills, skill_notices = find_skills(_folders(root, user_dir, ".agents", "skills"), redactor)
    commands, command_notices = find_commands(_folders(root, user_dir, ".dsh", "commands"), redactor)
    return Extensions(tuple(skills), tuple(commands), (*skill_notices, *command_notices))


def discover_agents(cwd: Path, user_dir: Path | None, configured: Mapping[str, Mapping[str, Any]],
                    redactor: Redactor) -> tuple[list[AgentFile], list[str]]:
    """The subagents defined in files for a session in ``cwd`` (agent_loop/agent_files.py), none of the names of
    the ``configured`` tables; and one line per file left out or skipped. Read when the subagent toolkit opens."""
    return find_agents(_folders(_root(cwd), user_dir, ".dsh", "agents"), configured, redactor)


def _root(cwd: Path) -> tuple[Path, str]:
    """The repository's root and how a line names it, found as for ``AGENTS.md``."""
    found = find_git_dir(cwd)
    return (found[0], "the repository") if found is not None else (cwd, "the working directory")


def _folders(at: tuple[Path, str], user_dir: Path | None, dsh_name: str, kind: str) -> list[Folder]:
    """``dsh_name/kind`` and ``.claude/kind`` at the repository's root, then the user's ``kind``, in that order."""
    root, root_name = at
    chosen = [Folder(root / dsh_name / kind, root, root_name, f"{dsh_name}/{kind}"),
              Folder(root / ".claude" / kind, root, root_name, f".claude/{kind}")]
    if user_dir is not None:
        chosen.append(Folder(user_dir / kind, user_dir, USER_ROOT_NAME, "user"))
    return chosen
