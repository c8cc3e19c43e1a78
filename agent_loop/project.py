"""The project a directory belongs to: the git work tree holding it, found without running git.

The session log names a session's project by it (``dsh.agent_loop.session_log``, docs/architecture.md "The
session log"), the project context reads the branch from the git directory it finds
(``dsh.agent_loop.context``), and the edit tools follow a ``.git`` file to the git directory it names
(``dsh.agent_loop.tools.edit_paths``). git's small files are read bounded and never through a symlink
(``HEAD -> /proc/self/environ`` would put dsh's environment in the prompt).

When dsh runs git itself (the project context's ``git status``, the ``core.hooksPath`` the sandbox and the edit
tools guard), it finds it with :func:`trusted_git`: never on a ``PATH`` entry that is relative or lies inside the
project tree, where a command could have planted a ``git`` (docs/safety.md, "The sandbox").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from dsh.agent_loop.git_root import find_git_dir, gitfile_target, project_root, read_git_file

__all__ = [
    "find_git_dir",
    "git_env",
    "gitfile_target",
    "path_dirs_inside",
    "project_root",
    "read_git_file",
    "trusted_git",
]

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}
# Where the user keeps their own (trusted) git config; passed on so git-lfs and the like still apply.
_GIT_USER_CONFIG = ("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")


def path_dirs_inside(tree: Path, path: str | None = None) -> list[Path]:
    """The absolute ``PATH`` entries (default: dsh's own) whose real path lies inside ``tree`` (a real path): an
    activated ``.venv/bin``, ``node_modules/.bin``. A program there was written by whoever can write the tree."""
    entries = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    real = (Path(os.path.realpath(entry)) for entry in entries if os.path.isabs(entry))
    return list(dict.fromkeys(entry for entry in real if entry.is_relative_to(tree)))


def trusted_git(tree: Path) -> tuple[str | None, str]:
    """git's absolute path, and the ``PATH`` to run it with: only absolute entries (``.`` or an empty one would mean
    the repository), none inside ``tree`` (a real path; a ``git`` planted in ``.venv/bin`` would run as dsh's)."""
    inside = path_dirs_inside(tree)
    path = os.pathsep.join(entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
                           if os.path.isabs(entry) and Path(os.path.realpath(entry)) not in inside)
    return shutil.which("git", path=path), path


def git_env(path: str) -> dict[str, str]:
    """What dsh's own git runs with besides the child allowlist: the user's config locations, no pager, no
    prompt, no optional lock (so no index write), and ``path`` from :func:`trusted_git`."""
    user: Mapping[str, str] = {name: os.environ[name] for name in _GIT_USER_CONFIG if name in os.environ}
    return {**user, **_GIT_ENV, "PATH": path}
