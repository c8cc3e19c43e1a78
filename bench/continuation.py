"""What an answer that survives a cut costs (issue 37 part 6): a continued answer's time against a plain retry's,
both through the real agent, client and session log against the loopback fault server, in one run.

* ``retry``: the request is reset before any content and sent again (backoff set to zero), and the whole answer
  streams on the second attempt (one ``llm/retry`` record);
* ``continued``: the stream is reset after the answer's first half was shown, and the rest comes by prefix
  completion (one ``llm/continue`` record, the beta route, a body one message longer).

Each repetition runs one turn of each; the figure is the continued turn's time over the retry's (reported, no
target: the continuation asks no more of the server than a retry does, so it should stay near 1x).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios
from bench.subjects import BENCH_KEY
from dsh.agent_loop import Agent, Completed, SessionLog, ToolRegistry
from dsh.agent_loop.continuation import ContinuationPolicy
from dsh.agent_loop.retry import RetryPolicy
from dsh.llm import DeepSeekClient
from dsh.llm.loopback.fault_server import Behaviour, FaultServer

__all__ = ["continued_vs_retry"]

ANSWER = "Every word of this answer arrives once. " * 100  # about 4 KB, as a paragraph of a real answer
FIRST = ANSWER[: len(ANSWER) // 2]


async def _turn(server: FaultServer, root: Path, cut: Behaviour, policy: ContinuationPolicy | None) -> float:
    server.push(cut)
    async with contextlib.AsyncExitStack() as stack:
        client = DeepSeekClient(base_url=server.url, api_key=BENCH_KEY)
        stack.push_async_callback(client.aclose)
        agent = Agent(client, tools=ToolRegistry(), session=SessionLog.create(root, cwd=root), cwd=root,
                      retry=RetryPolicy(base_delay=0.0, jitter=0.0), continuation=policy)
        stack.push_async_callback(agent.aclose)
        start = time.perf_counter()
        reason = await agent.run_turn("explain")
        elapsed = time.perf_counter() - start
    if reason != Completed():
        raise RuntimeError(f"the bench turn ended {reason}")
    return elapsed


async def continued_vs_retry(settings: Settings, _: BenchServer) -> list[Figure]:
    """``continue_vs_retry``: a continued turn's time over a retried one's (the scripted fault server, not the
    bench's stream server)."""
    server = FaultServer().start_in_thread()
    server.default = Behaviour("text", text=ANSWER)
    try:
        with tempfile.TemporaryDirectory(prefix="dsh-bench-continue-") as tmp:
            root = Path(tmp)

            async def retry() -> float:
                return await _turn(server, root, Behaviour("reset_before_headers"), None)

            async def continued() -> float:
                # A millisecond for the client to read the half before the reset (the prefix is what arrived).
                return await _turn(server, root, Behaviour("reset_mid_stream", text=FIRST, pause=0.001),
                                   ContinuationPolicy())

            samples = await paired_async(settings, {"retry": retry, "continued": continued})
    finally:
        server.stop()
    return [
        Figure("continue_vs_retry", "x", Stats.of(ratios(samples["continued"], samples["retry"])), target=None,
               details={"answer_chars": len(ANSWER), "kept_chars": len(FIRST),
                        "retry_ms": round(statistics.median(samples["retry"]) * 1000, 1),
                        "continued_ms": round(statistics.median(samples["continued"]) * 1000, 1)}),
    ]
