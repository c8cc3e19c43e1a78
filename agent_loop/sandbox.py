"""``run_shell`` under bubblewrap: the argv of one sandboxed command, and the check that the sandbox works.

The rules (docs/safety.md, "The sandbox"): the project tree read-write, except the git directory's
``config`` and ``hooks`` (read-only, so a command cannot plant a program that a later ``git`` runs), the rest
of the file system read-only, a private ``/tmp``, no network unless ``sandbox_network = true``.

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
  command cannot move ``.git`` aside and put a directory with its own config in its place.
- Each submodule's git directory under ``modules`` likewise (and every directory on the way to it): the
  superproject's ``git status`` reads its config, so a ``core.fsmonitor`` planted there would run unsandboxed.
- The command's real wait status: bwrap exits 128+N for a command killed by signal N (its ``--json-status-fd``
  says the same), which an ``exit 137`` also gives. With ``status_fd`` a small reaper (:data:`_REAPER`, run by
  dsh's own Python inside the sandbox) starts the command, waits for it and writes its raw wait status to that
  pipe, which the command itself never holds; :func:`wait_status` reads it back (docs/safety.md).

The check runs ``bwrap`` once with the same namespaces and sorts its failure into closed categories; its
stderr stays host-side (only the category reaches a line).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.agent_loop.process import ExitStatus
from dsh.agent_loop.project import find_git_dir, read_git_file

__all__ = [
    "BWRAP",
    "SANDBOX_KINDS",
    "Sandbox",
    "SandboxProblem",
    "bwrap_argv",
    "classify_failure",
    "sandbox_check",
    "sandbox_of",
    "sandbox_problem",
    "wait_status",
]

BWRAP = "bwrap"
SANDBOX_KINDS = ("bwrap",)
_PROBE_TIMEOUT = 10.0
_PROTECTED = ("config", "config.worktree", "hooks")  # what a later git reads and runs
_PER_CHECKOUT = ("commondir", "config.worktree")  # a linked worktree's pointer to its config, and its own config
_MODULES_LIMIT = 200  # directories walked under .git/modules; past it the whole of it is read-only


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How ``run_shell`` wraps each command: ``network`` is ``sandbox_network``."""

    network: bool = False

    def wrap(self, argv: Sequence[str], *, cwd: str | os.PathLike[str], status_fd: int | None = None) -> list[str]:
        """``argv`` inside bubblewrap, for a command run in ``cwd``; ``OSError`` when there is no ``bwrap``,
        ``ValueError`` when the tree would be ``/``. With ``status_fd`` (the write end of a pipe the child
        inherits) the command's wait status is written to it (:func:`wait_status`)."""
        binary = shutil.which(BWRAP, path=os.environ.get("PATH", os.defpath))
        if binary is None:
            raise FileNotFoundError(f"{BWRAP} is not on PATH")
        python = _reaper_python()
        if status_fd is not None and python is not None:
            argv = [python, "-I", "-S", "-c", _REAPER, str(status_fd), *argv]
        return bwrap_argv(argv, cwd=Path(cwd), network=self.network, bwrap=binary)


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


def sandbox_of(kind: str | None, network: bool) -> Sandbox | None:
    """The session's sandbox from its config (``sandbox``, ``sandbox_network``); None without one."""
    return Sandbox(network=network) if kind == "bwrap" else None


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _common_dir(git_dir: Path) -> Path:
    """Where a linked worktree's git directory keeps the shared config and hooks (its ``commondir`` file)."""
    text = read_git_file(git_dir / "commondir")
    if text is None or not text.strip():
        return git_dir
    return git_dir / text.strip()  # relative to the git dir; an absolute path stays as it is


def _git_binds(tree: Path, git_dir: Path) -> list[str]:
    """Binds that keep a git directory usable but its config and hooks read-only (docs/safety.md)."""
    binds: list[str] = []
    marker = tree / ".git"
    if marker.is_file() and not marker.is_symlink():
        binds += ["--ro-bind", _real(marker), _real(marker)]  # cannot be pointed at another git dir
    common = _common_dir(git_dir)
    dirs = list(dict.fromkeys(_real(path) for path in (common, git_dir) if path.is_dir()))
    for directory in dirs:  # writable, and a mount point: it cannot be renamed away
        binds += ["--bind", directory, directory]
    readonly: list[Path] = []
    for git_path in map(Path, dirs):
        readonly += [git_path / name for name in _PROTECTED]
        readonly += [git_path / name for name in _PER_CHECKOUT]
        worktrees = git_path / "worktrees"  # every linked worktree's pointer and config, not only this one's
        if worktrees.is_dir() and not worktrees.is_symlink():
            for entry in sorted(worktrees.iterdir()):
                readonly += [entry / name for name in _PER_CHECKOUT]
    hooks_dirs = [Path(dirs[0]) / "hooks"] if dirs else []
    for git_path in map(Path, dirs):
        modules = _submodule_binds(git_path / "modules")
        if modules is None:  # too many to list: the whole directory read-only (submodule commits then fail)
            binds += ["--ro-bind", _real(git_path / "modules"), _real(git_path / "modules")]
            continue
        mount_points, module_dirs = modules
        for mount in mount_points:  # each a mount point, so none can be renamed and replaced
            binds += ["--bind", _real(mount), _real(mount)]
        for module in module_dirs:
            readonly += [module / name for name in _PROTECTED]
            hooks_dirs.append(module / "hooks")
    for path in dict.fromkeys(readonly):
        if path.exists():
            binds += ["--ro-bind", _real(path), _real(path)]
    for hooks in hooks_dirs:
        if not hooks.exists() and not hooks.is_symlink():
            # No hooks directory: an empty read-only one takes its place (bwrap creates the mount point on
            # disk, as `git init` would), so a command cannot create one with a hook in it.
            binds += ["--tmpfs", _real(hooks), "--remount-ro", _real(hooks)]
    return binds


def _submodule_binds(modules: Path) -> tuple[list[Path], list[Path]] | None:
    """The submodules' git directories under ``modules`` (``.git/modules/NAME``, a name may hold ``/``,
    nested submodules below each), and every directory on the way to them: their ``config`` and ``hooks``
    are what a later ``git status`` in the superproject reads and runs. None past :data:`_MODULES_LIMIT`."""
    mount_points: list[Path] = []
    module_dirs: list[Path] = []
    pending = [modules]
    while pending:
        directory = pending.pop()
        if directory.is_symlink() or not directory.is_dir():
            continue
        mount_points.append(directory)
        if len(mount_points) > _MODULES_LIMIT:
            return None
        if directory != modules and ((directory / "HEAD").is_file() or (directory / "config").is_file()):
            module_dirs.append(directory)
            pending.append(directory / "modules")
            continue
        try:
            pending += sorted(entry for entry in directory.iterdir() if entry.is_dir() and not entry.is_symlink())
        except OSError:
            return None
    return mount_points, module_dirs


def bwrap_argv(argv: Sequence[str], *, cwd: Path, network: bool, bwrap: str = BWRAP) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in ``cwd`` under the sandbox's rules.

    The tree is the git work tree holding ``cwd`` (``dsh.agent_loop.project``), else ``cwd`` itself. The
    order matters: a later mount lies over an earlier one, so ``/tmp`` is private before a tree under
    ``/tmp`` is bound into it, and the read-only git files come last.
    """
    found = find_git_dir(cwd)
    tree = found[0] if found is not None else cwd
    real_tree = _real(tree)
    if real_tree == "/":  # the whole file system writable is no sandbox
        raise ValueError("the sandbox cannot run a command whose project tree is / (start dsh in a project)")
    out = [
        bwrap,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        *_private_run(network),
        "--bind", real_tree, real_tree,
    ]
    if found is not None:
        out += _git_binds(tree, found[1] if found[1].is_absolute() else tree / found[1])
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
