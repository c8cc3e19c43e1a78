"""What the two product providers (Claude Code, Codex) share besides the run: table entries and escapees."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence

from dsh.agent_loop.process import proc_stat_fields
from dsh.agent_loop.subagent.result import SubagentRequest

__all__ = ["descendants", "explicit_env", "kill_survivors"]


def explicit_env(env: Mapping[str, str], pass_env: Sequence[str], request: SubagentRequest) -> dict[str, str]:
    """The explicit entries for the child: config ``env``, named parent variables, the request's env.

    ``ManagedProcess`` adds these to its allowlist; nothing else of the parent reaches the child.
    """
    merged = dict(env)
    for name in pass_env:
        if name in os.environ:
            merged[name] = os.environ[name]
    merged.update(request.env)
    return merged


# -- escapees ------------------------------------------------------------------------------------
# The products start helpers in sessions of their own (Codex's shell-snapshot login shell, for one),
# out of reach of the process-group kill. Teardown therefore notes every descendant while the leader
# still lives and kills whatever of them outlives the ladder. Each is identified by pid *and* start
# time, so a recycled pid is never hit.


def descendants(root: int) -> dict[int, bytes]:
    """pid -> start time of every live process below ``root`` (Linux ``/proc``; empty elsewhere)."""
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return {}
    children: dict[int, list[int]] = {}
    started: dict[int, bytes] = {}
    for pid in entries:
        fields = proc_stat_fields(pid)
        if fields is None or len(fields) < 20 or fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(pid)
        started[pid] = fields[19]  # field 22: start time since boot
    found: dict[int, bytes] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found[child] = started[child]
                stack.append(child)
    return found


def kill_survivors(noted: dict[int, bytes]) -> int:
    """SIGKILL the noted processes that are still alive (same pid, same start time). Returns how many."""
    killed = 0
    for pid, start in noted.items():
        fields = proc_stat_fields(pid)
        if fields is None or len(fields) < 20 or fields[0] == b"Z" or fields[19] != start:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed
