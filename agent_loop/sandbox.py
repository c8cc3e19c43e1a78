"""``run_shell`` under bubblewrap: the argv of one sandboxed command, and the check that the sandbox works.

The rules (docs/safety.md, "The sandbox"): the project tree read-write, except what git reads and runs (the git
directory's ``config``, ``hooks`` and pointers, read-only, so a command cannot plant a program that a later
``git`` runs), the rest of the file system read-only, a private ``/tmp``, no network unless
``sandbox_network = true``.

What is writable is decided once per working directory, at its first command (:func:`plan_sandbox`), from the
disk as it is then, and never again from what a command wrote: a command can write ``.git/commondir`` or a
``.git`` file, so a bind list derived from them before each command handed the next command ``$HOME`` or ``/``.
A git directory outside the tree is never writable. Before each command :meth:`SandboxPlan.changed` re-reads
the pointers and the mount points; one that changed or appeared refuses the command (:class:`SandboxRefused`).

Why each flag:

- ``--unshare-pid`` and ``--die-with-parent``: the command and everything it starts live in their own pid
  namespace, whose init dies with bwrap, and bwrap with dsh. dsh's teardown ladder signals bwrap's process
  group (agent_loop/process.py); even a ``setsid`` escapee then dies with the namespace.
- No ``--new-session``: the command already runs in a session of its own with no controlling terminal
  (``ManagedProcess`` starts every child with ``setsid``) and ``--dev /dev`` shows it no host terminal, so
  there is no tty to push keystrokes into; staying in bwrap's process group lets the command get the
  ladder's SIGTERM first, as an unsandboxed one does.
- ``--cap-drop ALL``: run by root, bwrap would otherwise keep capabilities, and ``umount`` would lift the
  read-only binds.
- ``--tmpfs /run``: a read-only mount does not stop ``connect()`` on a Unix socket, and ``/run`` holds the ones
  that reach outside (the D-Bus buses, where ``systemd-run --user`` starts anything; Docker's; ssh and gpg
  agents; a database's). Sockets elsewhere stay reachable (docs/safety.md says so).
- The git directory is bound onto itself (a ``.git`` file read-only): a mount point cannot be renamed, so a
  command cannot move ``.git`` aside and put a directory with its own config in its place. A directory above
  it in the tree can be renamed, so each mounted directory must still be the same one (device and inode) at
  each command.
- ``modules`` is read-only and each submodule's git directory in it bound writable again: the superproject's
  ``git status`` reads their configs, so a new one (or a ``core.fsmonitor`` planted in one) would run
  unsandboxed.
- The command's real wait status: bwrap exits 128+N for a command killed by signal N (its ``--json-status-fd``
  says the same), which an ``exit 137`` also gives. With ``status_fd`` a small reaper (:data:`_REAPER`, run by
  dsh's own Python inside the sandbox) starts the command, waits for it and writes its raw wait status to that
  pipe, which the command itself never holds; :func:`wait_status` reads it back (docs/safety.md).

The check runs ``bwrap`` once with the same namespaces and sorts its failure into closed categories; its
stderr stays host-side (only the category reaches a line).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dsh.agent_loop.process import ExitStatus, child_env
from dsh.agent_loop.project import find_git_dir, git_env, read_git_file, trusted_git

__all__ = [
    "BWRAP",
    "SANDBOX_KINDS",
    "Sandbox",
    "SandboxPlan",
    "SandboxProblem",
    "SandboxRefused",
    "bwrap_argv",
    "classify_failure",
    "hooks_path",
    "plan_sandbox",
    "sandbox_check",
    "sandbox_of",
    "sandbox_problem",
    "wait_status",
]

BWRAP = "bwrap"
SANDBOX_KINDS = ("bwrap",)
_PROBE_TIMEOUT = 10.0
_POINTERS = ("commondir", "gitdir")  # where a git directory says its shared part and its work tree are
_PROTECTED = ("config", "config.worktree")  # what a later git reads (with hooks/, what it runs)
_PER_CHECKOUT = ("commondir", "gitdir", "config.worktree")  # each linked worktree's pointers and own config
_MODULES_LIMIT = 200  # directories walked under .git/modules (or in .git/worktrees); past it all of it is read-only


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How ``run_shell`` wraps each command: ``network`` is ``sandbox_network``.

    The writable set of a working directory is decided once, at its first command (:func:`plan_sandbox`), and
    kept: each later command is checked against it (:meth:`SandboxPlan.changed`) and refused when a pointer moved.
    """

    network: bool = False
    _plans: dict[str, SandboxPlan] = field(default_factory=dict, init=False, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, compare=False, repr=False)

    def plan(self, cwd: str | os.PathLike[str]) -> SandboxPlan:
        """The plan for commands run in ``cwd``: made from the disk the first time, the same one after."""
        key = os.path.realpath(cwd)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = plan_sandbox(Path(cwd))
        return plan

    def wrap(self, argv: Sequence[str], *, cwd: str | os.PathLike[str], status_fd: int | None = None) -> list[str]:
        """``argv`` inside bubblewrap, for a command run in ``cwd``; ``OSError`` when there is no ``bwrap``,
        ``ValueError`` when the tree would be ``/``, :class:`SandboxRefused` when a pointer changed since the
        plan was made. With ``status_fd`` (the write end of a pipe the child inherits) the command's wait status
        is written to it (:func:`wait_status`). Blocking: the first call runs ``git config`` once."""
        binary = shutil.which(BWRAP, path=os.environ.get("PATH", os.defpath))
        if binary is None:
            raise FileNotFoundError(f"{BWRAP} is not on PATH")
        plan = self.plan(cwd)
        changed = plan.changed()
        if changed is not None:
            raise SandboxRefused(changed)
        python = _reaper_python()
        if status_fd is not None and python is not None:
            argv = [python, "-I", "-S", "-c", _REAPER, str(status_fd), *argv]
        return bwrap_argv(argv, cwd=Path(cwd), network=self.network, bwrap=binary, plan=plan)


class SandboxRefused(ValueError):
    """A command not run: something the plan relies on changed since it was made (one line, the path inert)."""

    def __init__(self, shown: str) -> None:
        super().__init__(f"run_shell refused: {shown} changed since dsh started; the sandbox's writable set was "
                         "decided at start (restore the file or restart dsh)")


def _reaper_python() -> str | None:
    """The interpreter that runs the reaper: dsh's own, resolved past a virtualenv's link (the reaper needs only
    the standard library); None when it lives under /tmp, which the sandbox hides (the command then runs
    without the reaper, and a signal shows as bwrap's 128+N)."""
    if not sys.executable:
        return None
    real = os.path.realpath(sys.executable)
    return None if real == "/tmp" or real.startswith("/tmp/") else real


# Inside the sandbox: run argv[2:] with the status pipe closed for it (non-inheritable) and the signals Python
# ignores back at their defaults, as subprocess does; write its wait status, exit as bwrap would have.
_REAPER = """\
import os, signal, sys
fd = int(sys.argv[1])
os.set_inheritable(fd, False)
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
status = os.waitpid(pid, 0)[1]
os.write(fd, b"%d" % status)
os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
"""


def wait_status(data: bytes) -> ExitStatus | None:
    """How the command ended, from what the reaper wrote; None when it wrote nothing usable (it was killed
    first, by the ladder or the timeout: bwrap's own status stands)."""
    text = data.decode("ascii", "replace")
    if not text.isdigit() or len(text) > 10:
        return None
    try:
        return ExitStatus.from_returncode(os.waitstatus_to_exitcode(int(text)))
    except ValueError:  # not an exit or a signal (a stopped child is never reported)
        return None


@functools.cache
def sandbox_of(kind: str | None, network: bool) -> Sandbox | None:
    """The sandbox of a config (``sandbox``, ``sandbox_network``); None without one. One per process and setting,
    so an agent rebuilt by ``/new`` or ``/resume`` keeps the plans made at the first command."""
    return Sandbox(network=network) if kind == "bwrap" else None


def _real(path: Path) -> str:
    return os.path.realpath(path)


# --- the plan: what is writable, decided once ----------------------------------------------------------

Fingerprint = tuple[object, ...]
_ABSENT: Fingerprint = ("absent",)
_EMPTY: Fingerprint = ("empty",)


def _kind(path: str) -> Fingerprint:
    """What is at ``path`` (not following a last symlink): absent, a symlink and its target, or the file type."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return _ABSENT
    except OSError as exc:
        return ("unreadable", exc.errno)
    if stat.S_ISLNK(info.st_mode):
        try:
            return ("symlink", os.readlink(path))
        except OSError:
            return ("symlink",)
    return (stat.S_IFMT(info.st_mode),)


def _text(path: str) -> Fingerprint:
    """A pointer file (``.git``, ``commondir``, ``gitdir``): its kind and, for a regular file, its size and first
    4 KiB. (A config is held by its kind alone: the user's own git rewrites it, and it is read-only inside.)"""
    kind = _kind(path)
    if kind[0] != stat.S_IFREG:
        return kind
    try:
        size = os.lstat(path).st_size
    except OSError:
        return kind
    return (*kind, size, read_git_file(Path(path)))


def _same(path: str) -> Fingerprint:
    """Which directory ``path`` reaches now (a component swapped for a symlink elsewhere reaches another)."""
    try:
        info = os.stat(path)
    except OSError:
        return _ABSENT
    return ("at", info.st_dev, info.st_ino)


def _empty(path: str) -> Fingerprint:
    """Absent or an empty directory (a mount point bwrap made), else what is there."""
    kind = _kind(path)
    if kind == _ABSENT:
        return _EMPTY
    if kind[0] != stat.S_IFDIR:
        return kind
    try:
        with os.scandir(path) as entries:
            return _EMPTY if next(entries, None) is None else ("not empty",)
    except OSError as exc:
        return ("unreadable", exc.errno)


_CHECKS: dict[str, Callable[[str], Fingerprint]] = {"text": _text, "kind": _kind, "same": _same, "empty": _empty}
_RW, _RO, _RO_TRY, _RO_EMPTY = "--bind", "--ro-bind", "--ro-bind-try", "empty"
_SHOWN_MAX = 200  # characters of a path in the refusal line


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    """The sandbox of one working directory, decided from the disk once (docs/safety.md, "The sandbox").

    ``binds``: (bwrap option, real path) over the read-only root, parents before what lies in them: the
    git directories inside the tree writable, their pointers, config and hooks read-only. ``held``: (path,
    check, what it gave at start) for every pointer and mount point a command could replace or create.
    """

    tree: str
    binds: tuple[tuple[str, str], ...]
    held: tuple[tuple[str, str, Fingerprint], ...]

    def changed(self) -> str | None:
        """The first held path that is not as it was at start, shown relative to the tree and inert; None."""
        for path, check, was in self.held:
            if _CHECKS[check](path) != was:
                return self.shown(path)
        return None

    def shown(self, path: str) -> str:
        relative = os.path.relpath(path, self.tree) if Path(path).is_relative_to(self.tree) else path
        text = json.dumps(relative)[1:-1]  # ASCII: no control, bidi or escape character reaches a line
        return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 1] + "…"

    def mounts(self) -> list[str]:
        """The bind options, in order."""
        out: list[str] = []
        for option, path in self.binds:
            out += ["--tmpfs", path, "--remount-ro", path] if option == _RO_EMPTY else [option, path, path]
        return out


class _Planner:
    """Collects a plan's binds and held paths for a tree (a real path)."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.binds: list[tuple[str, str]] = []
        self.held: list[tuple[str, str, Fingerprint]] = []

    def inside(self, path: Path) -> bool:
        return path.is_relative_to(self.tree)

    def hold(self, path: Path, check: str) -> None:
        self.held.append((str(path), check, _CHECKS[check](str(path))))

    def bind(self, option: str, path: Path) -> None:
        """Mount ``path``; a directory bound must still be the same one at each command (a file bound read-only
        may be rewritten by git outside the sandbox: its kind is held instead, where it matters)."""
        self.binds.append((option, str(path)))
        if option == _RO_EMPTY:
            self.hold(path, "empty")
        elif os.path.isdir(path):
            self.hold(path, "same")

    def read_only(self, path: Path, *, empty_if_missing: bool = False, option: str = _RO) -> None:
        """``path`` read-only where it exists (its real path, if that is inside the tree: outside it is already);
        an empty read-only directory where it does not and ``empty_if_missing``. A symlink is not a mount point
        (its target is): it is held, so one replaced refuses the next command."""
        if os.path.islink(path):
            self.hold(path, "kind")
        real = Path(_real(path))
        if not self.inside(real):
            return
        if real.exists():
            self.bind(option, real)
        elif empty_if_missing:
            self.bind(_RO_EMPTY, real)

    def markers(self, cwd: Path, tree: Path) -> None:
        """``.git`` in each directory from ``cwd`` up to the tree: one appearing or changing would move the tree
        dsh's own git and edit checks see. A ``.git`` file of the tree itself is read-only."""
        for directory in (cwd, *cwd.parents):
            self.hold(Path(_real(directory)) / ".git", "text")
            if directory == tree:
                break
        marker = tree / ".git"
        if marker.is_file() and not marker.is_symlink():
            self.bind(_RO, Path(_real(marker)))  # cannot be pointed at another git dir

    def git_dir(self, directory: Path) -> None:
        """A git directory (a real path): writable only inside the tree, with what git reads and runs read-only.
        Outside the tree it stays as the read-only root shows it; one under the private /tmp is bound read-only
        when it is a git directory (a ``HEAD`` in it). Nothing else a pointer names is bound: ``gitdir:
        /run/user/1000`` would bring back the D-Bus socket the private /run hides, ``/tmp/.X11-unix`` the X server's,
        ``/dev`` the host's devices."""
        if not self.inside(directory):
            shown = directory.is_relative_to("/tmp") and not self.tree.is_relative_to(directory)  # not over the tree
            if shown and directory.is_dir() and (directory / "HEAD").is_file():
                self.bind(_RO, directory)
            return
        if not directory.is_dir():
            self.hold(directory, "kind")  # a git directory made later would hold what git reads
            return
        self.bind(_RW, directory)  # a mount point: it cannot be renamed away and replaced
        self.git_files(directory)
        modules = directory / "modules"
        self.hold(modules, "kind")
        if modules.is_dir() and not modules.is_symlink():
            self.modules(modules)

    def git_files(self, directory: Path) -> None:
        for name in _POINTERS:
            self.hold(directory / name, "text")
        for name in _PROTECTED:
            self.hold(directory / name, "kind")
        for name in (*_POINTERS, *_PROTECTED):
            self.read_only(directory / name)
        self.read_only(directory / "hooks", empty_if_missing=True)  # bwrap makes the mount point, as git init would
        worktrees = directory / "worktrees"  # every linked worktree's pointers and config, not only this one's
        if worktrees.is_dir() and not worktrees.is_symlink():
            entries = list(itertools.islice(worktrees.iterdir(), _MODULES_LIMIT + 1))
            if len(entries) > _MODULES_LIMIT:  # too many to list: all of them read-only
                self.bind(_RO, worktrees)
                return
            for entry in sorted(entries):
                for name in _PER_CHECKOUT:  # not held: `git worktree remove` outside may delete them
                    self.read_only(entry / name, option=_RO_TRY)

    def modules(self, modules: Path) -> None:
        """``modules`` read-only, so no new submodule git directory can be made in it (the superproject's ``git
        status`` would read its config); each existing one writable, with its own files read-only as above."""
        self.bind(_RO, modules)
        found = _submodule_dirs(modules)
        if found is None:  # too many to list: all of it stays read-only (commits in submodules then fail)
            return
        module_dirs, nested = found
        for directory in module_dirs:
            self.bind(_RW, directory)
            self.git_files(directory)
            self.hold(directory / "modules", "kind")
        for directory in nested:
            self.bind(_RO, directory)

    def plan(self) -> SandboxPlan:
        # A mount lies over what is mounted above it: parents first (a stable sort keeps files in their order).
        binds = sorted(self.binds, key=lambda bind: len(Path(bind[1]).parts))
        return SandboxPlan(str(self.tree), tuple(binds), tuple(self.held))


def _common_dir(git_dir: Path) -> Path:
    """Where a linked worktree's git directory keeps the shared config and hooks (its ``commondir`` file)."""
    text = read_git_file(git_dir / "commondir")
    if text is None or not text.strip() or "\0" in text:  # no path holds a NUL
        return git_dir
    return git_dir / text.strip()  # relative to the git dir; an absolute path stays as it is


def _submodule_dirs(modules: Path) -> tuple[list[Path], list[Path]] | None:
    """The submodules' git directories under ``modules`` (``.git/modules/NAME``, a name may hold ``/``, nested
    submodules below each in its own ``modules``), and those nested ``modules`` directories, as real paths. None
    past :data:`_MODULES_LIMIT` directories walked."""
    module_dirs: list[Path] = []
    nested: list[Path] = []
    pending = [modules]
    walked = 0
    while pending:
        directory = pending.pop()
        if directory.is_symlink() or not directory.is_dir():
            continue
        walked += 1
        if walked > _MODULES_LIMIT:
            return None
        if directory.name == "modules" and directory != modules and directory.parent in module_dirs:
            nested.append(directory)
        elif directory != modules and ((directory / "HEAD").is_file() or (directory / "config").is_file()):
            module_dirs.append(directory)
            pending.append(directory / "modules")
            continue
        try:
            pending += sorted(entry for entry in directory.iterdir() if entry.is_dir() and not entry.is_symlink())
        except OSError:
            return None
    return module_dirs, nested


def plan_sandbox(cwd: Path) -> SandboxPlan:
    """What commands run in ``cwd`` may write, from the disk as it is now (docs/safety.md, "The sandbox").

    The tree is the git work tree holding ``cwd`` (``dsh.agent_loop.project``), else ``cwd`` itself: writable.
    The git directory and the common one are writable only inside the tree; ``/``, the tree's parents and
    anything a pointer names outside it never are. ``core.hooksPath`` inside the tree is read-only. ``ValueError``
    when the tree would be ``/``. Blocking (``git config`` reads ``core.hooksPath``).
    """
    found = find_git_dir(cwd)
    tree = found[0] if found is not None else cwd
    real_tree = Path(_real(tree))
    if str(real_tree) == "/":  # the whole file system writable is no sandbox
        raise ValueError("the sandbox cannot run a command whose project tree is / (start dsh in a project)")
    planner = _Planner(real_tree)
    planner.markers(cwd, tree)
    if found is not None:
        git_dir = found[1] if found[1].is_absolute() else tree / found[1]
        for directory in dict.fromkeys((_real(git_dir), _real(_common_dir(git_dir)))):
            planner.git_dir(Path(directory))
    hooks = hooks_path(real_tree)
    if hooks is not None and hooks != real_tree and planner.inside(hooks):
        planner.read_only(hooks, empty_if_missing=True)  # husky's .husky/, a githooks/ folder
    return planner.plan()


def bwrap_argv(
    argv: Sequence[str], *, cwd: Path, network: bool, bwrap: str = BWRAP, plan: SandboxPlan | None = None
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in ``cwd`` under ``plan`` (default: one made now).

    The order matters: a later mount lies over an earlier one, so ``/tmp`` is private before a tree under
    ``/tmp`` is bound into it, and the git directories and their read-only files come after the tree.
    """
    plan = plan_sandbox(cwd) if plan is None else plan
    out = [
        bwrap,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        *_private_run(network),
        "--bind", plan.tree, plan.tree,
        *plan.mounts(),
    ]
    out += ["--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    if not network:
        out.append("--unshare-net")
    # TMPDIR may name a directory that is read-only in here: the private /tmp is the temp directory.
    out += ["--unsetenv", "TMPDIR", "--chdir", _real(cwd), "--", *argv]
    return out


def _private_run(network: bool) -> list[str]:
    """``/run`` (and a ``/var/run`` that is not a link to it) as an empty file system: a read-only mount does not
    stop ``connect()`` on a Unix socket, and those there (the D-Bus buses, Docker's, an agent's) would run or
    reach things outside the sandbox. With the network, the directory ``/etc/resolv.conf`` points into stays."""
    out: list[str] = []
    for path in ("/run", "/var/run"):
        if os.path.isdir(path) and not os.path.islink(path):
            out += ["--tmpfs", path]
    resolver = os.path.dirname(os.path.realpath("/etc/resolv.conf"))
    if network and out and resolver.startswith(("/run/", "/var/run/")):
        out += ["--ro-bind-try", resolver, resolver]
    return out


_HOOKS_PATH_TIMEOUT = 2.0


def hooks_path(tree: Path) -> Path | None:
    """The real path of the directory ``core.hooksPath`` names for ``tree`` (a real path), from any config scope;
    None when it is unset or git cannot tell. Read with ``git config``, which runs no program (blocking, a few ms).

    A relative value is relative to where hooks run, the work tree's root.
    """
    git, path = trusted_git(tree)
    if git is None:
        return None
    try:
        done = subprocess.run([git, "--no-pager", "config", "--type=path", "--get", "core.hooksPath"], cwd=tree,
                              env=child_env(git_env(path)), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_HOOKS_PATH_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = done.stdout.decode("utf-8", "surrogateescape").rstrip("\n")
    if done.returncode != 0 or not value or "\0" in value:
        return None
    return Path(os.path.realpath(tree / value))  # an absolute value stays as it is

# --- the check ---------------------------------------------------------------------------------------

_SETTING = 'sandbox = "bwrap"'
_CHECK = "check it with bwrap --ro-bind / / true"


@dataclass(frozen=True, slots=True)
class SandboxProblem:
    """Why the sandbox cannot work here (``what``) and how to get one (``fix``); :attr:`line` joins them."""

    what: str
    fix: str

    @property
    def line(self) -> str:
        return f"{_SETTING} but {self.what}: {self.fix}"


MISSING = SandboxProblem(
    "bwrap is not installed", "install Debian's bubblewrap package (sudo apt-get install bubblewrap)"
)
NO_USERNS = SandboxProblem(
    "this system does not let bwrap create user namespaces",
    "allow them with sudo sysctl kernel.unprivileged_userns_clone=1 (Debian) or user.max_user_namespaces=15000 "
    "(on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)",
)
TIMED_OUT = SandboxProblem(f"bwrap did not finish a test run in {_PROBE_TIMEOUT:g} s", _CHECK)

# What bwrap and the kernel say when namespaces are not allowed (bubblewrap's own wording; Ubuntu's AppArmor
# restriction shows as a refused uid map or loopback setup).
_USERNS_MARKERS = (
    "no permissions to create new namespace",
    "creating new namespace failed",
    "setting up uid map",
    "unprivileged_userns_clone",
    "max_user_namespaces",
    "failed rtm_newaddr",
)


def classify_failure(status: int, stderr: str) -> SandboxProblem:
    """The problem of a test run of bwrap that failed with ``status``; ``stderr`` picks a category, never shown."""
    lowered = stderr.lower()
    if any(marker in lowered for marker in _USERNS_MARKERS):
        return NO_USERNS
    return SandboxProblem(f"bwrap cannot start a sandbox here (exit status {status})", _CHECK)


def sandbox_problem(env: Mapping[str, str] | None = None) -> str | None:
    """:func:`sandbox_check` as the one line dsh refuses to start with; None when the sandbox works."""
    problem = sandbox_check(env)
    return None if problem is None else problem.line


def sandbox_check(env: Mapping[str, str] | None = None) -> SandboxProblem | None:
    """Why the bwrap sandbox cannot work here, with the fix; None when a test run succeeds.

    Runs ``bwrap`` once with the namespaces a command gets (a few ms); blocking, for start-up and doctor.
    """
    source = os.environ if env is None else env
    binary = shutil.which(BWRAP, path=source.get("PATH", os.defpath))
    if binary is None:
        return MISSING
    probe = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
             "--unshare-pid", "--unshare-net", "--die-with-parent", "--cap-drop", "ALL", "--", "true"]
    try:
        done = subprocess.run(
            probe, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={"PATH": source.get("PATH", os.defpath)}, timeout=_PROBE_TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired:
        return TIMED_OUT
    except OSError:  # found on PATH but not executable, or gone since
        return MISSING
    if done.returncode == 0:
        return None
    return classify_failure(done.returncode, done.stderr.decode("utf-8", "replace"))
