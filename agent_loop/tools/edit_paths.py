"""Where an edit writes: whether the path is in a git directory, and a walk to it that follows no symlink.

Both serve ``dsh.agent_loop.tools.edits`` (docs/configuration.md, "Edits"):

- **The git directory.** A file git reads as its own (a hook, its config) can make the next git command
  run a program, so writes there are asked every time and never made unattended. What counts as a git
  directory is what git itself would use: any ``.git`` path component (a nested repository's too, and
  the spellings a case-insensitive file system treats alike), the directory a ``.git`` file or symlink
  points to (worktrees, submodules, ``--separate-git-dir``), and any directory that holds ``HEAD`` and
  ``objects`` + ``refs`` (or ``commondir``): a bare repository, including one the write would complete.
- **The walk.** The path a user approved was resolved when the edit was planned; a directory swapped for
  a symlink while the question waited must not send the write elsewhere. :func:`open_parent` walks from
  ``/`` one directory at a time (``O_NOFOLLOW | O_DIRECTORY``, each opened relative to the last), so the
  descriptor it returns is the planned directory or the walk fails naming the component that changed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.tools import open_regular

__all__ = ["GIT_CONFIG", "GIT_DIRECTORY", "GIT_HOOK", "DirectoryChanged", "GitArea", "git_area", "open_parent"]


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
_GITFILE_PREFIX = "gitdir:"
_GITFILE_MAX_BYTES = 4096


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
    try:
        with open_regular(link) as file:  # a FIFO swapped in is refused, never waited on
            head = file.read(_GITFILE_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    if not head.startswith(_GITFILE_PREFIX):
        return None
    pointed = Path(head[len(_GITFILE_PREFIX):].strip())
    return Path(os.path.realpath(directory / pointed))


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


# --- the walk -------------------------------------------------------------------------------------

# O_PATH: a directory is walked through without needing read permission on it (Linux; elsewhere O_RDONLY).
_DIRECTORY_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirectoryChanged(Exception):
    """A directory on the planned path is a symlink, or no directory, now."""

    def __init__(self, path: Path, symlink: bool) -> None:
        super().__init__(f"{path} is {'a symlink' if symlink else 'not a directory'}")
        self.path = path
        self.symlink = symlink


def _is_symlink(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_directory(directory: int, name: str, path: Path, create: bool) -> int:
    """``name`` in ``directory``, opened without following a symlink; made first when missing and ``create``."""
    for _ in range(2):
        try:
            return os.open(name, _DIRECTORY_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            if not create:
                break
            with contextlib.suppress(FileExistsError):  # made meanwhile: opened (and checked) next time round
                os.mkdir(name, 0o777, dir_fd=directory)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # ELOOP: O_NOFOLLOW met a symlink (BSD, macOS)
                raise DirectoryChanged(path, exc.errno == errno.ELOOP or _is_symlink(directory, name)) from None
            raise OSError(exc.errno, exc.strerror, str(path)) from None
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


def open_parent(target: Path, *, create: bool) -> int:
    """A descriptor of the directory holding ``target`` (an absolute real path), reached from ``/`` with no
    symlink followed; the caller closes it.

    ``create`` makes missing directories (mode 0777 minus the umask). Raises :class:`DirectoryChanged`
    when a directory on the way is a symlink or no directory now, ``FileNotFoundError`` (naming it) when
    one is missing and ``create`` is false.
    """
    current = os.open("/", _DIRECTORY_FLAGS)
    path = Path("/")
    try:
        for name in target.parts[1:-1]:
            path = path / name
            opened = _open_directory(current, name, path, create)
            os.close(current)
            current = opened
    except BaseException:
        os.close(current)
        raise
    return current
