"""The things being timed: dsh's client and its baselines, each reading one whole stream.

Each subject is a factory returning an ``async () -> None`` that reads one response to the end,
so the harness can time them side by side. They share nothing but the loopback server.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from dsh.llm import ChatRequest, DeepSeekClient, Message
from dsh.llm.exchange_ring import DEFAULT_RING_BYTES
from dsh.llm.request_body import encoded_body

__all__ = [
    "BENCH_KEY",
    "REQUEST",
    "Subject",
    "dsh_client",
    "openai_sdk",
    "parse_floor",
    "request_body",
    "transport_floor",
]

Subject = Callable[[], Awaitable[None]]

BENCH_KEY = "sk-bench-0000000000000000"
REQUEST = ChatRequest(model="deepseek-v4-flash", messages=(Message("user", "Write a long answer."),))


def request_body() -> bytes:
    return encoded_body(REQUEST)


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {BENCH_KEY}", "Content-Type": "application/json",
            "Accept": "text/event-stream"}


def dsh_client(stack: contextlib.AsyncExitStack, base_url: str, counter: list[int],
               ring_bytes: int = DEFAULT_RING_BYTES) -> Subject:
    """dsh's DeepSeekClient as the product builds it (its failure-capsule ring on; ``ring_bytes=0``: off):
    every event out of ``stream()``."""
    client = DeepSeekClient(base_url=base_url, api_key=BENCH_KEY, ring_bytes=ring_bytes)
    stack.push_async_callback(client.aclose)

    async def run() -> None:
        events = 0
        async with contextlib.aclosing(client.stream(REQUEST)) as stream:
            async for _ in stream:
                events += 1
        counter.append(events)

    return run


def _raw_client(stack: contextlib.AsyncExitStack) -> httpx.AsyncClient:
    http = httpx.AsyncClient(timeout=httpx.Timeout(60.0))
    stack.push_async_callback(http.aclose)
    return http


def parse_floor(stack: contextlib.AsyncExitStack, base_url: str, counter: list[int]) -> Subject:
    """The least a correct client must do: split lines and ``json.loads`` every payload."""
    http = _raw_client(stack)
    url, body, headers = base_url + "/chat/completions", request_body(), _headers()

    async def run() -> None:
        payloads = 0
        async with http.stream("POST", url, content=body, headers=headers) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = line[6:]
                    if data == "[DONE]":
                        break
                    json.loads(data)
                    payloads += 1
        counter.append(payloads)

    return run


def transport_floor(stack: contextlib.AsyncExitStack, base_url: str, counter: list[int]) -> Subject:
    """Bytes off the socket and nothing else: the cost no parser can avoid."""
    http = _raw_client(stack)
    url, body, headers = base_url + "/chat/completions", request_body(), _headers()

    async def run() -> None:
        size = 0
        async with http.stream("POST", url, content=body, headers=headers) as response:
            async for data in response.aiter_bytes():
                size += len(data)
        counter.append(size)

    return run


def openai_sdk(stack: contextlib.AsyncExitStack, base_url: str, counter: list[int]) -> Subject:
    """The openai Python SDK, ``stream=True``, reading ``delta.content`` and ``delta.reasoning_content``."""
    import openai  # a bench-only dependency (the `bench` extra)

    client = openai.AsyncOpenAI(base_url=base_url, api_key=BENCH_KEY, max_retries=0)
    stack.push_async_callback(client.close)
    messages: Any = [{"role": "user", "content": REQUEST.messages[0].content}]

    async def run() -> None:
        pieces = 0
        stream = await client.chat.completions.create(
            model=REQUEST.model, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        async with stream:
            async for chunk in stream:
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        pieces += 1
                    if getattr(delta, "reasoning_content", None):
                        pieces += 1
                    if delta.tool_calls:
                        pieces += len(delta.tool_calls)
        counter.append(pieces)

    return run


def dsh_first_text(stack: contextlib.AsyncExitStack, base_url: str) -> Callable[[], Awaitable[float]]:
    """Seconds from calling ``stream()`` to the first ``TextDelta`` (the rest is drained, untimed)."""
    from dsh.llm import TextDelta

    client = DeepSeekClient(base_url=base_url, api_key=BENCH_KEY)
    stack.push_async_callback(client.aclose)

    async def run() -> float:
        first: float | None = None
        start = time.perf_counter()
        async with contextlib.aclosing(client.stream(REQUEST)) as stream:
            async for event in stream:
                if first is None and isinstance(event, TextDelta):
                    first = time.perf_counter() - start
        assert first is not None, "the ttft stream carried no text"
        return first

    return run


def raw_first_line(stack: contextlib.AsyncExitStack, base_url: str) -> Callable[[], Awaitable[float]]:
    """Seconds from starting a raw httpx request to its first non-empty line."""
    http = _raw_client(stack)
    url, body, headers = base_url + "/chat/completions", request_body(), _headers()

    async def run() -> float:
        first: float | None = None
        start = time.perf_counter()
        async with http.stream("POST", url, content=body, headers=headers) as response:
            async for line in response.aiter_lines():
                if first is None and line:
                    first = time.perf_counter() - start
        assert first is not None, "the ttft stream was empty"
        return first

    return run
