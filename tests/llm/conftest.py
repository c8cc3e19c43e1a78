"""Shared pieces for the llm tests: clients pointed at a fault server (tests/conftest.py), stream outcomes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from dsh.llm import ChatRequest, DeepSeekClient, LlmError, Message, StreamEvent
from tests import canaries

SIMPLE_REQUEST = ChatRequest("deepseek-v4-flash", (Message("user", "Say hello."),))


def unnamed(url: str) -> str:
    """How messages name a loopback server that does not say who it is (the fault server's ``server:
    dsh-fault-server``): ``the endpoint at 127.0.0.1:<port>`` (docs/endpoints.md)."""
    return f"the endpoint at 127.0.0.1:{urlsplit(url).port}"


@dataclass
class Outcome:
    """What one ``client.stream`` produced: every event, then the error that ended it (if any)."""

    events: list[StreamEvent] = field(default_factory=list)
    error: LlmError | None = None

    @property
    def failure(self) -> LlmError:
        assert self.error is not None, f"stream succeeded with events {self.events!r}"
        return self.error


async def run_stream(client: DeepSeekClient, request: ChatRequest = SIMPLE_REQUEST) -> Outcome:
    outcome = Outcome()
    try:
        async with contextlib.aclosing(client.stream(request)) as events:
            async for event in events:
                outcome.events.append(event)
    except LlmError as exc:
        outcome.error = exc
    return outcome


ClientFactory = Callable[..., DeepSeekClient]


@pytest.fixture
async def make_client(anyio_backend: str) -> AsyncIterator[ClientFactory]:
    """``make_client(base_url, **options)``: a DeepSeekClient with the canary key, closed at teardown."""
    clients: list[DeepSeekClient] = []

    def factory(base_url: str, **options: Any) -> DeepSeekClient:
        options.setdefault("api_key", canaries.API_KEY)
        options.setdefault("stream_idle_timeout", 10.0)
        options.setdefault("first_token_timeout", 20.0)
        options.setdefault("connect_timeout", 5.0)
        client = DeepSeekClient(base_url=base_url, **options)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.aclose()


StreamRunner = Callable[..., Awaitable[Outcome]]


@pytest.fixture
def stream_outcome() -> StreamRunner:
    return run_stream
