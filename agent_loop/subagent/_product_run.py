"""What the two product providers (Claude Code, Codex) share: the one-shot run and config helpers.

A product run is one delegated task: spawn the product, hand it the prompt, wait for its terminal
message, tear it down. :class:`OneShotRun` drives all of that inside the first :meth:`result` call, in
the caller's task, so every resource it opens (task groups, the JSON-RPC connection, the child process)
is entered and left in one task. :meth:`cancel` and :meth:`dispose` may come from other tasks: they
only signal, and ``dispose`` then waits for the run to settle.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from dsh.agent_loop.subagent import SubagentConfigError
from dsh.agent_loop.subagent.diagnostics import join_lines, product_failure
from dsh.agent_loop.subagent.process import ExitStatus, proc_stat_fields
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult

__all__ = [
    "ABORTED",
    "OneShotRun",
    "ProductFailure",
    "SettledRun",
    "config_names",
    "configuration_failure",
    "descendants",
    "explicit_env",
    "failure_diagnostic",
    "kill_survivors",
]

ABORTED = SubagentResult(output="", stop_reason="aborted", diagnostic=None)


class OneShotRun:
    """Runs :meth:`_execute` once, on the first :meth:`result` call; later calls get the same result.

    Subclasses implement ``_execute`` and watch :attr:`cancel_requested` (an ``anyio.Event``) to stop
    early; a locally cancelled run settles as ``aborted`` with no diagnostic.
    """

    def __init__(self) -> None:
        self.cancel_requested = anyio.Event()
        self._settled = anyio.Event()
        self._result: SubagentResult | None = None
        self._running = False
        self._disposed = False

    async def _execute(self) -> SubagentResult:  # pragma: no cover - abstract
        raise NotImplementedError

    async def result(self) -> SubagentResult:
        if self._result is not None:
            return self._result
        if self._running:
            await self._settled.wait()
            return self._result if self._result is not None else ABORTED
        if self._disposed or self.cancel_requested.is_set():
            self._result = ABORTED
            return ABORTED
        self._running = True
        try:
            self._result = await self._execute()
        finally:
            self._running = False
            self._settled.set()
        return self._result

    async def cancel(self) -> None:
        self.cancel_requested.set()

    async def dispose(self) -> None:
        """Idempotent: stop a run in progress and wait until its child is gone."""
        self._disposed = True
        self.cancel_requested.set()
        if self._running:
            await self._settled.wait()


class SettledRun(OneShotRun):
    """A run that never starts a child: its result is fixed (e.g. an unusable configuration)."""

    def __init__(self, result: SubagentResult) -> None:
        super().__init__()
        self._fixed = result

    async def _execute(self) -> SubagentResult:
        return self._fixed


def configuration_failure(product: str, stage: str) -> SettledRun:
    """The run of a provider whose table is unusable: ``error`` with ``category: configuration``."""
    line = product_failure(product, stage, "configuration")
    return SettledRun(SubagentResult(output="", stop_reason="error", diagnostic=line))


# -- config helpers -------------------------------------------------------------------------------
# The scalar ones are the registry's (``dsh.agent_loop.subagent.config_*``, raising SubagentConfigError that
# names the table and key only); these cover what the product tables add.


def config_names(name: str, config: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A list of names (``pass_env``, ``setting_sources``); empty when absent."""
    value = config.get(key, [])
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise SubagentConfigError(name, f"{key} must be a list of strings")
    return tuple(value)


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


@dataclass(slots=True)
class ProductFailure:
    """Where and how a product run failed: closed facts for the line, the raw cause for the host log."""

    stage: str
    category: str
    http_status: int | None = None
    exit_status: ExitStatus | None = None
    cause: BaseException | None = None
    stop_reason: str = "error"

    def line(self, product: str) -> str:
        return product_failure(product, self.stage, self.category, self.http_status, self.exit_status)


def failure_diagnostic(
    log: logging.Logger,
    product: str,
    failure: ProductFailure | None,
    teardown: ProductFailure | None,
    decision: str | None,
) -> str | None:
    """The failure line, then the teardown line, then the unattended decision; logged host-side with
    the raw cause chain (the diagnostic itself never holds it)."""
    diagnostic = join_lines(
        failure.line(product) if failure else None, teardown.line(product) if teardown else None, decision
    )
    cause = (failure.cause if failure else None) or (teardown.cause if teardown else None)
    if diagnostic is not None:
        log.info("%s subagent run failed: %s", product, diagnostic.replace("\n", " | "), exc_info=cause)
    return diagnostic
