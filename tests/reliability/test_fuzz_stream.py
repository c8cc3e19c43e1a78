"""Fuzzing the stream path: whatever bytes arrive, the client ends with Finish or a documented code.

The body is served through ``httpx.MockTransport`` so hypothesis can run thousands of cases quickly;
the same client code runs over real sockets in the fault-matrix tests.
"""

from __future__ import annotations

import json
from contextlib import aclosing

import anyio
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.llm import ChatRequest, DeepSeekClient, Finish, LlmError, Message

DOCUMENTED_STREAM_CODES = {
    "STREAM_CLOSED",
    "MALFORMED_RESPONSE",
    "EMPTY_RESPONSE",
    "CONTENT_FILTER",
    "INSUFFICIENT_SYSTEM_RESOURCE",
    "TRANSPORT",
    "TIMEOUT",
}
REQUEST = ChatRequest("fuzz-model", (Message("user", "hi"),))
FUZZ_CASES = {"count": 0}


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


GOOD_LINES = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "héllo"}),
    _chunk({"reasoning_content": "thinking"}),
    _chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
    _chunk({}, "stop"),
    _chunk({}, "tool_calls"),
    _chunk({}, "length"),
    _chunk({}, "content_filter"),
    b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n',
    b": keep-alive\n\n",
    b"data: [DONE]\n\n",
]
GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"data: {not json\n\n", b"data: []\n\n", b'data: {"choices": 3}\n\n', b"\xff\xfe\n", b"\r\n"]),
    st.text(max_size=40).map(lambda t: ("data: " + t + "\n\n").encode("utf-8", "surrogatepass")),
    # JSON escapes that spell surrogates, lone or halves of a pair: nothing lone may come out
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(), max_size=4).map(
        lambda t: _chunk({"content": t})
    ),
)
STREAMS = st.lists(st.one_of(st.sampled_from(GOOD_LINES), GARBAGE), max_size=30).map(b"".join)


def _transport(body: bytes, cuts: list[int]) -> httpx.MockTransport:
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]

    async def stream():
        for piece in pieces:
            yield piece

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    return httpx.MockTransport(handler)


async def _consume(body: bytes, cuts: list[int]) -> str:
    async with httpx.AsyncClient(transport=_transport(body, cuts)) as http:
        client = DeepSeekClient(base_url="http://fuzz.invalid", api_key="sk-fuzz", http_client=http)
        try:
            async with aclosing(client.stream(REQUEST)) as events:
                async for event in events:
                    if isinstance(event, Finish):
                        return "finish"
                    for text in (getattr(event, "text", ""), getattr(event, "arguments", "")):
                        text.encode("utf-8")  # no lone surrogate crosses the decoding boundary
        except LlmError as exc:
            assert exc.code in DOCUMENTED_STREAM_CODES, exc.code
            assert "sk-fuzz" not in str(exc)
            return exc.code
    raise AssertionError("stream neither finished nor failed")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STREAMS, st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_random_streams_end_in_finish_or_a_documented_code(body: bytes, cuts: list[int]) -> None:
    FUZZ_CASES["count"] += 1
    anyio.run(_consume, body, cuts)


def test_truncation_at_every_offset() -> None:
    body = b"".join([GOOD_LINES[0], GOOD_LINES[1], GOOD_LINES[3], GOOD_LINES[4], GOOD_LINES[6], GOOD_LINES[11]])

    # The finish reason's event is whole (its blank line arrived): a clean end from there on completes.
    finished_at = body.index(GOOD_LINES[6]) + len(GOOD_LINES[6])

    async def run_all() -> None:
        for offset in range(len(body) + 1):
            outcome = await _consume(body[:offset], [])
            if offset >= finished_at:
                assert outcome == "finish", offset
            elif offset == 0:
                assert outcome == "EMPTY_RESPONSE"
            else:  # every shorter prefix is an honest failure, never a silent success
                assert outcome == "STREAM_CLOSED", (offset, outcome)

    anyio.run(run_all)


def test_ten_megabyte_single_line_is_handled() -> None:
    text = "x" * (10 * 1024 * 1024)
    body = _chunk({"content": text}) + _chunk({}, "stop") + GOOD_LINES[11]

    async def run() -> tuple[str, int]:
        received = 0
        async with httpx.AsyncClient(transport=_transport(body, list(range(0, len(body), 65536)))) as http:
            client = DeepSeekClient(base_url="http://fuzz.invalid", api_key="k", http_client=http)
            async with aclosing(client.stream(REQUEST)) as events:
                async for event in events:
                    if isinstance(event, Finish):
                        return event.reason, received
                    received += len(getattr(event, "text", ""))
        raise AssertionError("no finish")

    assert anyio.run(run) == ("stop", len(text))
