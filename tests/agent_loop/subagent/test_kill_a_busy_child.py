"""``/kill`` of a background job whose real child dsh is working on a long turn (docs/subagents.md, ``/kill``).

The child is ``dsh serve --stdio`` against the fault server, its request stalled (a long turn). A child
that answers ``shutdown`` is let go politely; one that does not answer within 250 ms (its process stopped
here: a child stuck where its event loop cannot run) has its process group signalled at once. The wrong
path waited for the whole ``shutdown_timeout`` (60 s here) and two 2 s graces.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from dsh.agent_loop.process import live_group_members
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.jobs import Job, JobManager
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.waiting import PROMPTLY, async_wait_until

SIGNALLED = "no answer to shutdown within 250 ms of a cancel; signalling its process group"
GONE_WITHIN = 3.0  # generous: the polite path alone used to take 4-6 s, and 60 s+ with this table


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def host_log() -> Iterator[_Lines]:
    lines = _Lines()
    logger = logging.getLogger("dsh.agent_loop.subagent")
    old_level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(old_level)


async def _kill_mid_turn(workdir: Path, *, stop_the_child: bool) -> tuple[Job, float, int]:
    """Start the job, wait until the child's request reached the server, kill it; (job, seconds, pid)."""
    async with FaultServer(script=[Behaviour("stall_before_headers")]) as server:
        parent = ParentContext(model="probe-model", base_url=server.url, api_key="sk-kill-test-0123456789")
        provider = build_provider("worker", {"provider": "dsh", "shutdown_timeout": 60}, parent)
        async with JobManager() as jobs:
            job = await jobs.spawn(provider, SubagentRequest("work", "a long task", str(workdir)))
            await async_wait_until(lambda: server.requests, PROMPTLY, "the child's model request")
            assert job._run is not None and job._run.process is not None and job._run.process.pid is not None
            pid = job._run.process.pid
            if stop_the_child:
                os.kill(pid, signal.SIGSTOP)  # its loop cannot answer shutdown (nor act on SIGTERM unless continued)
            started = time.monotonic()
            with anyio.fail_after(PROMPTLY * 4):
                await jobs.kill(job)
            return job, time.monotonic() - started, pid


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_kill_signals_the_group_of_a_child_that_does_not_answer_shutdown(workdir: Path, host_log: _Lines) -> None:
    job, seconds, pid = await _kill_mid_turn(workdir, stop_the_child=True)
    assert job.status == "killed" and job.status_line == "[status: killed]"
    assert seconds < GONE_WITHIN, f"the kill took {seconds:.1f}s"
    assert live_group_members(pid) == []
    assert any(SIGNALLED in line for line in host_log.lines), host_log.lines
    # The job's age (the /kill line's "after Ns") stops when it was killed, not seconds later.
    assert job.age() < seconds + PROMPTLY


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
async def test_kill_lets_a_child_that_answers_shutdown_go_politely(workdir: Path, host_log: _Lines) -> None:
    job, seconds, pid = await _kill_mid_turn(workdir, stop_the_child=False)
    assert job.status == "killed"
    assert seconds < GONE_WITHIN, f"the kill took {seconds:.1f}s"
    assert live_group_members(pid) == []
    assert not any(SIGNALLED in line or "shutdown request failed" in line for line in host_log.lines), host_log.lines
