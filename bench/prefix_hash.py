"""What the prompt-cache watch costs (issue 37 part 3): hashing each request's prefix parts
(``PrefixTracker.observe``, agent_loop/cache_watch.py) against the stream path of the same requests, in one run.

A session of ``steps`` tool steps as the agent sends it: the built-in system prompt and tools, and each step adds
an assistant tool call and a 4 KB tool result to the conversation (the same Message objects from step to step, as
the agent's conversation keeps them). Each repetition sends every step's request through dsh's client (its body
encoded, sent, a short answer streamed back and decoded) and, apart, through a fresh tracker; the figure is the
tracker's time over the stream path's (target: at most 2 %).
"""

from __future__ import annotations

import contextlib
import statistics

from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios
from bench.subjects import BENCH_KEY
from dsh.agent_loop.cache_watch import PrefixTracker
from dsh.agent_loop.context import BASE_SYSTEM_PROMPT
from dsh.agent_loop.tools import default_tools
from dsh.llm import ChatRequest, DeepSeekClient, Message, ToolCall

__all__ = ["prefix_hashing"]

RESULT = ("def handler(event):\n    return process(event['body'])  # a line of a file the model read\n" * 60)[:4096]


def _requests(steps: int) -> list[ChatRequest]:
    tools = default_tools(None).specs()
    messages = [Message("system", BASE_SYSTEM_PROMPT), Message("user", "Fix the failing test in the handler.")]
    requests = []
    for step in range(steps):
        requests.append(ChatRequest(model="deepseek-flash", messages=tuple(messages), tools=tools))
        call = ToolCall(f"call_{step:04d}", "read_file", f'{{"path": "src/handler_{step}.py"}}')
        messages += [Message("assistant", "", reasoning_content="Read it.", tool_calls=(call,)),
                     Message("tool", RESULT, tool_call_id=call.id)]
    return requests


async def prefix_hashing(settings: Settings, server: BenchServer) -> list[Figure]:
    """``prefix_hash_vs_stream``: the hashing's time over the stream path's, for the same requests."""
    requests = _requests(settings.size(200, 40))
    base = server.base_url("text")
    async with contextlib.AsyncExitStack() as stack:
        client = DeepSeekClient(base_url=base, api_key=BENCH_KEY)
        stack.push_async_callback(client.aclose)

        async def stream_path() -> None:
            for request in requests:
                async with contextlib.aclosing(client.stream(request)) as stream:
                    async for _ in stream:
                        pass

        async def hashing() -> None:
            tracker = PrefixTracker()
            for request in requests:
                tracker.observe(request)

        samples = await paired_async(settings, {"stream": stream_path, "hashing": hashing})
    return [
        Figure("prefix_hash_vs_stream", "x", Stats.of(ratios(samples["hashing"], samples["stream"])),
               target=("<=", 0.02),
               details={"requests": len(requests),
                        "stream_ms": round(statistics.median(samples["stream"]) * 1000, 1),
                        "hashing_ms": round(statistics.median(samples["hashing"]) * 1000, 2),
                        "hashing_us_per_request": round(statistics.median(samples["hashing"]) / len(requests) * 1e6,
                                                        1)}),
    ]
