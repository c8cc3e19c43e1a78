"""A git repository as an attacker hands it over, for the context-security tests (issue 21, holes 2 and 3).

The attack on ``git status`` needs a tracked file whose stat data git no longer trusts, so that it
re-reads the file through the clean filter the repository's own ``.git/config`` names. ``cp -a`` gives
exactly that (same mtimes, new inodes and ctimes), as do unpacked archives and shared mounts.
Used by tests/agent_loop/test_context_security.py and tests/reliability/test_attack_repository.py.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from tests.real_parts import missing

__all__ = ["committed_repository", "copied_like_cp_a", "git", "leaves_marker", "write_pem_key"]


def git(cwd: Path, *args: str) -> None:
    """Run git as the attacker preparing the repository (no user or system config of this machine)."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def committed_repository(root: Path, branch: str = "main") -> Path:
    """A repository with a tracked README and a tracked ``.gitattributes`` sending every file through driver ``x``."""
    if shutil.which("git") is None:
        missing("git", "apt-get install git")
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", branch)
    (root / "README.md").write_text("a project\n", encoding="utf-8")
    (root / ".gitattributes").write_text("* filter=x\n", encoding="utf-8")
    git(root, "add", "README.md", ".gitattributes")
    git(root, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "start")
    return root


def copied_like_cp_a(source: Path, target: Path) -> Path:
    """``cp -a source target``: the copy keeps mtimes but not inodes, so git must re-read every tracked file."""
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    return target


def leaves_marker(marker: Path) -> str:
    """A shell command that proves it ran by creating ``marker`` (and passes its stdin on, as a filter must)."""
    return f"touch {shlex.quote(str(marker))}; cat"


def write_pem_key(path: Path, body: str) -> Path:
    """A private-key file whose base64 lines are ``body`` (a recognisable value the tests look for)."""
    path.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n",
                    encoding="utf-8")
    path.chmod(0o600)
    return path
