"""The retry policy, end to end against the fault server and as a unit."""

from __future__ import annotations

import random
import time

import anyio
import pytest

from dsh.agent_loop import NEVER_RETRIED, RETRYABLE_CODES, Aborted, Completed, Failed, RetryPolicy
from dsh.agent_loop.retry import wait_words
from dsh.llm.loopback.fault_server import Behaviour
from tests.agent_loop.agent_support import durable_types, read_log

pytestmark = pytest.mark.anyio


async def test_a_503_then_success_is_one_retry_and_one_assistant_message(server, make_agent):
    server.push("http_503", "text")
    agent, seen = make_agent(server.url)
    assert await agent.run_turn("hello") == Completed()
    retry = {"turn": 1, "step": 1, "attempt": 1, "max_attempts": 5, "delay_s": 0.001, "code": "SERVER",
             "message": "Server Overloaded, please try again later"}
    assert seen.of("llm/retry") == [retry]
    _, records = read_log(agent.session.path)
    assert durable_types(records) == ["turn/start", "step/start", "llm/retry", "assistant/message", "turn/end"]
    assert records[2]["data"] == retry
    assert len(server.requests) == 2
    assert len(seen.of("assistant/message")) == 1


async def test_retry_after_below_the_cap_is_honoured(server, make_agent):
    server.push(Behaviour("http_429", retry_after="0.3"), "text")
    agent, seen = make_agent(server.url)
    started = time.monotonic()
    assert await agent.run_turn("hello") == Completed()
    assert time.monotonic() - started >= 0.3
    [retry] = seen.of("llm/retry")
    assert (retry["code"], retry["delay_s"], retry["message"]) == ("RATE_LIMIT", 0.3, "Rate Limit Reached")


async def test_retry_after_above_the_backoff_cap_is_still_honoured(server, make_agent):
    server.push(Behaviour("http_429", retry_after="0.3"), "text")
    agent, seen = make_agent(server.url, retry=RetryPolicy(base_delay=0.001, max_delay=0.01, jitter=0.0))
    assert await agent.run_turn("hello") == Completed()
    assert [r["delay_s"] for r in seen.of("llm/retry")] == [0.3]


async def test_retry_after_past_its_cap_ends_the_turn_at_once_saying_when(server, make_agent):
    server.push(Behaviour("http_429", retry_after="30"), "text")
    agent, seen = make_agent(server.url, retry=RetryPolicy(base_delay=0.001, retry_after_max=20.0))
    with anyio.fail_after(5):
        reason = await agent.run_turn("hello")
    assert isinstance(reason, Failed)
    assert (reason.code, reason.status, reason.message) == (
        "RATE_LIMIT", 429, "Rate Limit Reached (the server asked to retry after 30 s)")
    assert seen.of("llm/retry") == [] and len(server.requests) == 1
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"]["message"] == reason.message


async def test_auth_is_not_retried(server, make_agent):
    server.push("http_401", "text")
    agent, seen = make_agent(server.url)
    reason = await agent.run_turn("hello")
    assert isinstance(reason, Failed) and reason.code == "AUTH"
    assert len(server.requests) == 1
    assert seen.of("llm/retry") == []


async def test_a_first_token_timeout_is_retried_once_whatever_the_policy(server, make_agent):
    server.default = Behaviour("keepalive_only", interval=0.05)
    agent, seen = make_agent(server.url, client_options={"stream_idle_timeout": 5.0, "first_token_timeout": 0.3})
    reason = await agent.run_turn("hello")
    message = f"no content from the endpoint at 127.0.0.1:{server.port} within 0.3s (keep-alives only)"
    assert reason == Failed("TIMEOUT", message, step=1, endpoint=server.url)
    assert [(r["attempt"], r["max_attempts"], r["message"]) for r in seen.of("llm/retry")] == [(1, 1, message)]
    assert len(server.requests) == 2


async def test_stream_closed_is_never_retried_even_without_content(server, make_agent):
    server.push(Behaviour("no_finish", text=""), "text")
    agent, _ = make_agent(server.url)
    reason = await agent.run_turn("hello")
    assert isinstance(reason, Failed) and reason.code == "STREAM_CLOSED"
    assert len(server.requests) == 1


async def test_cancel_during_the_backoff_wait_aborts_at_once(server, make_agent):
    server.push("http_503")
    agent, seen = make_agent(server.url, retry=RetryPolicy(base_delay=30.0, jitter=0.0))
    agent.subscribe(lambda event: event.type == "llm/retry" and agent.cancel())
    with anyio.fail_after(5):
        reason = await agent.run_turn("hello")
    assert reason == Aborted("cancelled")
    assert [r["delay_s"] for r in seen.of("llm/retry")] == [10.0]  # 30 s capped at 10
    _, records = read_log(agent.session.path)
    assert durable_types(records) == ["turn/start", "step/start", "llm/retry", "turn/end"]
    assert records[-1]["data"]["reason"] == {"kind": "aborted", "reason": "cancelled"}
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [("empty", "EMPTY_RESPONSE"), ("empty_body", "EMPTY_RESPONSE"), ("reset_before_headers", "TRANSPORT"),
     ("disconnect_before_response", "TRANSPORT"), ("stall_after_headers", "TIMEOUT")],
)
async def test_transient_failures_before_content_are_retried(server, make_agent, behaviour, code):
    server.push(behaviour, "text")
    agent, seen = make_agent(server.url, client_options={"stream_idle_timeout": 0.3})
    with anyio.fail_after(10):
        assert await agent.run_turn("hello") == Completed()
    assert [r["code"] for r in seen.of("llm/retry")] == [code]
    assert seen.text() == "Hello! How can I help you today?"


async def test_retries_are_exhausted_after_five(server, make_agent):
    server.default = Behaviour("http_500")
    agent, seen = make_agent(server.url)
    reason = await agent.run_turn("hello")
    assert isinstance(reason, Failed) and (reason.code, reason.status) == ("SERVER", 500)
    assert [r["attempt"] for r in seen.of("llm/retry")] == [1, 2, 3, 4, 5]
    assert len(server.requests) == 6


# --- the policy as a unit ---------------------------------------------------------------------


def test_backoff_doubles_from_half_a_second_to_ten():
    policy = RetryPolicy(jitter=0.0)
    assert [policy.delay(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_jitter_stays_within_ten_percent_and_under_the_cap():
    policy = RetryPolicy(rng=random.Random(7))
    for attempt in range(1, 8):
        base = min(10.0, 0.5 * 2 ** (attempt - 1))
        for _ in range(50):
            assert base <= policy.delay(attempt) <= min(10.0, base * 1.1)


def test_retry_after_is_used_up_to_its_cap():
    policy = RetryPolicy(jitter=0.0)
    assert policy.delay(1, 3.0) == 3.0
    assert policy.delay(1, 10.0) == 10.0
    assert policy.delay(2, 60.0) == 60.0  # above the backoff cap, at the Retry-After cap: as asked
    assert not policy.waits_too_long(60.0) and not policy.waits_too_long(None)
    assert policy.waits_too_long(60.5)  # past it: the failure ends the turn (the agent never waits)
    assert policy.delay(2, 61.0) == 1.0


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(0.2, "1 s"), (61.0, "61 s"), (119.5, "120 s"), (120.0, "2 min"), (3599.2, "60 min"), (7200.0, "2 h"),
     (86400.0, "24 h"), (86401.0, "more than a day"), (1e300, "more than a day"), (float("inf"), "more than a day"),
     (float("nan"), "more than a day")],
)
def test_the_wait_is_said_in_bounded_words(seconds, words):
    assert wait_words(seconds) == words


def test_which_codes_are_retried():
    policy = RetryPolicy()
    assert {"RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT", "EMPTY_RESPONSE", "PROXY"} == RETRYABLE_CODES
    for code in RETRYABLE_CODES:
        assert policy.should_retry(code, 0) and policy.should_retry(code, 4) and not policy.should_retry(code, 5)
    for code in [*NEVER_RETRIED, "HTTP_418", "HTTP_409", "UNKNOWN", "ABORTED", "CONTENT_FILTER"]:
        assert not policy.should_retry(code, 0)
