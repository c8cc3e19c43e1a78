"""Where the repository is: the git work tree holding a directory, found by a few ``lstat`` calls and reads of git's
small files, without running git (agent_loop/project.py has the rest: running git safely).

Light on purpose: the project config is found with it before the first prompt (repl/project_config.py). git's small
files are read bounded and never through a symlink (``HEAD -> /proc/self/environ`` would put dsh's environment in
the prompt).
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
    if text is None or not text.startswith(_GITFILE_PREFIX) or "\0" in text:  # no path holds a NUL
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
