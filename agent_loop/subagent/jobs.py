"""One-shot background subagent jobs, and the ``job_output`` / ``job_list`` / ``job_kill`` tools.

A :class:`JobManager` (the REPL holds one per session) is an async context manager: ``async with``
holds the task group its jobs run in, so jobs outlive the tool call that started them but not the
block, and leaving it kills and disposes every run still going. Job ids are ``subagent-1``, ``subagent-2``…

Status: ``running``; ``completed``; ``killed`` = local cancellation (``job_kill`` or the
manager closing); ``failed`` = anything else, shown with the stop reason and, when there is one, the
same bounded diagnostic the foreground tool shows:

    [status: running]    [status: completed]    [status: killed]
    [status: failed, error; diagnostic: Subagent failure (provider: probe; stage: session-run; …)]

When a job settles (other than killed) the owner gets, through the agent's notice hook,
``background job <id> (subagent: <label>) finished <status line>. Read its output with job_output.``
The label is the configured subagent name — never the model's description or prompt. That text is
the model's; the user's screen gets :func:`user_notice` instead (what ended, how, and how long it ran),
and ``/jobs``, ``/job ID``, ``/kill ID`` read the same jobs (:func:`age_text`).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc

from dsh.agent_loop.owned_group import OwnedTaskGroup
from dsh.agent_loop.subagent.diagnostics import safe_token
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.agent_loop.subagent.run import AnyProvider, AnyRun
from dsh.agent_loop.tools import Tool, ToolContext, ToolOutput

__all__ = [
    "DEFAULT_WAIT_MS",
    "Job",
    "JobManager",
    "JobStatus",
    "age_text",
    "job_tools",
    "notice_text",
    "run_subagent",
    "status_line",
    "user_notice",
]

log = logging.getLogger(__name__)

JobStatus = Literal["running", "completed", "failed", "killed"]
DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 600_000
NO_NEW_OUTPUT = "(no new output)"
_KILL_GRACE = 5.0  # how long job_kill lets a cancelled run settle before cancelling its task


# -- running one subagent to completion (shared with the foreground tool) --------------------------


async def run_subagent(
    provider: AnyProvider,
    request: SubagentRequest,
    *,
    on_started: Callable[[AnyRun], None] | None = None,
) -> SubagentResult:
    """One run, start to dispose, in a task group held here. Never raises for a child failure."""
    async with provider.run(request) as run:
        if on_started is not None:
            on_started(run)
        return await run.result()


# -- status texts ----------------------------------------------------------------------------------


def status_line(status: JobStatus, result: SubagentResult | None) -> str:
    if status != "failed" or result is None:
        return f"[status: {status}]"
    reason = safe_token(result.stop_reason)
    if result.diagnostic:
        return f"[status: failed, {reason}; diagnostic: {result.diagnostic}]"
    return f"[status: failed, {reason}]"


def notice_text(job_id: str, label: str, status: JobStatus, result: SubagentResult | None) -> str:
    return (
        f"background job {job_id} (subagent: {label}) finished {status_line(status, result)}. "
        "Read its output with job_output."
    )


def age_text(seconds: float) -> str:
    """``4s``, ``2m05s``, ``1h02m``: short enough for a column."""
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{total // 60 % 60:02d}m"


def user_notice(job: Job) -> str:
    """The completion line the user sees (the model gets :func:`notice_text`); closed values only.

    No run time here, so that a transcript reads the same every time; ``/jobs`` shows ages.
    """
    result = job.result
    if job.status == "failed" and result is not None:
        why = (result.diagnostic or "").split("\n")[0] or f"stop reason {safe_token(result.stop_reason)}"
        head = f"{job.id} ({job.label}) failed: {why}"
    else:
        head = f"{job.id} ({job.label}) {job.status}"
    return f"{head} · /job {job.id} shows its output"


# -- jobs ------------------------------------------------------------------------------------------


@dataclass
class Job:
    id: str
    label: str  # the configured subagent name
    status: JobStatus = "running"
    result: SubagentResult | None = None
    kill_requested: bool = False
    _run: AnyRun | None = None
    _scope: anyio.CancelScope | None = None
    _settled: anyio.Event = field(default_factory=anyio.Event)
    _returned: str = ""  # output already handed out by job_output
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None  # time.monotonic() when it settled

    def age(self, now: float | None = None) -> float:
        """Seconds it has run (until it settled)."""
        end = self.ended if self.ended is not None else (time.monotonic() if now is None else now)
        return max(0.0, end - self.started)

    @property
    def settled(self) -> bool:
        return self._settled.is_set()

    @property
    def status_line(self) -> str:
        return status_line(self.status, self.result)

    def output_so_far(self) -> str:
        if self.result is not None:
            return self.result.output
        return self._run.output_so_far() if self._run is not None else ""

    def take_new_output(self) -> str:
        """Output not yet handed out (everything, if the provider's text was rewritten meanwhile)."""
        text = self.output_so_far()
        fresh = text[len(self._returned) :] if text.startswith(self._returned) else text
        if len(text) >= len(self._returned):
            self._returned = text
        return fresh

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait (bounded) for settlement; True once settled."""
        if timeout is None:
            await self._settled.wait()
        else:
            with anyio.move_on_after(timeout):
                await self._settled.wait()
        return self.settled


class JobManager:
    """Background subagent jobs of one session. ``async with`` it: the block holds the jobs' task group."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self._owned = OwnedTaskGroup()
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> JobManager:
        if self._owned.group is not None or self._closed:
            raise RuntimeError("a job manager is entered once")
        await self._owned.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.aclose()  # every job settles
        finally:
            await self._owned.close()

    @property
    def available(self) -> bool:
        """True while the manager can start jobs (inside its ``async with`` block)."""
        return self._owned.group is not None and not self._closed

    async def wait_all(self) -> None:
        """Wait until every job started so far has settled (piped mode waits for them at EOF)."""
        for job in list(self._jobs.values()):
            await job.wait()

    async def aclose(self) -> None:
        """Kill every running job (their runs are disposed) and start no more. Idempotent; any task."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            running = [job for job in self._jobs.values() if not job.settled]
            for job in running:
                job.kill_requested = True
                if job._scope is not None:
                    job._scope.cancel()
            for job in running:
                await job.wait()

    # -- jobs ------------------------------------------------------------------------------------

    def get(self, job_id: object) -> Job | None:
        return self._jobs.get(job_id) if isinstance(job_id, str) else None

    @property
    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    async def spawn(
        self,
        provider: AnyProvider,
        request: SubagentRequest,
        *,
        post_notice: Callable[[str, str], None] | None = None,
    ) -> Job:
        """Start a background run; returns at once with the running job."""
        tg = self._owned.group
        if tg is None or self._closed:
            raise RuntimeError("the job manager is not open (use `async with`)")
        job = Job(id=f"subagent-{next(self._ids)}", label=safe_token(provider.name))
        self._jobs[job.id] = job
        tg.start_soon(self._run_job, job, provider, request, post_notice, name=job.id)
        return job

    async def _run_job(
        self,
        job: Job,
        provider: AnyProvider,
        request: SubagentRequest,
        post_notice: Callable[[str, str], None] | None,
    ) -> None:
        result: SubagentResult | None = None

        def attach(run: AnyRun) -> None:
            job._run = run

        try:
            with anyio.CancelScope() as scope:
                job._scope = scope
                if job.kill_requested:
                    scope.cancel()
                result = await run_subagent(provider, request, on_started=attach)
        except Exception:  # run_subagent promises not to raise; stay safe anyway
            log.exception("background job %s failed unexpectedly", job.id)
            result = SubagentResult("", "error")
        finally:
            job._scope = None
        locally_cancelled = job.kill_requested and (
            result is None or (result.stop_reason == "aborted" and result.diagnostic is None)
        )
        job.result = result if result is not None else SubagentResult(job.output_so_far(), "aborted")
        if locally_cancelled:
            job.status = "killed"
        elif job.result.stop_reason == "completed":
            job.status = "completed"
        else:
            job.status = "failed"
        job._run = None
        job.ended = time.monotonic()
        job._settled.set()
        if job.status != "killed" and post_notice is not None:
            try:
                post_notice(notice_text(job.id, job.label, job.status, job.result), job.id)
            except Exception:
                log.exception("could not post the notice of background job %s", job.id)

    async def kill(self, job: Job) -> None:
        """Local cancellation: the run settles ``aborted`` (killed); bounded, then the task is cancelled."""
        if job.settled:
            return
        job.kill_requested = True
        run = job._run
        if run is not None:
            await run.cancel()
        settled_by_cancel = run is not None and await job.wait(_KILL_GRACE)
        if not settled_by_cancel and job._scope is not None:
            job._scope.cancel()
        await job.wait()

    def kill_soon(self, job: Job, then: Callable[[Job], None]) -> None:
        """:meth:`kill` in the manager's task group, returning at once; ``then(job)`` once it has settled
        (``/kill`` gives the prompt back at once and reports the kill when it lands)."""
        tg = self._owned.group
        if tg is None:
            raise RuntimeError("the job manager is not open (use `async with`)")

        async def kill_then_report() -> None:
            await self.kill(job)
            then(job)

        tg.start_soon(kill_then_report, name=f"kill {job.id}")

    # -- views -----------------------------------------------------------------------------------

    def jobs_summary(self) -> list[str]:
        """One line per job, for ``/jobs`` and ``job_list``."""
        return [f"{job.id} (subagent: {job.label}) {job.status_line}" for job in self._jobs.values()]


# -- the job tools ---------------------------------------------------------------------------------


def _unknown_job(jobs: JobManager) -> ToolOutput:
    # The model's job_id is never echoed back (it is tool input).
    known = ", ".join(job.id for job in jobs.jobs) or "none"
    return ToolOutput(f"unknown job id (known jobs: {known})", is_error=True)


def _wait_seconds(args: Mapping[str, Any]) -> float:
    raw = args.get("timeout_ms", DEFAULT_WAIT_MS)
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
        raw = DEFAULT_WAIT_MS
    return min(float(raw), MAX_WAIT_MS) / 1000.0


def job_tools(jobs: JobManager) -> list[Tool]:
    """``job_output``, ``job_list`` and ``job_kill`` over ``jobs``."""

    async def job_output(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        job = jobs.get(args.get("job_id"))
        if job is None:
            return _unknown_job(jobs)
        if args.get("wait") is True and not job.settled:
            await job.wait(_wait_seconds(args))
        text = job.take_new_output() or NO_NEW_OUTPUT
        diagnostic = job.result.diagnostic if job.settled and job.result is not None else None
        # Reading worked, so this is no tool error; a failed job's diagnostic still gets its own line.
        return ToolOutput(f"{text}\n{job.status_line}", diagnostic=diagnostic)

    async def job_list(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("\n".join(jobs.jobs_summary()) or "(no jobs)")

    async def job_kill(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        job = jobs.get(args.get("job_id"))
        if job is None:
            return _unknown_job(jobs)
        if job.settled:
            return ToolOutput(f"background job {job.id} had already finished\n{job.status_line}")
        await jobs.kill(job)
        return ToolOutput(f"killed background job {job.id}\n{job.status_line}")

    job_id = {"type": "string", "description": "The job id, e.g. subagent-1"}
    return [
        Tool(
            "job_output",
            "Read new output of a background subagent job and its status. With wait=true, wait (up to "
            "timeout_ms, default 30000) for the job to finish first.",
            {
                "type": "object",
                "properties": {
                    "job_id": job_id,
                    "wait": {"type": "boolean", "description": "Wait for the job to finish first"},
                    "timeout_ms": {"type": "integer", "description": "How long to wait, in milliseconds"},
                },
                "required": ["job_id"],
            },
            job_output,
            concurrency_safe=True,
        ),
        Tool(
            "job_list",
            "List background subagent jobs with their status.",
            {"type": "object", "properties": {}},
            job_list,
            concurrency_safe=True,
        ),
        Tool(
            "job_kill",
            "Stop a running background subagent job.",
            {"type": "object", "properties": {"job_id": job_id}, "required": ["job_id"]},
            job_kill,
        ),
    ]
