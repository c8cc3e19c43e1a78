"""Agent Skills: ``NAME/SKILL.md`` folders, listed in the system prompt by name and description only.

A skill is a folder holding a ``SKILL.md``: front matter with ``name`` and ``description`` (the Agent Skills
format), then the instructions. :func:`find_skills` reads the folders of skills (``.agents/skills/`` and
``.claude/skills/`` at the repository's root, then the user's ``$XDG_CONFIG_HOME/dsh/skills/``) through
agent_loop/extension_files.py, which reads them as ``AGENTS.md`` is read. Only each skill's name and one-line
description join the system prompt, as one block in a fixed order (:func:`skills_block`), so the prompt's
prefix, and the endpoint's prompt cache, stay the same when a skill is used; the body is read when the model
calls the ``skill`` tool (agent_loop/tools/skill.py) or the user types ``/skill NAME`` (:func:`load_body`).
See docs/extending.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.extension_files import NAME_PATTERN, Folder, LeftOut, read_each, read_inside
from dsh.agent_loop.front_matter import FrontMatter, FrontMatterError, fold_line, split_front_matter
from dsh.llm.redact import MASK, Redactor

__all__ = ["SKILL_FILE", "Skill", "find_skills", "load_body", "skills_block"]

SKILL_FILE = "SKILL.md"
DESCRIPTION_CHARS = 1024  # the Agent Skills format's own bound on a description

SKILLS_HEADER = """\
# Skills

Each skill below is a set of instructions for one kind of task. When a task matches a skill's \
description, call the skill tool with the skill's name to read its instructions before you start."""


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str  # one safe line, secrets masked
    path: Path  # its SKILL.md
    folder: Folder  # the folder of skills it was found in
    body_tokens: int  # estimated from the file's size: what loading it costs

    @property
    def line(self) -> str:
        """Its line in the system prompt."""
        return f"- {self.name}: {self.description}"


def find_skills(folders: Sequence[Folder], redactor: Redactor) -> tuple[list[Skill], list[str]]:
    """The skills of ``folders`` (earlier folders win a name), sorted by name; and one line per file left out."""
    notices: list[str] = []
    found: dict[str, Skill] = {}
    for path, skill in read_each(folders, notices, _skill_file,
                                 lambda path, entry, folder: _read_skill(path, folder, entry.name, redactor)):
        earlier = found.get(skill.name)
        if earlier is not None:
            notices.append(f"{path} left out: the skill {skill.name} is read from {earlier.path}")
            continue
        found[skill.name] = skill
    return sorted(found.values(), key=lambda skill: skill.name), notices


def _skill_file(entry: os.DirEntry[str]) -> Path | None:
    """A skill's folder's ``SKILL.md``."""
    return Path(entry.path) / SKILL_FILE if entry.is_dir() else None


def _read_skill(path: Path, folder: Folder, folder_name: str, redactor: Redactor) -> Skill | None:
    text = read_inside(path, folder)
    if text is None:
        return None  # a folder without a SKILL.md (scripts, assets): not a skill
    try:
        front, body = split_front_matter(text)
    except FrontMatterError as exc:
        raise LeftOut(f"its front matter is not valid ({exc})") from None
    name = _text_field(front, "name") or folder_name
    if not NAME_PATTERN.fullmatch(name):
        raise LeftOut("its name is not a skill name (letters, digits, '.', '_', '-'; at most 64)")
    description = redactor(fold_line(_text_field(front, "description"), DESCRIPTION_CHARS))
    if not description:
        raise LeftOut("its front matter has no description")
    return Skill(name, description, path, folder, body_tokens=(len(body.encode()) + 3) // 4)


def _text_field(front: FrontMatter, key: str) -> str:
    value = front.get(key, "")
    if not isinstance(value, str):
        raise LeftOut(f"its front matter's {key} is not a string")
    return value.strip()


def skills_block(skills: Sequence[Skill]) -> str:
    """The system prompt's block of skills: the same bytes for the same skills, used or not ("" for none)."""
    if not skills:
        return ""
    return "\n".join([SKILLS_HEADER, "", *(skill.line for skill in skills)])


def load_body(skill: Skill, redactor: Redactor) -> tuple[str, bool]:
    """The skill's instructions as the model is sent them (its folder named: the files it mentions are there),
    and whether secrets were masked. Read now, by the same rules; raises :class:`LeftOut`."""
    text = read_inside(skill.path, skill.folder)
    if text is None:
        raise LeftOut("it is gone")
    try:
        _, body = split_front_matter(text)
    except FrontMatterError as exc:
        raise LeftOut(f"its front matter is not valid ({exc})") from None
    masked = redactor(body.strip("\n"))
    head = f"# Skill {skill.name} (its folder: {fold_line(str(skill.path.parent), 4096)})"
    return f"{head}\n\n{masked}", MASK in masked and masked != body.strip("\n")
