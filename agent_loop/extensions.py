"""What a project and the user add to dsh from files: skills and custom slash commands, found once per session.

:func:`discover_extensions` lists the folders (stat calls and reads of small files only) when the session first
needs them, behind the first prompt, never at import (docs/performance.md). The repository's root is found as
``AGENTS.md`` discovery finds it (agent_loop/project.py: the git work tree, else the working directory); the
user's folders are under dsh's config directory. See docs/extending.md for the folders and their precedence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.commands_files import CustomCommand, find_commands
from dsh.agent_loop.extension_files import Folder
from dsh.agent_loop.project import find_git_dir
from dsh.agent_loop.skills import Skill, find_skills, skills_block
from dsh.llm.redact import Redactor

__all__ = ["Extensions", "discover_extensions"]

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
    found = find_git_dir(cwd)
    root, root_name = (found[0], "the repository") if found is not None else (cwd, "the working directory")

    def folders(dsh_name: str | None, claude: str, kind: str) -> list[Folder]:
        chosen = [Folder(root / dsh_name / kind, root, root_name, f"{dsh_name}/{kind}")] if dsh_name else []
        chosen.append(Folder(root / claude / kind, root, root_name, f"{claude}/{kind}"))
        if user_dir is not None:
            chosen.append(Folder(user_dir / kind, user_dir, USER_ROOT_NAME, "user"))
        return chosen

    skills, skill_notices = find_skills(folders(".agents", ".claude", "skills"), redactor)
    commands, command_notices = find_commands(folders(".dsh", ".claude", "commands"), redactor)
    return Extensions(tuple(skills), tuple(commands), (*skill_notices, *command_notices))
