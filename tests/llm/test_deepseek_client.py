"""DeepSeekClient against the real loopback fault server: every behaviour, every row of the error table.

Each test asserts what a caller relies on: the events that arrived before the end, then the error's
code, exact message, status, retry_after_s and request_id.
"""

from __future__ import annotations

import email.utils
import json
import time

import anyio
import pytest

import dsh.llm
from dsh.llm import (
    ChatRequest,
    Finish,
    KeepAlive,
    LlmError,
    Message,
    ReasoningDelta,
    ReplyBuilder,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
    error_chain,
)
from dsh.llm.loopback import streams
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.request_body import request_body
from tests import canaries
from tests.llm.conftest import unnamed
from tests.waiting import PROMPTLY, async_wait_until

pytestmark = pytest.mark.anyio

DEFAULT_TEXT = ["Hello! ", "How ", "can ", "I ", "help ", "you ", "today?"]


def text_events(pieces: list[str]) -> list[TextDelta]:
    return [TextDelta(piece) for piece in pieces]


def usage(completion: int, *, reasoning: int = 0, prompt: int = 12, hit: int = 8) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                 prompt_cache_hit_tokens=hit, prompt_cache_miss_tokens=prompt - hit, reasoning_tokens=reasoning)


# --- streams that succeed ------------------------------------------------------------------


async def test_text_stream_yields_deltas_usage_then_finish(fault_server, make_client, stream_outcome):
    fault_server.push("text")
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert outcome.events == [*text_events(DEFAULT_TEXT), usage(7), Finish("stop")]


async def test_reasoning_then_text(fault_server, make_client, stream_outcome):
    fault_server.push("reasoning")
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    thoughts = [ReasoningDelta(p) for p in ["9.8 ", "= ", "9.80 ", "> ", "9.11, ", "so ", "9.8."]]
    answer = text_events(["9.8 ", "is ", "greater."])
    assert outcome.events == [*thoughts, *answer, usage(10, reasoning=7), Finish("stop")]


async def test_tool_call_fragments_are_joined_by_index(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("tool_call", name="read_file", arguments={"path": "README.md"}, fragments=4,
                                id="call_7"))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    deltas = [e for e in outcome.events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "call_7", "read_file", "")
    assert all(d.index == 0 and d.id is None and d.name is None for d in deltas[1:])
    assert len(deltas) == 5
    assert outcome.events[0] == ReasoningDelta("Need the weather; call it.")
    assert outcome.events[-2:] == [Usage(180, 25, 205, 128, 52, 0), Finish("tool_calls")]
    reply = ReplyBuilder()
    for event in outcome.events:
        reply.feed(event)
    assert reply.tool_calls == [ToolCall("call_7", "read_file", '{"path": "README.md"}')]
    assert reply.finish_reason == "tool_calls"


async def test_parallel_tool_calls_interleaved_on_the_wire(fault_server, make_client, stream_outcome):
    fault_server.push("parallel_tool_calls")
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    indices = [e.index for e in outcome.events if isinstance(e, ToolCallDelta)]
    assert indices == [0, 1, 0, 1, 0, 1, 0, 1]  # two openers, then fragments round-robin
    reply = ReplyBuilder()
    for event in outcome.events:
        reply.feed(event)
    assert reply.tool_calls == [
        ToolCall("call_00_a1", "get_weather", '{"location": "Hangzhou"}'),
        ToolCall("call_01_b2", "get_time", '{"timezone": "Asia/Shanghai"}'),
    ]


async def test_length_finishes_as_max_tokens(fault_server, make_client, stream_outcome):
    fault_server.push("length")
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert outcome.events == [*text_events(["The ", "answer ", "is ", "cut ", "here"]), usage(5),
                              Finish("length")]


async def test_keepalives_before_content_are_out_of_band(fault_server, make_client, stream_outcome):
    # 15 comments 0.1 s apart outlast a 1 s idle limit: before the first token they prove liveness. (A gap
    # of 0.1 s against 1 s: a loaded machine that delays one comment does not break the chain.)
    fault_server.push(Behaviour("keepalive_then_text", count=15, interval=0.1, text="Done."))
    client = make_client(fault_server.url, stream_idle_timeout=1.0, first_token_timeout=60.0)
    outcome = await stream_outcome(client)
    assert outcome.error is None
    assert outcome.events == [KeepAlive()] * 15 + [TextDelta("Done."), usage(1), Finish("stop")]


@pytest.mark.parametrize("params", [{"crlf": True}, {"bom": True}, {"crlf": True, "bom": True},
                                    {"framing": "close"}, {"delay": 0.01}])
async def test_wire_variants_decode_identically(fault_server, make_client, stream_outcome, params):
    fault_server.push(Behaviour("text", **params))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert outcome.events == [*text_events(DEFAULT_TEXT), usage(7), Finish("stop")]


async def test_slow_text_streams_each_chunk_as_it_arrives(fault_server, make_client):
    fault_server.push(Behaviour("slow_text", delay=0.2))  # 1.2 s from the first delta to the last
    client = make_client(fault_server.url)
    arrivals: list[float] = []
    start = time.monotonic()
    async for event in client.stream(dsh.llm.ChatRequest("m", (Message("user", "x"),))):
        if isinstance(event, TextDelta):
            arrivals.append(time.monotonic() - start)
    assert len(arrivals) == 7
    # Deltas are not buffered until the end: the first arrives well before the last (a lower bound: the
    # first delta would have to be read 0.9 s late for a loaded machine to break it).
    assert arrivals[-1] - arrivals[0] >= 0.3


async def test_huge_text_is_assembled_in_full(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("huge_text", n=30_000, seed=3))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    reply = ReplyBuilder()
    for event in outcome.events:
        reply.feed(event)
    _, expected = streams.huge_text_blob(30_000, 3)
    assert reply.text == expected
    assert sum(isinstance(e, TextDelta) for e in outcome.events) == 30_000
    assert outcome.events[-1] == Finish("stop")


async def test_connection_is_reused_across_requests(fault_server, make_client, stream_outcome):
    """After ``[DONE]`` the rest of the body (the chunked terminator) must be consumed, or httpcore
    drops the connection and every turn pays a new TCP (and TLS) handshake."""
    client = make_client(fault_server.url)
    for _ in range(3):
        assert (await stream_outcome(client)).error is None
    fault_server.push("http_429")
    assert (await stream_outcome(client)).failure.code == "RATE_LIMIT"
    assert (await stream_outcome(client)).error is None
    assert fault_server.connections == 1
    assert [r.request_id for r in fault_server.requests] == [f"fault-{n:04d}" for n in range(1, 6)]


async def test_many_concurrent_streams(fault_server, make_client, stream_outcome):
    client = make_client(fault_server.url)
    fault_server.default = Behaviour("slow_text", delay=0.01)
    results: list[object] = []

    async def one() -> None:
        results.append(await stream_outcome(client))

    async with anyio.create_task_group() as group:
        for _ in range(25):
            group.start_soon(one)
    assert len(results) == 25
    assert all(r.error is None and r.events[-1] == Finish("stop") for r in results)


async def test_tls_listener_with_trusted_certificate(tls_fault_server, make_client, stream_outcome):
    import ssl

    import httpx

    trust = ssl.create_default_context(cafile=tls_fault_server.tls_ca_file)
    async with httpx.AsyncClient(verify=trust) as http:
        client = make_client(tls_fault_server.tls_url, http_client=http)
        outcome = await stream_outcome(client)
    assert outcome.error is None
    assert outcome.events[-1] == Finish("stop")


# --- streams that end badly ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "code", "message", "before"),
    [
        ("content_filter", "CONTENT_FILTER", 'stream from {E} finished with finish_reason "content_filter"',
         [*text_events(["The ", "answer ", "is ", "cut ", "here"]), usage(5)]),
        ("insufficient_system_resource", "INSUFFICIENT_SYSTEM_RESOURCE",
         'stream from {E} finished with finish_reason "insufficient_system_resource"',
         [*text_events(["The ", "answer ", "is ", "cut ", "here"]), usage(5)]),
        ("empty", "EMPTY_RESPONSE", "{E} returned an empty completion", [usage(1)]),
        ("empty_body", "EMPTY_RESPONSE", "{E} returned no response body", []),
        ("no_finish", "STREAM_CLOSED", "SSE stream ended without [DONE]", text_events(["No ", "finish"])),
        ("partial_eof", "STREAM_CLOSED", "SSE stream ended without [DONE]", text_events(["Cut ", "mid"])),
        ("malformed_json", "MALFORMED_RESPONSE",
         'malformed SSE payload: {"id": "x", "choices": [{"delta": {"content": "unterminated', [TextDelta("Hi")]),
        ("malformed_shape", "MALFORMED_RESPONSE",
         'malformed SSE payload: {"id":"x","object":"chat.completion.chunk","choices":"not-a-list"}',
         [TextDelta("Hi")]),
    ],
)
async def test_stream_failures(fault_server, make_client, stream_outcome, behaviour, code, message, before):
    fault_server.push(behaviour)
    outcome = await stream_outcome(make_client(fault_server.url))
    error = outcome.failure
    message = message.replace("{E}", unnamed(fault_server.url))
    assert (error.code, error.message, error.status, error.retry_after_s) == (code, message, None, None)
    assert error.request_id == "fault-0001"
    assert outcome.events == before
    assert not any(isinstance(e, Finish) for e in outcome.events)  # finish is held until [DONE]


@pytest.mark.parametrize(
    ("payload", "preview"),
    [
        ("x" * 300, "x" * 120),
        ("[1, 2, 3]", "[1, 2, 3]"),
        ('{"choices": [{"delta": {"content": 42}}]}', '{"choices": [{"delta": {"content": 42}}]}'),
        ('{"choices": [], "usage": "lots"}', '{"choices": [], "usage": "lots"}'),
    ],
)
async def test_malformed_payload_preview(fault_server, make_client, stream_outcome, payload, preview):
    fault_server.push(Behaviour("malformed_json", payload=payload))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.message) == ("MALFORMED_RESPONSE", f"malformed SSE payload: {preview}")


async def test_a_surrogate_pair_split_across_chunks_rejoins_and_a_lone_one_is_replaced(
    fault_server, make_client, stream_outcome
):
    fault_server.push("surrogates")
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert "".join(e.text for e in outcome.events if isinstance(e, TextDelta)) == "Smile \U0001f600, a lone \ufffd!"


async def test_a_finish_reason_then_a_clean_close_without_done_completes(fault_server, make_client, stream_outcome):
    fault_server.push("no_done")
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert outcome.events == [*text_events(["No ", "terminator"]), usage(2), Finish("stop")]


# --- the watchdog --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "message", "before"),
    [
        (Behaviour("stall_before_headers"), "no response headers from {E} within 0.3s", []),
        (Behaviour("stall_after_headers"), "stream idle timeout after 0.3s from {E}", []),
        (Behaviour("stall_mid_stream", text="Partial"), "stream idle timeout after 0.3s from {E}",
         [TextDelta("Partial")]),
    ],
)
async def test_idle_timeout_says_which_deadline_fired(
    fault_server, make_client, stream_outcome, behaviour, message, before
):
    fault_server.push(behaviour)
    client = make_client(fault_server.url, stream_idle_timeout=0.3, first_token_timeout=60.0)
    start = time.monotonic()
    outcome = await stream_outcome(client)
    elapsed = time.monotonic() - start
    error = outcome.failure
    message = message.replace("{E}", unnamed(fault_server.url))
    assert (error.code, error.message, error.retry_limit) == ("TIMEOUT", message, None)
    assert outcome.events == before
    # The 0.3 s deadline, not the 60 s first-token one (the stalls never end by themselves).
    assert 0.25 <= elapsed < PROMPTLY


async def test_first_token_deadline_bounds_a_keepalive_only_server(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("keepalive_only", interval=0.05))
    client = make_client(fault_server.url, stream_idle_timeout=0.4, first_token_timeout=0.8)
    start = time.monotonic()
    outcome = await stream_outcome(client)
    elapsed = time.monotonic() - start
    error = outcome.failure
    expected = f"no content from {unnamed(fault_server.url)} within 0.8s (keep-alives only)"
    assert (error.code, error.message) == ("TIMEOUT", expected)
    assert error.retry_limit == 1  # a keep-alive-only server does not hold the turn for the whole retry budget
    assert 0.75 <= elapsed < PROMPTLY  # the 0.8 s deadline: without it the keep-alives go on forever
    assert len(outcome.events) >= 5
    assert set(outcome.events) == {KeepAlive()}
    await async_wait_until(lambda: fault_server.connections_open == 0, PROMPTLY, "the server to see the client leave")


async def test_keepalives_after_content_do_not_rearm_the_idle_timer(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("keepalive_only", interval=0.05, text="Started"))
    client = make_client(fault_server.url, stream_idle_timeout=0.3, first_token_timeout=60.0)
    start = time.monotonic()
    outcome = await stream_outcome(client)
    elapsed = time.monotonic() - start
    expected = f"stream idle timeout after 0.3s from {unnamed(fault_server.url)}"
    assert (outcome.failure.code, outcome.failure.message) == ("TIMEOUT", expected)
    assert outcome.events[0] == TextDelta("Started")
    assert KeepAlive() in outcome.events
    assert 0.25 <= elapsed < PROMPTLY  # the 0.3 s idle deadline: re-armed by keep-alives it never fires


# --- cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "cancel_after_events"),
    [(Behaviour("slow_text", delay=0.05), 2), (Behaviour("stall_before_headers"), None),
     (Behaviour("keepalive_only", interval=0.02), 3)],
)
async def test_cancellation_raises_aborted(fault_server, make_client, behaviour, cancel_after_events):
    fault_server.push(behaviour)
    client = make_client(fault_server.url)
    seen: list[object] = []
    caught: list[LlmError] = []
    async def cancel_once_served(scope: anyio.CancelScope) -> None:
        # Not a fixed delay: cancelled before the server took the behaviour, the next request would get it.
        await async_wait_until(lambda: not fault_server.pending, 10, "the server to take the request")
        scope.cancel()

    async with anyio.create_task_group() as group:
        with anyio.CancelScope() as scope:
            if cancel_after_events is None:
                group.start_soon(cancel_once_served, scope)
            try:
                async for event in client.stream(dsh.llm.ChatRequest("m", (Message("user", "x"),))):
                    seen.append(event)
                    if len(seen) == cancel_after_events:
                        scope.cancel()
            except LlmError as exc:
                caught.append(exc)
    assert len(caught) == 1, seen
    error = caught[0]
    assert (error.code, error.message) == ("ABORTED", "request aborted by caller")
    assert isinstance(error.__cause__, anyio.get_cancelled_exc_class())
    assert len(seen) == (cancel_after_events or 0)
    # The client is still usable and the server let go of the cancelled connection.
    assert (await _one_text(client)) == "".join(DEFAULT_TEXT)
    await async_wait_until(lambda: fault_server.connections_open <= 1, PROMPTLY, "the cancelled connection to close")


async def _one_text(client) -> str:
    reply = ReplyBuilder()
    async for event in client.stream(dsh.llm.ChatRequest("m", (Message("user", "x"),))):
        reply.feed(event)
    return reply.text


# --- HTTP status errors --------------------------------------------------------------------

CONTEXT_MESSAGE = (
    "This model's maximum context length is 131072 tokens. However, you requested 140000 tokens (140000 in "
    "the messages, 0 in the completion). Please reduce the length of the messages or completion."
)


@pytest.mark.parametrize(
    ("behaviour", "code", "status", "message", "retry_after"),
    [
        ("http_400", "INVALID_REQUEST", 400,
         "The `reasoning_content` in the thinking mode must be passed back to the API.", None),
        ("http_400_context", "CONTEXT_WINDOW_EXCEEDED", 400, CONTEXT_MESSAGE, None),
        ("http_401", "AUTH", 401, "Authentication Fails, Your api key: ****abcd is invalid", None),
        ("http_402", "QUOTA", 402, "Insufficient Balance", None),
        ("http_403", "AUTH", 403, "Permission denied: this API key may not use this model", None),
        ("http_413", "INVALID_REQUEST", 413, "Request body too large", None),
        ("http_422", "HTTP_422", 422, "Invalid Parameters: temperature must be between 0 and 2", None),
        ("http_429", "RATE_LIMIT", 429, "Rate Limit Reached", 2.0),
        ("http_500", "SERVER", 500, "Internal Server Error", None),
        ("http_502_html", "SERVER", 502, "API error (HTTP 502) from {E}", None),
        ("http_503", "SERVER", 503, "Server Overloaded, please try again later", None),
        ("http_418", "HTTP_418", 418, "I'm a Teapot", None),
        (Behaviour("http_400", message="Insufficient Balance"), "QUOTA", 400, "Insufficient Balance", None),
        (Behaviour("http_429", message="You exceeded your current quota"), "QUOTA", 429,
         "You exceeded your current quota", 2.0),
        (Behaviour("http_401", body=b""), "AUTH", 401, "API error (HTTP 401) from {E}", None),
        (Behaviour("http_error", status=404, body="<h1>not here</h1>"), "HTTP_404", 404,
         "API error (HTTP 404) from {E}", None),
        (Behaviour("http_error", status=400, body='{"error": {"message": ""}}'), "INVALID_REQUEST", 400,
         "API error (HTTP 400) from {E}", None),
        (Behaviour("http_error", status=409, message="Conflict: try again"), "HTTP_409", 409,
         "Conflict: try again", None),
    ],
)
async def test_http_error_table(fault_server, make_client, stream_outcome, behaviour, code, status, message,
                                retry_after):
    fault_server.push(behaviour)
    outcome = await stream_outcome(make_client(fault_server.url))
    error = outcome.failure
    message = message.replace("{E}", unnamed(fault_server.url))
    assert (error.code, error.message, error.status, error.retry_after_s) == (code, message, status, retry_after)
    assert error.request_id == "fault-0001"
    assert outcome.events == []


def _http_date(offset_s: float) -> str:
    return email.utils.formatdate(time.time() + offset_s, usegmt=True)


@pytest.mark.parametrize(
    ("header", "expected"),
    [("7", 7.0), ("1.5", 1.5), ("0", None), ("-3", None), ("soon", None), ("", None), ("nan", None),
     ("inf", None), pytest.param(_http_date(-120), None, id="a-date-two-minutes-ago-None"),
     ("Wed, 99 Foo 2020 99:99:99 GMT", None)],
)  # the date's id is fixed: xdist workers collect at different moments and must name the same tests
async def test_retry_after_values(fault_server, make_client, stream_outcome, header, expected):
    fault_server.push(Behaviour("http_429", retry_after=header))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert error.code == "RATE_LIMIT"
    assert error.retry_after_s == expected


async def test_retry_after_http_date_in_the_future(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("http_503", retry_after=_http_date(30)))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert error.code == "SERVER"
    assert error.retry_after_s is not None and 27 <= error.retry_after_s <= 31


async def test_no_retry_after_header(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("http_429", retry_after=None))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.retry_after_s) == ("RATE_LIMIT", None)


@pytest.mark.parametrize(
    ("params", "expected"),
    [({"request_id_header": "x-deepseek-request-id", "request_id": "ds-77"}, "ds-77"),
     ({"request_id": "abc-123"}, "abc-123"), ({"request_id": ""}, None)],
)
async def test_request_id_headers(fault_server, make_client, stream_outcome, params, expected):
    fault_server.push(Behaviour("http_500", **params), Behaviour("no_finish", **params))
    client = make_client(fault_server.url)
    assert (await stream_outcome(client)).failure.request_id == expected
    assert (await stream_outcome(client)).failure.request_id == expected


# --- pre-response and mid-stream transport failures via the fault server -----------------


@pytest.mark.parametrize(
    ("behaviour", "phase", "root", "before"),
    [
        ("reset_before_headers", "request to", "ReadError: BrokenResourceError: [Errno 104] Connection reset by peer",
         []),
        ("disconnect_before_response", "request to", "Server disconnected without sending a response.", []),
        ("reset_mid_stream", "stream from", "ReadError: BrokenResourceError: [Errno 104] Connection reset by peer",
         text_events(["Half ", "an ", "answer"])),
        ("fin_mid_stream", "stream from",
         "peer closed connection without sending complete message body (incomplete chunked read)",
         text_events(["Half ", "an ", "answer"])),
    ],
)
async def test_transport_failures_from_the_server(fault_server, make_client, stream_outcome, behaviour, phase,
                                                  root, before):
    fault_server.push(behaviour)
    outcome = await stream_outcome(make_client(fault_server.url))
    error = outcome.failure
    message = f"{phase} the endpoint at {fault_server.url} failed"
    assert (error.code, error.message, error.status) == ("TRANSPORT", message, None)
    assert error_chain(error) == f"{message}: {root}"
    assert outcome.events == before


# --- the request on the wire ---------------------------------------------------------------

WEATHER_TOOL = ToolSpec("get_weather", "Get the weather", {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})


async def test_request_headers(fault_server, make_client, stream_outcome):
    await stream_outcome(make_client(fault_server.url))
    request = fault_server.requests[0]
    assert (request.method, request.path) == ("POST", "/chat/completions")
    assert_bearer_key(request.headers.get("authorization"))
    assert request.headers["user-agent"] == f"dsh/{dsh.llm.__version__}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "text/event-stream"


async def test_no_key_sends_no_authorization(fault_server, make_client, stream_outcome):
    await stream_outcome(make_client(fault_server.url, api_key=None))
    assert "authorization" not in fault_server.requests[0].headers


@pytest.mark.parametrize(("suffix", "path"), [("", "/chat/completions"), ("/", "/chat/completions"),
                                              ("/v1", "/v1/chat/completions"), ("/v1/", "/v1/chat/completions")])
async def test_endpoint_path(fault_server, make_client, stream_outcome, suffix, path):
    assert (await stream_outcome(make_client(fault_server.url + suffix))).error is None
    assert fault_server.requests[0].path == path


async def test_minimal_body_omits_optionals(fault_server, make_client, stream_outcome):
    await stream_outcome(make_client(fault_server.url))
    assert fault_server.requests[0].json == {
        "model": "deepseek-v4-flash",
        "messages": [{"role": "user", "content": "Say hello."}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_full_body_thinking_tools_and_reasoning_passback(fault_server, make_client, stream_outcome):
    request = ChatRequest(
        "deepseek-v4-pro",
        (
            Message("system", "You are a coding agent."),
            Message("user", "Weather in Hangzhou?"),
            Message("assistant", "", reasoning_content="Need the weather.",
                    tool_calls=(ToolCall("call_1", "get_weather", '{"location": "Hangzhou"}'),)),
            Message("tool", "Sunny, 24C", tool_call_id="call_1"),
            Message("assistant", "", tool_calls=(ToolCall("call_2", "get_weather", '{"location": "Beijing"}'),)),
            Message("tool", "Rain", tool_call_id="call_2"),
            Message("assistant", "Sunny in Hangzhou, rain in Beijing."),
            Message("user", "Thanks"),
        ),
        tools=(WEATHER_TOOL,),
        max_tokens=8192,
        thinking=True,
        reasoning_effort="high",
    )
    await stream_outcome(make_client(fault_server.url), request)
    assert fault_server.requests[0].json == {
        "model": "deepseek-v4-pro",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Weather in Hangzhou?"},
            {"role": "assistant", "content": "", "reasoning_content": "Need the weather.",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": '{"location": "Hangzhou"}'}}]},
            {"role": "tool", "content": "Sunny, 24C", "tool_call_id": "call_1"},
            # A tool-call turn with no reasoning still carries the key, or thinking mode answers 400.
            {"role": "assistant", "content": "", "reasoning_content": "",
             "tool_calls": [{"id": "call_2", "type": "function",
                             "function": {"name": "get_weather", "arguments": '{"location": "Beijing"}'}}]},
            {"role": "tool", "content": "Rain", "tool_call_id": "call_2"},
            {"role": "assistant", "content": "Sunny in Hangzhou, rain in Beijing."},
            {"role": "user", "content": "Thanks"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather", "parameters": WEATHER_TOOL.parameters}}],
        "max_tokens": 8192,
        "thinking": {"type": "enabled"},
        "reasoning_effort": "high",
    }
    assert request_body(request) == fault_server.requests[0].json


@pytest.mark.parametrize(("thinking", "effort", "extra"), [
    (False, None, {"thinking": {"type": "disabled"}}),
    (None, "max", {"reasoning_effort": "max"}),
    (True, "low", {"thinking": {"type": "enabled"}, "reasoning_effort": "low"}),
])
async def test_thinking_and_effort_fields(fault_server, make_client, stream_outcome, thinking, effort, extra):
    request = ChatRequest("m", (Message("user", "hi"),), thinking=thinking, reasoning_effort=effort)
    await stream_outcome(make_client(fault_server.url), request)
    body = fault_server.requests[0].json
    assert {k: body[k] for k in ("thinking", "reasoning_effort") if k in body} == extra
    assert "tools" not in body and "max_tokens" not in body
    assert None not in body.values()


async def test_unicode_body_round_trips(fault_server, make_client, stream_outcome):
    request = ChatRequest("m", (Message("user", "Grüße, 世界 🌍"),))
    await stream_outcome(make_client(fault_server.url), request)
    assert fault_server.requests[0].json["messages"][0]["content"] == "Grüße, 世界 🌍"


# --- redaction -----------------------------------------------------------------------------

CANARY_BASE = f"{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{{port}}/v1?token={canaries.URL_QUERY}"
STRICT = (canaries.API_KEY, canaries.URL_USER, canaries.URL_PASSWORD, canaries.URL_QUERY)


def assert_no_canary(*texts: str) -> None:
    for text in texts:
        for number, canary in enumerate(STRICT):
            leaked = canary in text
            assert not leaked, f"canary #{number} leaked into a rendered error"  # never print the secret


def assert_bearer_key(header: str | None) -> None:
    sent_the_key = header == f"Bearer {canaries.API_KEY}"
    scheme = (header or "(none)").split()[0]
    assert sent_the_key, f"Authorization carried {scheme} credentials, not the configured bearer key"


async def test_canaries_never_reach_a_transport_error(make_client, stream_outcome):
    from dsh.llm.loopback.fault_server import closed_port

    with closed_port() as port:
        client = make_client("http://" + CANARY_BASE.format(port=port))
        error = (await stream_outcome(client)).failure
    assert client.base_url_display == f"http://***@127.0.0.1:{port}/v1"
    assert error.message == f"request to the endpoint at http://***@127.0.0.1:{port}/v1 failed"
    assert error_chain(error) == (
        f"request to the endpoint at http://***@127.0.0.1:{port}/v1 failed: All connection attempts failed: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})"
    )
    assert_no_canary(error.message, error_chain(error), repr(error), str(error))


async def test_provider_and_payload_echoes_of_the_key_are_masked(fault_server, make_client, stream_outcome):
    fault_server.push(
        Behaviour("http_401", message=f"Authentication Fails, Your api key: {canaries.API_KEY} is invalid"),
        Behaviour("http_400", message=f"bad upstream key {canaries.UPSTREAM_KEY}"),
        Behaviour("malformed_json", payload=f"oops {canaries.API_KEY} Authorization: Bearer {canaries.API_KEY}"),
    )
    client = make_client(fault_server.url)
    auth = (await stream_outcome(client)).failure
    assert (auth.code, auth.message) == ("AUTH", "Authentication Fails, Your api key: *** is invalid")
    upstream = (await stream_outcome(client)).failure
    assert canaries.UPSTREAM_KEY not in upstream.message and upstream.message.startswith("bad upstream key sk-")
    malformed = (await stream_outcome(client)).failure
    assert malformed.code == "MALFORMED_RESPONSE"
    for error in (auth, upstream, malformed):
        assert_no_canary(error.message, error_chain(error))


async def test_base_url_query_is_kept_after_the_path(fault_server, make_client, stream_outcome):
    """A query on the base URL (gateways use one) is masked in messages but must not break the request:
    the endpoint path goes before it, not after it."""
    client = make_client(f"{fault_server.url}/v1?api-version=2025-01")
    outcome = await stream_outcome(client)
    request = fault_server.requests[0]
    assert (request.path, request.query) == ("/v1/chat/completions", "api-version=2025-01")
    assert outcome.error is None


async def test_base_url_userinfo_does_not_replace_the_bearer_key(fault_server, make_client, stream_outcome):
    """httpx turns URL userinfo into Basic auth, which silently overwrites ``Authorization: Bearer``."""
    client = make_client(f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{fault_server.port}")
    assert (await stream_outcome(client)).error is None
    assert_bearer_key(fault_server.requests[0].headers.get("authorization"))


@pytest.mark.parametrize("behaviour", ["reset_mid_stream", "fin_mid_stream", "disconnect_before_response",
                                       "stall_after_headers", "malformed_json", "http_503", "no_finish"])
async def test_userinfo_canaries_never_reach_a_stream_error(fault_server, make_client, stream_outcome, behaviour):
    fault_server.push(behaviour)
    base = f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{fault_server.port}"
    error = (await stream_outcome(make_client(base, stream_idle_timeout=0.3))).failure
    assert_no_canary(error.message, error_chain(error), repr(error))
    if error.code == "TRANSPORT":
        assert f"http://***@127.0.0.1:{fault_server.port} failed" in error.message


async def test_error_body_is_json_shaped_like_deepseek(fault_server):
    """The fault server's own contract for error bodies (clients parse ``error.message``)."""
    import httpx

    fault_server.push("http_402")
    async with httpx.AsyncClient() as http:
        response = await http.post(fault_server.url + "/chat/completions", json={})
    assert response.status_code == 402
    assert response.headers["x-request-id"] == "fault-0001"
    assert json.loads(response.content) == {"error": {"message": "Insufficient Balance", "type": "unknown_error",
                                                      "param": None, "code": "invalid_request_error"}}


async def test_server_used_in_a_thread_by_sync_callers(make_client, stream_outcome):
    server = FaultServer(["reasoning"]).start_in_thread()
    try:
        outcome = await stream_outcome(make_client(server.url))
    finally:
        server.stop()
    assert outcome.error is None
    assert isinstance(outcome.events[0], ReasoningDelta)
