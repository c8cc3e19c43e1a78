"""Custom slash commands from files: ``/NAME args`` sends ``NAME.md``'s body with the arguments put in.

Claude Code's format: a Markdown file per command, its name the file's name, optional front matter
(``description``, ``argument-hint``), and a body where ``$ARGUMENTS`` is the whole argument text and ``$1``,
``$2`` ... the words of it. :func:`find_commands` reads the folders in precedence order (``.dsh/commands/``,
then ``.claude/commands/`` at the repository's root, then the user's ``$XDG_CONFIG_HOME/dsh/commands/``): the
first file of a name wins and each later one gets a line. Files are read as ``AGENTS.md`` is
(agent_loop/extension_files.py). Which names the front end keeps for its own commands is its business
(repl/custom_commands.py). See docs/extending.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.extension_files import NAME_PATTERN, SUFFIX, Folder, LeftOut, markdown_files, read_each, read_inside
from dsh.agent_loop.front_matter import FrontMatterError, fold_line, split_front_matter
from dsh.llm.redact import MASK, Redactor

__all__ = ["CustomCommand", "expand", "find_commands"]

_SUMMARY_CHARS = 200  # a description in /help and the completion menu
_PLACEHOLDER = re.compile(r"\$(ARGUMENTS|[1-9][0-9]?)")


@dataclass(frozen=True, slots=True)
class CustomCommand:
    name: str
    description: str  # one safe line ("" when the file has none)
    argument_hint: str  # one safe line, e.g. "[pr-number]"
    body: str  # secrets masked
    path: Path
    source: str  # the folder's name for a line: ".dsh/commands", ".claude/commands", "user"
    masked: bool = False  # the body had secrets masked


def find_commands(folders: Sequence[Folder], redactor: Redactor) -> tuple[list[CustomCommand], list[str]]:
    """The commands of ``folders`` (earlier folders win a name), sorted by name; and one line per file left out."""
    notices: list[str] = []
    found: dict[str, CustomCommand] = {}
    for path, command in read_each(folders, notices, markdown_files,
                                   lambda path, entry, folder: _named_command(path, folder, redactor)):
        earlier = found.get(command.name)
        if earlier is not None:
            notices.append(f"{path} skipped: /{command.name} is read from {earlier.path}")
            continue
        found[command.name] = command
        if command.masked:
            notices.append(f"{path} read with secrets masked ({MASK})")
    return sorted(found.values(), key=lambda command: command.name), notices


def _named_command(path: Path, folder: Folder, redactor: Redactor) -> CustomCommand | None:
    name = path.name[: -len(SUFFIX)]
    if not NAME_PATTERN.fullmatch(name):
        raise LeftOut("its name is not a command name (letters, digits, '.', '_', '-'; at most 64)")
    return _read_command(path, name, folder, redactor)


def _read_command(path: Path, name: str, folder: Folder, redactor: Redactor) -> CustomCommand | None:
    text = read_inside(path, folder)
    if text is None:
        return None
    try:
        front, body = split_front_matter(text)
    except FrontMatterError as exc:
        raise LeftOut(f"its front matter is not valid ({exc})") from None
    fields = {}
    for key in ("description", "argument-hint"):
        value = front.get(key, "")
        if not isinstance(value, str):
            raise LeftOut(f"its front matter's {key} is not a string")
        fields[key] = redactor(fold_line(value, _SUMMARY_CHARS))
    body = body.strip("\n")
    masked = redactor(body)
    return CustomCommand(name, fields["description"], fields["argument-hint"], masked, path, folder.source,
                         masked=masked != body)


def expand(command: CustomCommand, arguments: str) -> str:
    """The prompt ``/NAME arguments`` sends: ``$ARGUMENTS`` the whole text, ``$N`` its N-th word (empty when there
    is none), replaced in one pass (an argument that spells ``$1`` stays as typed). A body that names neither
    gets the arguments after it, on a line ``ARGUMENTS: ...``, so they are not lost."""
    words = arguments.split()

    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "ARGUMENTS":
            return arguments
        index = int(key) - 1
        return words[index] if index < len(words) else ""

    if _PLACEHOLDER.search(command.body) is None:
        return f"{command.body}\n\nARGUMENTS: {arguments}" if arguments else command.body
    return _PLACEHOLDER.sub(value, command.body)
