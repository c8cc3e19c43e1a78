"""What the model is told before the conversation: the system prompt, the environment, ``AGENTS.md``.

:func:`gather_project_context` builds a :class:`ProjectContext` once per session; its
:meth:`~ProjectContext.system_prompt` is the system message of every request, and its
:attr:`~ProjectContext.sources` are what ``/context`` lists. See docs/architecture.md ("Project context").

Project instructions follow the open ``AGENTS.md`` convention: the user's own
``$XDG_CONFIG_HOME/dsh/AGENTS.md`` first, then one file per directory from the repository root down to
the working directory, so the most specific instructions come last. Files are hostile input: only
regular files are read (never a FIFO or a device), each read is bounded, and bytes that are not UTF-8
become U+FFFD. Together they are capped at :data:`INSTRUCTIONS_CAP_BYTES`; what is cut is named in
one notice line.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "AGENTS_FILE",
    "BASE_SYSTEM_PROMPT",
    "INSTRUCTIONS_CAP_BYTES",
    "SYSTEM_PROMPT_VERSION",
    "ContextSource",
    "GitFacts",
    "ProjectContext",
    "estimate_tokens",
    "gather_project_context",
    "project_root",
]

SYSTEM_PROMPT_VERSION = 1
BASE_SYSTEM_PROMPT = """\
You are dsh, a coding agent working in the user's terminal, in the project described below.

- Read before you change: look at the relevant files (read_file, list_dir, search_text) before \
proposing or making an edit, and keep changes small and focused on what was asked.
- Commands run only after the user approves them; say briefly why you need one.
- When something fails, say what failed and why in one line, then what you will try next. Never \
hide a failure or claim success you did not verify.
- Answer concisely. Use Markdown for code, with the language on each fenced block.
- Project instructions (AGENTS.md) below come from the user and the repository; follow them unless \
they conflict with the user's request in this conversation."""

AGENTS_FILE = "AGENTS.md"
INSTRUCTIONS_CAP_BYTES = 32 * 1024  # all AGENTS.md files together
_GIT_STATUS_TIMEOUT = 2.0


def estimate_tokens(text: str) -> int:
    """A rough count for display (about four characters a token); requests report the real one."""
    return (len(text) + 3) // 4


@dataclass(frozen=True, slots=True)
class ContextSource:
    """One part of the system prompt. ``path`` is the file it came from, if any."""

    kind: str  # "system prompt" | "environment" | "AGENTS.md" | "config"
    label: str
    text: str
    path: Path | None = None
    truncated: bool = False

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


@dataclass(frozen=True, slots=True)
class GitFacts:
    root: Path
    branch: str  # the branch name, or "detached at <sha>"
    changes: bool | None  # None: git could not tell in time


@dataclass(frozen=True, slots=True)
class ProjectContext:
    sources: tuple[ContextSource, ...]
    notices: tuple[str, ...] = ()  # one line each, shown once to the user
    git: GitFacts | None = None

    def system_prompt(self) -> str:
        return "\n\n".join(source.text for source in self.sources if source.text)


async def gather_project_context(
    cwd: Path,
    *,
    env: Mapping[str, str],
    user_dir: Path | None,
    replace: str | None = None,
    append: str | None = None,
    now: _dt.datetime | None = None,
) -> ProjectContext:
    """The context for a session started in ``cwd``.

    ``replace`` (config ``system_prompt``) stands in for the built-in prompt; ``append``
    (config ``system_prompt_append``) follows the project instructions. ``user_dir`` is
    ``$XDG_CONFIG_HOME/dsh``.
    """
    git = await _git_facts(cwd)
    sources: list[ContextSource] = []
    if replace is not None:
        sources.append(ContextSource("config", "system prompt (config system_prompt)", replace))
    else:
        sources.append(ContextSource("system prompt", f"system prompt (built-in v{SYSTEM_PROMPT_VERSION})",
                                     BASE_SYSTEM_PROMPT))
    sources.append(ContextSource("environment", "environment", _environment_block(cwd, env, git, now)))
    instructions, notices = _instructions(_instruction_paths(cwd, git, user_dir))
    sources.extend(instructions)
    if append is not None:
        sources.append(ContextSource("config", "appended (config system_prompt_append)", append))
    return ProjectContext(tuple(sources), tuple(notices), git)


# --- the environment block -------------------------------------------------------------------------


def _environment_block(cwd: Path, env: Mapping[str, str], git: GitFacts | None, now: _dt.datetime | None) -> str:
    today = (now or _dt.datetime.now().astimezone()).date().isoformat()
    lines = [
        "# Environment",
        f"- working directory: {cwd}",
        f"- platform: {platform.system()} {platform.release()}".rstrip(),
        f"- shell: {env.get('SHELL') or 'unknown'}",
        f"- date: {today}",
    ]
    if git is None:
        lines.append("- git: not a git repository")
    else:
        changes = {True: "has uncommitted changes", False: "clean", None: "status unknown"}[git.changes]
        lines.append(f"- git: repository root {git.root}, branch {git.branch}, {changes}")
    return "\n".join(lines)


def _find_git_dir(cwd: Path) -> tuple[Path, Path] | None:
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
            text = _read_bounded(marker, 4096)
            if text is not None and text.startswith("gitdir:"):
                target = Path(text[len("gitdir:"):].strip())
                return directory, target if target.is_absolute() else directory / target
        return None
    return None


def project_root(cwd: Path) -> Path:
    """The project a session belongs to: the git work tree holding ``cwd``, else ``cwd`` itself.

    Found by looking for ``.git`` upwards (a few ``lstat`` calls, no git process), so creating a
    session stays cheap; see docs/architecture.md (the session log).
    """
    found = _find_git_dir(cwd)
    return found[0] if found is not None else cwd


async def _git_facts(cwd: Path) -> GitFacts | None:
    found = _find_git_dir(cwd)
    if found is None:
        return None
    root, git_dir = found
    head = (_read_bounded(git_dir / "HEAD", 4096) or "").strip()
    if head.startswith("ref: refs/heads/"):
        branch = head[len("ref: refs/heads/"):]
    elif head:
        branch = f"detached at {head[:12]}"
    else:
        branch = "unknown"
    return GitFacts(root, branch, await _git_has_changes(root))


async def _git_has_changes(root: Path) -> bool | None:
    from dsh.agent_loop.tools import run_command

    # The repository may be hostile: core.fsmonitor would run a program it names. No index lock is taken.
    argv = ["git", "-c", "core.fsmonitor=false", "status", "--porcelain", "--untracked-files=normal"]
    try:
        result = await run_command(argv, cwd=root, timeout=_GIT_STATUS_TIMEOUT, merge_stderr=False,
                                   env={"GIT_OPTIONAL_LOCKS": "0"}, output_limit=4096)
    except OSError:
        return None  # git is not installed
    if result.timed_out or result.exit_code != 0:
        return None
    return bool(result.output.strip())


# --- AGENTS.md ---------------------------------------------------------------------------------------


def _instruction_paths(cwd: Path, git: GitFacts | None, user_dir: Path | None) -> list[tuple[str, Path]]:
    paths: list[tuple[str, Path]] = []
    if user_dir is not None:
        paths.append(("user AGENTS.md", user_dir / AGENTS_FILE))
    top = git.root if git is not None else cwd
    chain = [cwd, *cwd.parents]
    directories = list(reversed(chain[: chain.index(top) + 1])) if top in chain else [cwd]
    paths.extend(("AGENTS.md", directory / AGENTS_FILE) for directory in directories)
    return paths


def _instructions(paths: list[tuple[str, Path]]) -> tuple[list[ContextSource], list[str]]:
    sources: list[ContextSource] = []
    notices: list[str] = []
    budget = INSTRUCTIONS_CAP_BYTES
    for label, path in paths:
        if budget <= 0:
            if _is_regular(path):
                notices.append(f"{path} left out: project instructions are capped at {_kib(INSTRUCTIONS_CAP_BYTES)}")
            continue
        text = _read_bounded(path, budget + 1)
        if text is None:
            continue
        size = len(text.encode("utf-8", "surrogatepass"))
        truncated = size > budget
        if truncated:
            text = text.encode()[:budget].decode("utf-8", "ignore")
            notices.append(f"{path} cut to {_kib(budget)}: project instructions are capped at "
                           f"{_kib(INSTRUCTIONS_CAP_BYTES)}")
        budget -= len(text.encode())
        body = text.rstrip("\n")
        sources.append(ContextSource("AGENTS.md", label, f"# Instructions from {path}\n\n{body}", path, truncated))
    return sources, notices


def _kib(size: int) -> str:
    return f"{size // 1024} KiB"


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _read_bounded(path: Path, limit: int) -> str | None:
    """At most ``limit`` bytes of a regular file, decoded with U+FFFD; None for anything else.

    Opened non-blocking so a FIFO planted under the name cannot stall the open; refused after fstat.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 64 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
