"""Shared pieces for the llm tests: a live fault server, clients pointed at it, stream outcomes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from dsh.llm import ChatRequest, DeepSeekClient, LlmError, Message, StreamEvent
from dsh.repl.demo.fault_server import FaultServer
from tests import canaries

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")

SIMPLE_REQUEST = ChatRequest("deepseek-v4-flash", (Message("user", "Say hello."),))


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


@pytest.fixture(autouse=True)
def _no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables (trust_env); a proxy set on the host must not reroute loopback."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def fault_server(anyio_backend: str) -> AsyncIterator[FaultServer]:
    async with FaultServer() as server:
        yield server


@pytest.fixture
async def tls_fault_server(anyio_backend: str) -> AsyncIterator[FaultServer]:
    async with FaultServer(tls=True) as server:
        yield server


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
