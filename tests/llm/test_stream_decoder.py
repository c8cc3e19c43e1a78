"""The sans-I/O stream decoder: how a body is split into reads never changes its events or its error.

Each case is a whole response body; it is fed whole, split at every position, and cut into arbitrary
pieces (hypothesis), and must give the same events and then the same error code and message.
"""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import (
    Finish,
    KeepAlive,
    LlmError,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    error_chain,
)
from dsh.llm.stream_decoder import PIECE, StreamDecoder


def chunk(delta: dict[str, object] | None = None, finish: str | None = None, **extra: object) -> bytes:
    payload = {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_cache_hit_tokens": 1,
         "prompt_cache_miss_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 1}}

WHOLE = (
    b"\xef\xbb\xbf: keep-alive\r\n\r\n"
    + chunk({"reasoning_content": "think"})
    + chunk({"content": "Gr\u00fc\u00dfe "}).replace(b"\n", b"\r\n")
    + b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"\\ud83d"}}]}\n\n'
    + chunk({"content": "\\ude00"}).replace(b"\\\\", b"\\")
    + chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "read", "arguments": '{"a"'}}]})
    + chunk({}, "tool_calls", usage=USAGE)
    + DONE
    + b"data: not json, after [DONE], ignored\n\n"
)
WHOLE_EVENTS: list[StreamEvent] = [
    KeepAlive(),
    ReasoningDelta("think"),
    TextDelta("Grüße "),
    TextDelta("\U0001f600"),
    ToolCallDelta(0, "call_1", "read", '{"a"'),
    Usage(3, 2, 5, 1, 2, 1),
    Finish("tool_calls"),
]

# (body, the events before the end, the error code and message; None when the stream completes)
CASES: dict[str, tuple[bytes, list[StreamEvent], tuple[str, str] | None]] = {
    "whole": (WHOLE, WHOLE_EVENTS, None),
    "finish then clean close": (chunk({"content": "hi"}, "stop"), [TextDelta("hi"), Finish("stop")], None),
    "unterminated [DONE]": (chunk({"content": "hi"}) + b"data: [DONE]", [TextDelta("hi"), Finish("stop")], None),
    "no [DONE], no finish": (
        chunk({"content": "hi"}), [TextDelta("hi")], ("STREAM_CLOSED", "SSE stream ended without [DONE]")
    ),
    "keep-alives only": (b": ka\n\n" * 3, [KeepAlive()], ("STREAM_CLOSED", "SSE stream ended without [DONE]")),
    "empty body": (b"", [], ("EMPTY_RESPONSE", "DeepSeek API returned no response body")),
    "empty completion": (chunk({}, "stop") + DONE, [], ("EMPTY_RESPONSE", "DeepSeek API returned an empty completion")),
    "not JSON": (
        chunk({"content": "a"}) + b"data: {nope\n\n" + chunk({"content": "b"}),
        [TextDelta("a")],
        ("MALFORMED_RESPONSE", "malformed SSE payload: {nope: "
                               "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ),
    "wrong shape": (b"data: [1, 2]\n\n", [], (
        "MALFORMED_RESPONSE", "malformed SSE payload: [1, 2]: not a chat.completion.chunk object"
    )),
    "content filter": (
        chunk({"content": "a"}, "content_filter") + DONE,
        [TextDelta("a")],
        ("CONTENT_FILTER", 'DeepSeek stream finished with finish_reason "content_filter"'),
    ),
    "relay error event": (
        chunk({"content": "a"})
        + b'data: {"error": {"message": "upstream\\nlost", "type": "internal_server_error", "code": "500"}}\n\n',
        [TextDelta("a")],
        ("SERVER", "upstream lost"),
    ),
    "relay error event without a message": (
        b'data: {"error": {"type": "rate_limit_error"}}\n\n',
        [],
        ("RATE_LIMIT", "DeepSeek sent an error event in the stream"),
    ),
    "an error field beside choices is no relay error": (
        chunk({"content": "a"}, "stop", error={"message": "ignored"}) + DONE,
        [TextDelta("a"), Finish("stop")],
        None,
    ),
    "OpenAI-shaped usage": (
        chunk({"content": "a"}) + chunk({}, "stop", usage={
            "prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920,
            "prompt_tokens_details": {"cached_tokens": 800}, "completion_tokens_details": {"reasoning_tokens": 5}})
        + DONE,
        [TextDelta("a"), Usage(900, 20, 920, 800, 100, 5), Finish("stop")],  # the misses are the rest
        None,
    ),
    "lone surrogate": (
        chunk({"content": "\\ud83d"}).replace(b"\\\\", b"\\") + chunk({}, "stop") + DONE,
        [TextDelta("\ufffd"), Finish("stop")],
        None,
    ),
}


def decode(reads: list[bytes], **kwargs: object) -> tuple[list[StreamEvent], tuple[str, str] | None]:
    """Every event the reads give, piece by piece as the client hands them over, then the end."""
    decoder = StreamDecoder(**kwargs)  # type: ignore[arg-type]
    events: list[StreamEvent] = []
    try:
        for read in reads:
            for piece in decoder.pieces(read):
                events.extend(piece)
        events.extend(decoder.close())
    except LlmError as exc:
        return events, (exc.code, error_chain(exc))  # the line a user reads: the message and its causes
    return events, None


def squash(events: list[StreamEvent]) -> list[StreamEvent]:
    """Adjacent keep-alives as one: a run of comments split across reads is a proof of life per read."""
    return [e for i, e in enumerate(events) if not (isinstance(e, KeepAlive) and i and events[i - 1] == e)]


@pytest.mark.parametrize("name", CASES)
def test_a_body_fed_whole_gives_its_events_then_its_end(name: str) -> None:
    body, events, end = CASES[name]
    assert decode([body]) == (events, end)


@pytest.mark.parametrize("name", CASES)
def test_a_body_split_at_every_position_gives_the_same_events(name: str) -> None:
    body, events, end = CASES[name]
    for cut in range(len(body) + 1):
        got, got_end = decode([body[:cut], body[cut:]])
        assert (squash(got), got_end) == (events, end), cut


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(CASES)), data=st.data())
def test_a_body_cut_into_any_reads_gives_the_same_events(name: str, data: st.DataObject) -> None:
    body, events, end = CASES[name]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=12)))
    reads = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    got, got_end = decode(reads)
    assert (squash(got), got_end) == (events, end)


def test_a_gzip_bomb_inflates_in_bounded_pieces_with_events_between() -> None:
    body = chunk({"content": "x"}) + b": " + b"k" * (4 * PIECE) + b"\n\n" + chunk({"content": "y"}, "stop") + DONE
    decoder = StreamDecoder("gzip")
    pieces = list(decoder.pieces(gzip.compress(body)))
    assert len(pieces) >= 4
    assert pieces[0] == [TextDelta("x")]
    assert decoder.done
    assert decoder.close() == [Finish("stop")]


def test_an_encoding_that_was_not_offered_is_malformed_before_any_read() -> None:
    with pytest.raises(LlmError) as caught:
        StreamDecoder("br", request_id="req-1")
    assert (caught.value.code, str(caught.value), caught.value.request_id) == (
        "MALFORMED_RESPONSE", "unsupported Content-Encoding: br", "req-1"
    )


def test_a_body_that_does_not_inflate_is_malformed() -> None:
    zlib_says = "Error -3 while decompressing data: incorrect header check"
    assert decode([b"not gzip at all"], content_encoding="gzip") == (
        [], ("MALFORMED_RESPONSE", f"the response body does not inflate: {zlib_says}: {zlib_says}"),
    )


def test_a_malformed_preview_masks_the_secrets_and_keeps_120_characters() -> None:
    payload = "sk-canary-secret " + "z" * 200
    _, end = decode([f"data: {payload}\n\n".encode()], secrets=("sk-canary-secret",))
    assert end is not None and end[0] == "MALFORMED_RESPONSE"
    assert "sk-canary-secret" not in end[1]
    assert end[1].startswith("malformed SSE payload: *** " + "z" * 103 + ": Expecting value: line 1 column 1")


def test_a_line_that_never_ends_is_malformed_not_unbounded_memory() -> None:
    decoder = StreamDecoder(max_line_bytes=1024)  # the real bound is 64 MiB
    with pytest.raises(LlmError) as caught:
        decoder.feed(b"data: " + b"a" * 2048)
    assert caught.value.code == "MALFORMED_RESPONSE"
    assert error_chain(caught.value) == f"malformed SSE payload: data: {'a' * 114}: SSE line longer than 1024 bytes"
