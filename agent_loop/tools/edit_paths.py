"""Whether an edit writes into a git directory, which git would read as its own (``dsh.agent_loop.tools.edits``).

A file git reads as its own (a hook, its config) can make the next git command run a program, so writes
there are asked every time and never made unattended (docs/configuration.md, "Edits"). What counts as a
git directory is what git itself would use: any ``.git`` path component (a nested repository's too, and
the spellings a case-insensitive file system treats alike), the directory a ``.git`` file or symlink
points to (worktrees, submodules, ``--separate-git-dir``), and any directory that holds ``HEAD`` and
``objects`` + ``refs`` (or ``commondir``): a bare repository, including one the write would complete.

The write itself walks to its directory following no symlink: ``dsh.agent_loop.safe_open.open_parent``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.project import gitfile_target

__all__ = ["GIT_CONFIG", "GIT_DIRECTORY", "GIT_HOOK", "GitArea", "git_area"]


@dataclass(frozen=True, slots=True)
class GitArea:
    """What a write inside a git directory can do, as the approval names it and a refusal says it."""

    note: str  # the approval's subject: ``.git/config (+1 -0, git config: can name programs git runs)``
    what: str  # the unattended refusal: ``.git/config is git config, which can name programs git runs``


GIT_HOOK = GitArea("git hook: runs on git commands", "a git hook, which runs on git commands")
GIT_CONFIG = GitArea("git config: can name programs git runs", "git config, which can name programs git runs")
GIT_DIRECTORY = GitArea("git directory", "in a git directory")

_CONFIG_NAMES = frozenset({"config", "config.worktree"})
# Characters HFS+ ignores in names, which git ignores too when it compares a name with ".git".
_IGNORED_IN_NAMES = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


def _is_dotgit(name: str) -> bool:
    """``.git``, and what case-insensitive (``.GIT``), HFS+ (``.g\\u200cit``) or NTFS (``git~1``, ``.git.``)
    file systems open as ``.git``."""
    folded = _IGNORED_IN_NAMES.sub("", name).rstrip(". ").casefold()
    return folded in (".git", "git~1")


def _looks_like_git_dir(directory: Path, next_name: str) -> bool:
    """Whether git would take ``directory`` for a git directory once ``next_name`` exists in it."""

    def present(name: str) -> bool:
        return name == next_name or os.path.lexists(directory / name)

    return present("HEAD") and ((present("objects") and present("refs")) or present("commondir"))


def _linked_git_dir(directory: Path) -> Path | None:
    """The git directory a ``.git`` file (``gitdir: …``) or symlink in ``directory`` points to."""
    link = directory / ".git"
    try:
        info = os.lstat(link)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return Path(os.path.realpath(link))
    if not stat.S_ISREG(info.st_mode):
        return None  # a .git directory: its own component says so
    pointed = gitfile_target(link)  # a FIFO swapped in is refused, never waited on
    return Path(os.path.realpath(pointed)) if pointed is not None else None


def _below_git_dir(target: Path) -> tuple[str, ...] | None:
    """``target``'s path below the innermost git directory holding it, or None when none does."""
    parts = target.parts
    found: tuple[str, ...] | None = None

    def keep(below: tuple[str, ...]) -> None:
        nonlocal found
        if found is None or len(below) < len(found):
            found = below

    for index in range(1, len(parts)):
        directory = Path(*parts[:index])
        if _is_dotgit(parts[index]):
            keep(parts[index + 1:])
        elif _looks_like_git_dir(directory, parts[index]):
            keep(parts[index:])
        linked = _linked_git_dir(directory)
        if linked is not None and target.is_relative_to(linked):
            keep(target.relative_to(linked).parts)
    return found


def git_area(target: Path) -> GitArea | None:
    """What a write to ``target`` (a real path: symlinks resolved) would change of git's own files, if any."""
    below = _below_git_dir(target)
    if below is None:
        return None
    names = [name.casefold() for name in below]
    if "hooks" in names[:-1]:
        return GIT_HOOK
    if names and names[-1] in _CONFIG_NAMES:
        return GIT_CONFIG
    return GIT_DIRECTORY
