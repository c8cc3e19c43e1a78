"""Agent-loop benchmarks: a full turn over the client alone, 10x scaling, resuming a 100 000-event log."""

from __future__ import annotations

import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import subjects
from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios, repeat_sync
from bench.stream import tiny_stream

__all__ = ["PROMPT", "agent_turn", "loop_vs_client", "resume_100k", "scaling_10x", "temp_root"]

PROMPT = "Write a long answer."


@contextlib.contextmanager
def temp_root(prefix: str) -> Any:
    path = Path(tempfile.mkdtemp(prefix=f"dsh-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def agent_turn(
    stack: contextlib.AsyncExitStack, base_url: str, root: Path, *, tools: bool = False, redactor: Any = None
) -> Callable[[], Awaitable[float]]:
    """One full turn of a fresh agent with its own session log; times ``run_turn`` only. ``redactor``: the
    agent's (default: one that knows the client's key)."""
    from dsh.agent_loop import Agent, SessionLog, ToolRegistry, default_tools
    from dsh.llm import DeepSeekClient

    client = DeepSeekClient(base_url=base_url, api_key=subjects.BENCH_KEY)
    stack.push_async_callback(client.aclose)

    async def run() -> float:
        session = SessionLog.create(root, cwd=root)
        agent = Agent(client, session=session, tools=default_tools(None) if tools else ToolRegistry(), cwd=root,
                      redactor=redactor)
        try:
            start = time.perf_counter()
            reason = await agent.run_turn(PROMPT)
            elapsed = time.perf_counter() - start
        finally:
            await agent.aclose()
        if reason.kind != "completed":
            raise RuntimeError(f"the bench turn ended {reason.to_dict()}")
        return elapsed

    return run


async def loop_vs_client(settings: Settings, server: BenchServer) -> list[Figure]:
    """A full agent turn (events, reply assembly, durable log append) over the client alone."""
    stream = tiny_stream(settings)
    base = server.base_url(stream)
    counts: list[int] = []
    with temp_root("loop") as root:
        async with contextlib.AsyncExitStack() as stack:
            samples = await paired_async(
                settings,
                {"loop": agent_turn(stack, base, root), "client": subjects.dsh_client(stack, base, counts)},
            )
    return [
        Figure(
            "loop_vs_client",
            "x",
            Stats.of(ratios(samples["loop"], samples["client"])),
            details={
                "stream": stream,
                "loop_ms": round(statistics.median(samples["loop"]) * 1000, 1),
                "client_ms": round(statistics.median(samples["client"]) * 1000, 1),
            },
        )
    ]


def scaling_streams(settings: Settings) -> tuple[str, str]:
    base = settings.size(50_000, 10_000)
    return f"tiny-{base}", f"tiny-{base}-x10"


async def scaling_10x(settings: Settings, server: BenchServer) -> list[Figure]:
    """A full agent turn at 10x the deltas over the same turn at 1x (linear is about 10).

    Each sample sets one 10x turn against ten 1x turns run back to back, so both sides of a
    sample take about as long and a burst of load on the shared machine hits both; the sample is
    ``10 * T(10x) / T(ten 1x)``. (Ten 1x turns pay the fixed per-turn cost ten times, which biases
    the figure slightly below 10, not above.)
    """
    one, ten = scaling_streams(settings)
    with temp_root("scaling") as root:
        async with contextlib.AsyncExitStack() as stack:
            small = agent_turn(stack, server.base_url(one), root)
            large = agent_turn(stack, server.base_url(ten), root)

            async def ten_small() -> float:
                return sum([await small() for _ in range(10)])

            samples = await paired_async(
                settings,
                {"10x": large, "10 x 1x": ten_small},
                warmups={"10x": small, "10 x 1x": small},  # same code path: imports and connections
            )
    return [
        Figure(
            "scaling_10x",
            "x",
            Stats.of([10 * r for r in ratios(samples["10x"], samples["10 x 1x"])]),
            target=("<=", 10.5),
            details={
                "streams": [one, ten],
                "1x_ms": round(statistics.median(samples["10 x 1x"]) * 100, 1),
                "10x_ms": round(statistics.median(samples["10x"]) * 1000, 1),
            },
        )
    ]


# --- resume -------------------------------------------------------------------------------------


def _write_log(path: Path, events: int) -> int:
    """A realistic session of ``events`` durable events whose last turn is open (a call pending).

    Records are built with the loop's own event builders and written in the log's line format;
    going through ``SessionLog.append`` would fsync every turn boundary (minutes for 100 000).
    """
    from dsh.agent_loop import events as ev
    from dsh.agent_loop.reasons import Completed
    from dsh.agent_loop.session_log import _dumps  # the log's exact line encoding
    from dsh.llm import ToolCall, Usage

    lines = [_dumps({"type": "session", "version": 1, "id": path.stem, "createdAt": "2026-01-01T00:00:00.000Z",
                     "cwd": str(path.parent)})]
    seq = 0
    turn = 0
    answer = "Here is what I found in the file, with the lines that matter quoted below. " * 3
    output = "def main() -> None:\n    print('hello')\n" * 10

    def add(event: Any) -> None:
        nonlocal seq
        seq += 1
        lines.append(_dumps({"type": event.type, "seq": seq, "time": "2026-01-01T00:00:00.000Z",
                             "data": ev.to_wire(event)["data"]}))

    def open_step(turn: int, step: int) -> str:
        call_id = f"call_{turn}_{step}"
        arguments = f'{{"path": "src/file_{turn}.py"}}'
        add(ev.StepStart(turn, step))
        add(ev.AssistantMessage(turn, step, content="", reasoning_content="I should read it first.",
                                tool_calls=(ToolCall(call_id, "read_file", arguments),),
                                finish_reason="tool_calls", interrupted=False,
                                usage=Usage(prompt_tokens=900, completion_tokens=30, total_tokens=930)))
        add(ev.ToolCallStart(turn, call_id, "read_file", arguments))
        return call_id

    # Whole turns of 8 events, a few job notices to land on the exact count, then an open turn of 4:
    # turn/start, step/start, an assistant message calling a tool, the tool/call -- no result, no end.
    whole_turns, notices = divmod(events - 4, 8)
    for _ in range(whole_turns):
        turn += 1
        add(ev.TurnStart(turn, f"Please look at file number {turn} and summarise it."))
        call_id = open_step(turn, 1)
        add(ev.ToolResult(turn, call_id, "read_file", output, is_error=False, diagnostic=None))
        add(ev.StepStart(turn, 2))
        add(ev.AssistantMessage(turn, 2, content=answer, reasoning_content=None, tool_calls=(),
                                finish_reason="stop", interrupted=False,
                                usage=Usage(prompt_tokens=1400, completion_tokens=60, total_tokens=1460)))
        add(ev.TurnEnd(turn, Completed()))
    for number in range(notices):
        add(ev.JobNotice(f"subagent-{number + 1}", f"background job subagent-{number + 1} finished"))
    turn += 1
    add(ev.TurnStart(turn, "One more file, please."))
    open_step(turn, 1)
    path.write_bytes(b"".join(lines))
    return seq


async def resume_100k(settings: Settings, server: BenchServer) -> list[Figure]:
    """Open (lock, parse, repair the open last turn) and resume a 100 000-event session log."""
    from dsh.agent_loop import Agent, SessionLog
    from dsh.llm import DeepSeekClient

    count = 100_000
    with temp_root("resume") as root:
        master = root / "master.jsonl"
        written = _write_log(master, count)
        size_mb = master.stat().st_size / 1e6
        work = root / "sessions"
        work.mkdir()
        client = DeepSeekClient(base_url=server.base_url("text"), api_key=subjects.BENCH_KEY)

        def fresh_copy() -> Path:
            target = work / "20260101-000000-bench.jsonl"
            shutil.copyfile(master, target)
            return target

        def open_repair() -> float:
            path = fresh_copy()
            start = time.perf_counter()
            log = SessionLog.open(path)
            elapsed = time.perf_counter() - start
            repaired = log.repaired_turn
            log.close()
            if repaired is None:
                raise RuntimeError("the bench log was not repaired")
            return elapsed

        def agent_resume() -> float:
            path = fresh_copy()
            start = time.perf_counter()
            agent = Agent.resume(client, str(path))
            elapsed = time.perf_counter() - start
            if agent.repaired_turn is None or not agent.messages:
                raise RuntimeError("the bench session did not resume")
            assert agent.session is not None
            agent.session.close()
            return elapsed

        repeat = settings.size(5, 3)
        parts = {
            "open_repair": Stats.of([s * 1000 for s in repeat_sync(settings, open_repair, repeat)]),
            "agent_resume": Stats.of([s * 1000 for s in repeat_sync(settings, agent_resume, repeat)]),
        }
        await client.aclose()
    return [
        Figure("resume_100k_ms", "ms", target=("<", 1000.0), parts=parts,
               details={"events": written, "log_mb": round(size_mb, 1)})
    ]
