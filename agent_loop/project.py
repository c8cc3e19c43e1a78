"""The project a directory belongs to: the git work tree holding it, found without running git.

The session log names a session's project by it (``dsh.agent_loop.session_log``, docs/architecture.md "The
session log"), the project context reads the branch from the git directory it finds
(``dsh.agent_loop.context``), and the edit tools follow a ``.git`` file to the git directory it names
(``dsh.agent_loop.tools.edit_paths``). git's small files are read bounded and never through a symlink
(``HEAD -> /proc/self/environ`` would put dsh's environment in the prompt).
"""

from __future__ import annotations

import stat
from pathlib import Path

from dsh.agent_loop.safe_open import read_regular

__all__ = ["find_git_dir", "gitfile_target", "project_root", "read_git_file"]

_GITFILE_PREFIX = "gitdir:"
_GIT_FILE_MAX_BYTES = 4096


def read_git_file(path: Path) -> str | None:
    """At most 4 KiB of one of git's small files (``HEAD``, a ``.git`` file); None for anything else."""
    try:
        return read_regular(path, _GIT_FILE_MAX_BYTES)
    except OSError:
        return None


def gitfile_target(marker: Path) -> Path | None:
    """The git directory a ``.git`` file names (``gitdir: <path>``, relative to its directory), or None."""
    text = read_git_file(marker)
    if text is None or not text.startswith(_GITFILE_PREFIX):
        return None
    return marker.parent / text[len(_GITFILE_PREFIX):].strip()  # an absolute path stays as it is


def find_git_dir(cwd: Path) -> tuple[Path, Path] | None:
    """(work tree root, git dir) for the repository holding ``cwd``; ``.git`` may be a file (worktrees)."""
    for directory in (cwd, *cwd.parents):
        marker = directory / ".git"
        try:
            info = marker.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            return directory, marker
        if stat.S_ISREG(info.st_mode):
            target = gitfile_target(marker)
            return (directory, target) if target is not None else None
        return None
    return None


def project_root(cwd: Path) -> Path:
    """The project a session belongs to: the git work tree holding ``cwd``, else ``cwd`` itself.

    Found by looking for ``.git`` upwards (a few ``lstat`` calls, no git process), so creating a
    session stays cheap; see docs/architecture.md (the session log).
    """
    found = find_git_dir(cwd)
    return found[0] if found is not None else cwd
