"""The files of a directory as git sees them: what ``@`` completion offers and what ``glob`` and ``search_text`` read.

Inside a git work tree the list is ``git ls-files --cached --others --exclude-standard``: the tracked files and
the untracked ones git does not ignore, so every ``.gitignore`` (nested ones, negations), ``.git/info/exclude``
and the user's global excludes file (``core.excludesFile``) apply exactly as git applies them, and an ignored
tree such as ``node_modules`` is never entered. git runs as dsh's own git always does in a repository that may be
hostile (``dsh.agent_loop.project``): found outside the tree, hooks and ``core.fsmonitor`` off, no optional lock,
the child environment (``HOME`` among it, so the user's global config is read).

Outside a repository, or when git cannot list it, the list is a walk of at most :data:`MAX_WALK` files that
follows no symlinked folder and skips :data:`SKIPPED_DIRS`. docs/tools.md, "Search: glob and search_text".
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.git_root import find_git_dir
from dsh.agent_loop.process import child_env
from dsh.agent_loop.project import git_env, trusted_git

__all__ = ["GIT_TIMEOUT", "MAX_WALK", "SKIPPED_DIRS", "TreeFiles", "list_files"]

MAX_WALK = 50_000  # files a walk lists at most
GIT_TIMEOUT = 30.0  # seconds git may take to list the tree (a FIFO planted as a .gitignore makes it wait)
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox", ".hypothesis"}
)  # fmt: skip
_GIT = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-pager", "ls-files", "-z",
        "--cached", "--others", "--exclude-standard")  # fmt: skip


@dataclass(frozen=True, slots=True)
class TreeFiles:
    """The files under a directory, relative to it (``/``-separated, undecodable bytes surrogate-escaped)."""

    paths: list[str]
    by_git: bool  # listed by git (ignore files applied); else walked
    cut: bool  # the walk stopped at MAX_WALK files
    note: str | None  # why a git work tree was walked instead: git failed there


def list_files(directory: Path) -> TreeFiles:
    """What git lists under ``directory``, or the walk when it is not in a repository or git cannot list it.

    Blocking (a git process, or a walk): call it from a worker thread.
    """
    listed, failure = _git_files(directory)
    if listed is not None:
        return TreeFiles(listed, by_git=True, cut=False, note=None)
    paths, cut = _walk(directory)
    in_repository = failure is not None and find_git_dir(Path(os.path.realpath(directory))) is not None
    return TreeFiles(paths, by_git=False, cut=cut, note=failure if in_repository else None)


def _git_files(directory: Path) -> tuple[list[str] | None, str | None]:
    """The tracked and untracked-not-ignored files under ``directory``; else None and why git did not list them."""
    git, path = trusted_git(Path(os.path.realpath(directory)))
    if git is None:
        return None, "git is not installed"
    try:
        done = subprocess.run([git, *_GIT], cwd=directory, env=child_env(git_env(path)), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return None, f"git ls-files took longer than {GIT_TIMEOUT:g} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"git ls-files could not run: {exc}"
    if done.returncode != 0:
        return None, f"git ls-files exited with status {done.returncode}"
    names = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    return [name for name in dict.fromkeys(names) if name], None  # an unmerged file is listed once a stage


def _walk(directory: Path) -> tuple[list[str], bool]:
    """At most :data:`MAX_WALK` files under ``directory`` in path order, and whether it stopped there."""
    found: list[str] = []
    for top, folders, files in os.walk(directory):
        folders[:] = sorted(folder for folder in folders if folder not in SKIPPED_DIRS)
        relative = os.path.relpath(top, directory)
        prefix = "" if relative == "." else relative + "/"
        for name in sorted(files):
            found.append(prefix + name)
            if len(found) >= MAX_WALK:
                return found, True
    return found, False
