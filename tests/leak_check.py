"""The "no leftover processes" check that any test may use (registered as fixtures by tests/conftest.py).

``no_leftover_processes`` makes the test process a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``)
so that an orphaned grandchild is re-parented to us instead of to init — then "every live process
below us" is exactly what a test may have leaked (read from each descendant's ``/proc/PID/task/*/children``,
never from every process on the machine). After the test it waits briefly for stragglers, kills whatever is
still alive (so one leak cannot poison later tests) and fails the test.

Use it with ``pytestmark = pytest.mark.usefixtures("no_leftover_processes")`` or as an argument;
``leak_check()`` is the same check as a context manager (e.g. around a module-scoped fixture).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterator

import pytest

from dsh.agent_loop.process import proc_stat_fields

_PR_SET_CHILD_SUBREAPER = 36
_LEFTOVER_GRACE_S = 3.0


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def child_pids(pid: int) -> set[int]:
    """``pid``'s children, from ``/proc/PID/task/*/children``: no other process on the machine is read."""
    children: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{task}/children") as handle:
            children.update(int(child) for child in handle.read().split())
    return children


def _descendants(root: int) -> set[int]:
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in child_pids(stack.pop()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _is_zombie(pid: int) -> bool:
    fields = proc_stat_fields(pid)
    return fields is None or fields[0] == b"Z"  # gone counts as dead too


def live_descendants() -> set[int]:
    """Live (non-zombie) processes below the test process."""
    return {pid for pid in _descendants(os.getpid()) if not _is_zombie(pid)}


def live_processes_running(*argv: str) -> list[int]:
    """Pids of live processes anywhere on the machine whose command line is exactly ``argv`` (``sleep TOKEN``
    with a token of the test's own): for what may have escaped the test's tree (a ``setsid`` child, a sandbox's
    own pid namespace), where :func:`live_descendants` cannot look."""
    wanted = "".join(f"{arg}\0" for arg in argv).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if cmdline == wanted and not _is_zombie(int(entry)):
            found.append(int(entry))
    return found


def _reap_adopted_orphans() -> None:
    # Re-parented grandchildren become our zombies. Only reap those nobody else waits for: a member of
    # a foreign process group that is not its leader can only be ours by adoption (asyncio and
    # subprocess wait for the children they spawned, which are leaders or share our group).
    own_pgrp = os.getpgrp()
    for pid in child_pids(os.getpid()):
        fields = proc_stat_fields(pid)
        if fields is not None and fields[0] == b"Z" and int(fields[2]) not in (own_pgrp, pid):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


@contextlib.contextmanager
def leak_check() -> Iterator[None]:
    """Fail (after killing them) if processes started inside the block outlive it."""
    _become_subreaper()
    before = live_descendants()
    yield
    deadline = time.monotonic() + _LEFTOVER_GRACE_S
    leftover = live_descendants() - before
    while leftover and time.monotonic() < deadline:
        time.sleep(0.05)
        leftover = live_descendants() - before
    for pid in leftover:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _reap_adopted_orphans()
    if leftover:
        pytest.fail(f"left {len(leftover)} process(es) behind: {sorted(leftover)}")


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    with leak_check():
        yield


@pytest.fixture(scope="session")
def leak_checker() -> object:
    """``leak_check`` for fixtures of wider scope (conftest modules cannot be imported by name)."""
    return leak_check
