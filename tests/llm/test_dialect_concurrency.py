"""The client's side of the dialect (deepseek | openai) and DeepSeek's concurrency cap (issue 37 parts 2 and 4).

The client against the loopback fault server taught DeepSeek's concurrency 429 (``http_429_concurrency``, and
``FaultServer(concurrency_cap=N)``); what a user sees of it is in tests/repl/test_dialect_lines.py.
"""

from __future__ import annotations

import contextlib

import anyio
import pytest

from dsh.llm import ErrorCode, LlmError
from dsh.llm.client_settings import ClientSettings
from dsh.llm.deepseek import DeepSeekClient, open_client
from dsh.llm.events import ChatRequest, Message
from dsh.llm.loopback.fault_server import FaultServer
from dsh.llm.network import FailureDetail
from tests.waiting import async_wait_until

REQUEST = ChatRequest(model="deepseek-flash", messages=(Message(role="user", content="hi"),))


async def _drain(client: DeepSeekClient) -> None:
    async with contextlib.aclosing(client.stream(REQUEST)) as events:
        async for _ in events:
            pass


async def _held(client: DeepSeekClient) -> None:
    """A request the server holds open until the test cancels it (then the client says ABORTED)."""
    with contextlib.suppress(LlmError):
        await _drain(client)


# --- the client ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_deepseek_dialect_429_counts_the_requests_in_flight_and_says_whose_cap():
    async with FaultServer(concurrency_cap=1) as server:
        server.push("stall_after_headers")
        client = open_client(ClientSettings(base_url=server.url, dialect="deepseek", trust_env=False, env={}))
        failure: list[LlmError] = []
        async with client, anyio.create_task_group() as group:
            group.start_soon(_held, client)
            await async_wait_until(lambda: server.in_flight == 1, 10, "the first request in flight")
            with pytest.raises(LlmError) as caught:
                await _drain(client)
            failure.append(caught.value)
            group.cancel_scope.cancel()
    error = failure[0]
    assert (error.code, error.status, error.detail) == (ErrorCode.RATE_LIMIT, 429, FailureDetail.CONCURRENCY_CAP)
    assert str(error).splitlines()[0] == ("Rate Limit Reached: the account's cap on concurrent requests to "
                                          "deepseek-flash was reached; this dsh had 2 requests in flight")
    assert [request.behaviour for request in server.requests] == ["stall_after_headers", "http_429_concurrency"]
    assert client.requests.in_flight == 0


@pytest.mark.anyio
async def test_an_openai_dialect_429_keeps_the_generic_reading():
    async with (FaultServer(script=["http_429_concurrency"]) as server,
                open_client(ClientSettings(base_url=server.url, trust_env=False, env={})) as client):
        assert client.dialect == "openai"  # loopback is not DeepSeek's host
        with pytest.raises(LlmError) as caught:
            await _drain(client)
    assert (caught.value.code, caught.value.detail) == (ErrorCode.RATE_LIMIT, None)
    assert str(caught.value).splitlines()[0] == "Rate Limit Reached"


@pytest.mark.anyio
async def test_max_parallel_bounds_the_requests_the_server_sees_at_once():
    async with FaultServer(default="slow_text") as server:
        settings = ClientSettings(base_url=server.url, dialect="deepseek", max_parallel=2, trust_env=False, env={})
        async with open_client(settings) as client, anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(_drain, client)
        assert (len(server.requests), server.peak_in_flight, client.requests.peak) == (5, 2, 2)
