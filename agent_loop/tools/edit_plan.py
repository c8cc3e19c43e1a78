"""Planning an edit: read the file, check it, build the new bytes, the diff and what the user approves.

The half of agent_loop/tools/edits.py that decides what would be written (its module docstring says what
makes an edit trustworthy); edits.py approves, journals and commits the plan.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dsh.agent_loop.journal import shown_path
from dsh.agent_loop.project import path_dirs_inside, project_root
from dsh.agent_loop.safe_open import NotRegularFile, open_regular
from dsh.agent_loop.sandbox import hooks_path
from dsh.agent_loop.tools.edit_paths import GitArea, git_area
from dsh.agent_loop.tools.files import file_stamp
from dsh.llm.redact import MASK, Redactor

__all__ = [
    "BOM",
    "EDIT_MAX_BYTES",
    "RUN_AREAS",
    "Change",
    "EditRefused",
    "EditRequest",
    "Plan",
    "mask_known",
    "masked_texts",
    "plan_edit",
    "run_area",
    "shown_in_tree",
    "unified_diff",
]

EDIT_MAX_BYTES = 4 * 1024 * 1024  # bigger files are not diffed and rewritten by these tools
BOM = "\ufeff"
_TEXT_ONLY = "write_file and edit_file change only UTF-8 text"


@dataclass(frozen=True, slots=True)
class EditRequest:
    """What the user approves: the tool, the file as shown, and the whole unified diff."""

    tool: str  # "write_file" or "edit_file"
    path: str  # relative to the working tree, or absolute when outside it
    diff: str  # LF-separated unified diff lines
    added: int
    removed: int
    new_file: bool
    outside: bool  # outside the working tree: asked every time, never written unattended
    git: GitArea | None = None  # in a git directory: asked every time, even after "always"; never unattended
    hidden: int = 0  # known secret values masked (``***(N chars)``) on the lines to be written
    # The whole text before (None: a new file) and after, masked as the diff is: what an editor shows as the
    # change (dsh acp's diff content); LF text, as the diff.
    old_text: str | None = field(default=None, compare=False, repr=False)
    new_text: str = field(default="", compare=False, repr=False)

    @property
    def subject(self) -> str:
        """``notes.txt (+1 -1)``, ``new.txt (new file, +3)``, ``/etc/x (+1 -0, outside the working tree)``,
        ``.git/config (+1 -0, git config: can name programs git runs)``."""
        change = f"new file, +{self.added}" if self.new_file else f"+{self.added} -{self.removed}"
        if self.outside:
            change += ", outside the working tree"
        if self.git is not None:
            change += f", {self.git.note}"
        return f"{self.path} ({change})"

    @property
    def may_always(self) -> bool:
        """Whether ``always`` may be offered: never for a git directory, which it would not cover."""
        return self.git is None


class EditRefused(Exception):
    """A planned edit that cannot go ahead; the message is the result the model sees."""


# An edit tool's change: the file's text (None: no such file) -> (its new text, the result line); see plan_edit.
Change = Callable[[str | None], tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Plan:
    target: Path  # the real path (symlinks resolved) that is replaced
    root: Path  # the working tree's real path: a directory that changed is named relative to it
    shown: str
    before: tuple[int, int] | None  # the stamp the plan was made from; None for a new file
    mode: int | None  # the existing file's permission bits
    owner: tuple[int, int] | None  # and its owner and group
    data: bytes
    request: EditRequest
    done: str  # the result text once written
    unchanged: bool = False  # the file already has this text: nothing to approve or write
    old: bytes | None = None  # the file's bytes as planned from: the undo journal's before-image


@dataclass(frozen=True, slots=True)
class _Current:
    text: str  # decoded, BOM kept
    crlf: bool  # every line ends CRLF: the edit works on LF text and writes CRLF back
    stamp: tuple[int, int]
    mode: int
    owner: tuple[int, int]  # uid, gid
    data: bytes  # the bytes read (the undo journal's before-image)


def shown_in_tree(path: Path, root: Path) -> str:
    """``path`` relative to the working tree, or absolute outside it, as the diff and the question show it."""
    shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    return shown_path(shown)  # a line break in a file name would start a forged line in the diff and the question

def _load(target: Path, shown: str) -> _Current | None:
    """The file as it is now, or None if there is none; EditRefused for what these tools do not change."""
    try:
        file = open_regular(target)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise EditRefused(f"Error: {exc}") from None
    with file:
        info = os.fstat(file.fileno())
        if info.st_size > EDIT_MAX_BYTES:
            raise EditRefused(f"Error: {shown} is larger than {EDIT_MAX_BYTES >> 20} MiB; edit it another way")
        data = file.read(EDIT_MAX_BYTES + 1)
    if b"\0" in data:
        raise EditRefused(f"Error: {shown} looks like a binary file; {_TEXT_ONLY}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EditRefused(f"Error: {shown} is not valid UTF-8; {_TEXT_ONLY}") from None
    newlines = text.count("\n")
    crlf = newlines > 0 and text.count("\r\n") == newlines
    return _Current(text, crlf, file_stamp(info), stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid), data)


def _check_fresh(current: _Current, known: tuple[int, int] | None, shown: str) -> None:
    if known is None:
        raise EditRefused(f"Error: {shown} has not been read yet; read it with read_file before changing it")
    if known != current.stamp:
        raise EditRefused(f"Error: {shown} changed on disk since it was last read; read it again with read_file")


def _diff_lines(text: str | None) -> list[str]:
    """``text`` as lines that keep their newline (only ``\\n`` splits: no other character may hide a line)."""
    if not text:
        return []
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def unified_diff(before: str | None, after: str, shown: str) -> tuple[str, int, int]:
    """The diff (LF lines, no trailing newline) and the counts of added and removed lines."""
    lines: list[str] = []
    for line in difflib.unified_diff(_diff_lines(before), _diff_lines(after),
                                     "/dev/null" if before is None else shown, shown):
        if line.endswith("\n"):
            lines.append(line[:-1])
        else:
            lines += [line, "\\ No newline at end of file"]
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    return "\n".join(lines), added, removed


def mask_known(diff: str, redactor: Redactor) -> tuple[str, int]:
    """The diff with known secret values masked (``***(N chars)``); how many of them are on added lines."""
    if not any(secret in diff for secret in redactor.secrets):
        return diff, 0
    lines: list[str] = []
    hidden = 0
    for line in diff.split("\n"):
        line, count = redactor.mask_known_counted(line)
        lines.append(line)
        if line.startswith("+"):  # written; a context or removed line is the file as it is
            hidden += count
    return "\n".join(lines), hidden


def masked_texts(before: str | None, after: str, redact: Redactor) -> tuple[str | None, str]:
    """The whole texts before and after, with known secret values masked as the diff's are."""
    def mask(text: str) -> str:
        return redact.mask_known_counted(text)[0] if any(s in text for s in redact.secrets) else text

    return (None if before is None else mask(before)), mask(after)


def _encode(text: str, current: _Current | None) -> bytes:
    if current is not None:
        if current.crlf:
            text = text.replace("\n", "\r\n")
        if current.text.startswith(BOM) and not text.startswith(BOM):
            text = BOM + text
    return text.encode("utf-8", "surrogatepass")


# Where a file written is later run by name, as a git hook is: the directory core.hooksPath names inside the project
# tree (husky's .husky/) and a PATH directory inside it (an activated .venv/bin). Asked every time and never
# written unattended, as a git directory (docs/safety.md, "The sandbox").
_HOOKS_PATH = GitArea("git hook (core.hooksPath): runs on git commands",
                     "a git hook (core.hooksPath), which runs on git commands")
_ON_PATH = GitArea("on PATH: runs as a command", "in a PATH directory, whose programs run by name")
RUN_AREAS = (_HOOKS_PATH, _ON_PATH)


def run_area(target: Path, root: Path) -> GitArea | None:
    """:data:`_HOOKS_PATH` or :data:`_ON_PATH` for a write to ``target`` inside the working tree ``root`` (real
    paths); None elsewhere (outside the tree every edit is asked anyway). Blocking: runs ``git config``."""
    if not target.is_relative_to(root):
        return None
    tree = Path(os.path.realpath(project_root(root)))
    if any(target.is_relative_to(entry) for entry in path_dirs_inside(tree)):
        return _ON_PATH
    hooks = hooks_path(tree)
    if hooks is not None and hooks != tree and hooks.is_relative_to(tree) and target.is_relative_to(hooks):
        return _HOOKS_PATH
    return None


def plan_edit(tool: str, target: Path, root: Path, known: tuple[int, int] | None, change: Change,
          redact: Redactor) -> Plan:
    """Read, check and build the edit.

    ``change(text or None) -> (new LF text, result text)`` may raise :class:`EditRefused`; ``{shown}``
    in its texts becomes the path as shown, ``{counts}`` in the result the diff's ``+a -r``.
    """
    shown = shown_in_tree(target, root)
    current = _load(target, shown)
    if current is not None:
        _check_fresh(current, known, shown)
    before = None if current is None else (current.text.replace("\r\n", "\n") if current.crlf else current.text)
    try:
        after, done = change(before)
    except EditRefused as exc:
        raise EditRefused(str(exc).replace("{shown}", shown)) from None
    if before is not None and MASK in after and MASK not in before and redact(before) != before:
        # The model saw this file with its secrets masked: writing its copy back would put *** over them.
        raise EditRefused(f"Error: {shown} holds secrets that were masked ({MASK}) when it was read; the new "
                          f"content would write {MASK} over them — change the lines around them with edit_file")
    data = _encode(after, current)
    if len(data) > EDIT_MAX_BYTES:  # the diff, the question and the file would all hold it
        raise EditRefused(f"Error: the new content of {shown} is larger than {EDIT_MAX_BYTES >> 20} MiB; "
                          "write it another way")
    diff, added, removed = unified_diff(before, after, shown)
    # Exactly what will be written: only known secret values are masked, and counted (docs/configuration.md).
    diff, hidden = mask_known(diff, redact)
    request = EditRequest(tool, shown, diff, added, removed, current is None, not target.is_relative_to(root),
                          git_area(target) or run_area(target, root), hidden, *masked_texts(before, after, redact))
    done = done.replace("{counts}", f"+{added} -{removed}").replace("{shown}", shown)
    if current is None:
        return Plan(target, root, shown, None, None, None, data, request, done)
    return Plan(target, root, shown, current.stamp, current.mode, current.owner, data, request, done,
                 unchanged=after == before, old=current.data)

