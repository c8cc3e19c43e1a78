"""What the model is told before the conversation: the system prompt, the environment, ``AGENTS.md``.

:func:`gather_project_context` builds a :class:`ProjectContext` once per session; its
:meth:`~ProjectContext.system_prompt` is the system message of every request, and its
:attr:`~ProjectContext.sources` are what ``/context`` lists. See docs/architecture.md ("Project context").

Project instructions follow the open ``AGENTS.md`` convention: the user's own
``$XDG_CONFIG_HOME/dsh/AGENTS.md`` first, then one file per directory from the repository root down to
the working directory, so the most specific instructions come last. Files are hostile input (a cloned
repository chose them): a file is read only when its real path stays inside its own root (the repository,
or dsh's config directory for the user's file), so ``AGENTS.md -> /proc/self/environ`` or ``-> ~/.ssh/id_ed25519``
is left out; only regular files are read (never a FIFO or a device), each read is bounded, bytes that are
not UTF-8 become U+FFFD, and the text passes through the redactor before it is sent. Together they are
capped at :data:`INSTRUCTIONS_CAP_BYTES`. A file left out, cut or masked is named in one notice line.

The environment block's ``git status`` runs no program the repository names: see :func:`_git_has_changes`
and docs/configuration.md ("What a hostile repository can and cannot do").
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.project import find_git_dir, git_env, read_git_file, trusted_git
from dsh.agent_loop.safe_open import NotRegularFile, read_regular
from dsh.agent_loop.tools.shell import CommandResult, run_command
from dsh.agent_loop.usage import estimate_tokens
from dsh.llm.redact import MASK, Redactor, environment_secrets

__all__ = [
    "AGENTS_FILE",
    "BASE_SYSTEM_PROMPT",
    "INSTRUCTIONS_CAP_BYTES",
    "SYSTEM_PROMPT_VERSION",
    "ContextSource",
    "GitFacts",
    "ProjectContext",
    "gather_project_context",
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
_GIT_TIMEOUT = 2.0  # each of the two git commands

# Keys through which a repository's own config makes `git status` run a program it names. Hooks
# (post-index-change) and core.fsmonitor are switched off on the command line instead; status runs no
# diff driver (textconv, diff.external) and, with --ignore-submodules=all, no submodule's git.
_PROGRAM_KEYS = r"^filter\..+\.(clean|smudge|process)$"
_TRUSTED_SCOPES = frozenset({"system", "global", "command"})  # the admin's and the user's own config
_GIT_SWITCHED_OFF = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
_NOTICE_KEY_CHARS = 80
_OBJECT_NAME = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a SHA-1 or SHA-256 commit id


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
    changes: bool | None  # None: git could not tell in time, or was not asked (see ``notice``)
    notice: str | None = None  # why ``git status`` was not run, for the user


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
    skills: str = "",
    now: _dt.datetime | None = None,
    redactor: Redactor | None = None,
) -> ProjectContext:
    """The context for a session started in ``cwd``.

    ``replace`` (config ``system_prompt``) stands in for the built-in prompt; ``append``
    (config ``system_prompt_append``) follows the project instructions and ``skills``, the block of skills
    (agent_loop/skills.py). ``user_dir`` is
    ``$XDG_CONFIG_HOME/dsh``. ``redactor`` masks the instruction files (default: the secrets of
    ``env`` and every secret shape); the shell passes the agent's, which knows the configured key.
    """
    if redactor is None:
        redactor = Redactor(environment_secrets(env))
    git = await _git_facts(cwd)
    notices = [git.notice] if git is not None and git.notice is not None else []
    sources: list[ContextSource] = []
    if replace is not None:
        sources.append(ContextSource("config", "system prompt (config system_prompt)", replace))
    else:
        sources.append(ContextSource("system prompt", f"system prompt (built-in v{SYSTEM_PROMPT_VERSION})",
                                     BASE_SYSTEM_PROMPT))
    sources.append(ContextSource("environment", "environment", _environment_block(cwd, env, git, now)))
    instructions, file_notices = _instructions(_instruction_files(cwd, git, user_dir), redactor)
    sources.extend(instructions)
    notices.extend(file_notices)
    if skills:  # names and descriptions only, in a fixed order (agent_loop/skills.py)
        sources.append(ContextSource("skills", "skills (names and descriptions)", skills))
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


async def _git_facts(cwd: Path) -> GitFacts | None:
    found = find_git_dir(cwd)
    if found is None:
        return None
    root, git_dir = found
    # One line, never through a symlink (HEAD -> /proc/self/environ would put its start in the prompt).
    head = (read_git_file(git_dir / "HEAD") or "").partition("\n")[0].strip()
    if head.startswith("ref: refs/heads/"):
        branch = head[len("ref: refs/heads/"):]
    elif _OBJECT_NAME.fullmatch(head):
        branch = f"detached at {head[:12]}"
    else:
        branch = "unknown"
    changes, notice = await _git_has_changes(root)
    return GitFacts(root, branch, changes, notice)


async def _git_has_changes(root: Path) -> tuple[bool | None, str | None]:
    """Whether the work tree has changes (None: unknown), and why ``git status`` was not run, if it was not.

    The repository may be hostile (docs/configuration.md): ``git status`` re-reads every tracked file
    whose stat data is stale (a tree copied with ``cp -a``, unpacked, on a shared mount) through the
    clean filter its config names. So the config is read first with ``git config``, which runs nothing;
    when the repository's own config names a filter program, status is not run at all. Hooks and
    ``core.fsmonitor`` are switched off, no index lock is taken (no index write, so no
    post-index-change hook), and git is found on the absolute entries of ``PATH`` outside the tree only
    (``dsh.agent_loop.project.trusted_git``: a ``git`` planted in an activated ``.venv/bin`` is not run).
    """
    git, path = trusted_git(Path(os.path.realpath(root)))
    if git is None:
        return None, None  # git is not installed
    env = git_env(path)
    listed = await _run_git([git, "--no-pager", "config", "--show-scope", "-z", "--get-regexp", _PROGRAM_KEYS],
                            root, env)
    if listed is None or listed.exit_code not in (0, 1):  # 1: no such key
        return None, None
    if listed.dropped_bytes:  # cut in the middle: what was cut cannot be vouched for
        return None, "git status left out: git's filter settings are too long to check"
    key = _repository_program_key(listed.output)
    if key is not None:
        return None, f"git status left out: the repository's git config sets {key} (a program git would run)"
    status = await _run_git([git, "--no-pager", *_GIT_SWITCHED_OFF, "status", "--porcelain",
                             "--untracked-files=normal", "--ignore-submodules=all"], root, env)
    if status is None or status.exit_code != 0:
        return None, None
    return bool(status.output.strip()), None


async def _run_git(argv: list[str], root: Path, env: Mapping[str, str]) -> CommandResult | None:
    try:
        result = await run_command(argv, cwd=root, timeout=_GIT_TIMEOUT, merge_stderr=False, env=env,
                                   output_limit=64 * 1024)
    except OSError:
        return None
    return None if result.timed_out else result


def _repository_program_key(listing: str) -> str | None:
    """The first key of ``git config --show-scope -z`` output set by the repository itself, clipped for a line."""
    fields = listing.split("\0")
    for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
        if scope not in _TRUSTED_SCOPES:
            key = entry.split("\n", 1)[0]
            return key if len(key) <= _NOTICE_KEY_CHARS else key[: _NOTICE_KEY_CHARS - 1] + "…"
    return None


# --- AGENTS.md ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _InstructionFile:
    label: str  # "user AGENTS.md" | "AGENTS.md"
    path: Path
    root: Path  # the file's real path must stay inside this directory
    root_name: str  # how a notice names ``root``


class _LeftOut(Exception):
    """Why a context file is not sent: the end of the line ``<path> left out: <why>``."""


def _instruction_files(cwd: Path, git: GitFacts | None, user_dir: Path | None) -> list[_InstructionFile]:
    files: list[_InstructionFile] = []
    if user_dir is not None:
        files.append(_InstructionFile("user AGENTS.md", user_dir / AGENTS_FILE, user_dir, "dsh's config directory"))
    top = git.root if git is not None else cwd
    chain = [cwd, *cwd.parents]
    if top not in chain:
        top = cwd
    root_name = "the repository" if git is not None and top == git.root else "the working directory"
    directories = reversed(chain[: chain.index(top) + 1])
    files.extend(_InstructionFile("AGENTS.md", directory / AGENTS_FILE, top, root_name) for directory in directories)
    return files


def _instructions(files: list[_InstructionFile], redactor: Redactor) -> tuple[list[ContextSource], list[str]]:
    sources: list[ContextSource] = []
    notices: list[str] = []
    budget = INSTRUCTIONS_CAP_BYTES
    for file in files:
        path = file.path
        try:
            text = _read_instruction_file(file, budget + 1)
        except _LeftOut as why:
            notices.append(f"{path} left out: {why}")
            continue
        if text is None:
            continue
        if budget <= 0:
            notices.append(f"{path} left out: project instructions are capped at {_kib(INSTRUCTIONS_CAP_BYTES)}")
            continue
        truncated = len(text.encode("utf-8", "surrogatepass")) > budget
        if truncated:
            text = text.encode()[:budget].decode("utf-8", "ignore")
            text = text[: redactor.safe_length(text)]  # a secret cut in half is left out, not half sent
            notices.append(f"{path} cut to {_kib(budget)}: project instructions are capped at "
                           f"{_kib(INSTRUCTIONS_CAP_BYTES)}")
        masked = redactor(text)
        label = file.label
        if masked != text:
            label += " (secrets masked)"
            notices.append(f"{path} sent with secrets masked ({MASK})")
        budget -= len(masked.encode())
        body = masked.rstrip("\n")
        sources.append(ContextSource("AGENTS.md", label, f"# Instructions from {path}\n\n{body}", path, truncated))
    return sources, notices


def _read_instruction_file(file: _InstructionFile, limit: int) -> str | None:
    """At most ``limit`` bytes of an instruction file; None when there is none. Raises :class:`_LeftOut`.

    The real path must stay inside the file's root: a symlink out of the repository could name
    ``/proc/self/environ`` (dsh's environment, API key included; a regular file of size 0, so only
    the path tells) or a private key. The resolved path is then opened with ``O_NOFOLLOW``, so a link
    swapped in after the check is refused too; a hard link cannot reach into ``/proc``.
    """
    try:
        info = file.path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _LeftOut(f"it cannot be read ({exc.strerror})") from None
    real = Path(os.path.realpath(file.path))
    if not real.is_relative_to(os.path.realpath(file.root)):
        what = "it is a symlink to a path" if stat.S_ISLNK(info.st_mode) else "its real path is"
        raise _LeftOut(f"{what} outside {file.root_name}")
    try:
        return read_regular(real, limit)
    except NotRegularFile as exc:
        raise _LeftOut(f"it is {exc.kind}, not a regular file") from None
    except OSError as exc:
        raise _LeftOut(f"it cannot be read ({exc.strerror})") from None


def _kib(size: int) -> str:
    return f"{size // 1024} KiB"
