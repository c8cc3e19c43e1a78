"""The SSE decoder: chunking never changes the events; CRLF, BOM, multi-line data, comments."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import SseComment, SseDecoder, SseEvent

RECORDED = (
    "\ufeff: keep-alive\r\n\r\n"
    'data: {"choices":[{"index":0,"delta":{"content":"Grüße, 世界 🌍"}}]}\r\n\r\n'
    ": keep-alive\n\n"
    "event: message\n"
    'data: {"choices":[{"index":0,\n'
    'data: "delta":{"reasoning_content":"ψ≈2"}}]}\n\n'
    "data: [DONE]\n\n"
).encode()


def decode(chunks: list[bytes]) -> list[SseEvent | SseComment]:
    decoder = SseDecoder()
    events: list[SseEvent | SseComment] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events


EXPECTED = [
    SseComment("keep-alive"),
    SseEvent('{"choices":[{"index":0,"delta":{"content":"Grüße, 世界 🌍"}}]}'),
    SseComment("keep-alive"),
    SseEvent('{"choices":[{"index":0,\n"delta":{"reasoning_content":"ψ≈2"}}]}', "message"),
    SseEvent("[DONE]"),
]


def test_whole_stream() -> None:
    assert decode([RECORDED]) == EXPECTED


def test_byte_at_a_time() -> None:
    assert decode([RECORDED[i : i + 1] for i in range(len(RECORDED))]) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(RECORDED)), max_size=40))
def test_any_split_points_give_identical_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [RECORDED[a:b] for a, b in zip([0, *points], [*points, len(RECORDED)], strict=True)]
    assert decode(chunks) == EXPECTED


def test_unterminated_final_event_is_flushed_at_close() -> None:
    assert decode([b"data: last"]) == [SseEvent("last")]


def test_data_without_space_and_unknown_fields() -> None:
    assert decode([b"id: 7\nretry: 10\ndata:x\nfoo: bar\n\n"]) == [SseEvent("x")]


def test_blank_lines_alone_produce_nothing() -> None:
    assert decode([b"\n\n\r\n\n"]) == []


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert decode([b"data: \xff\xfe\n\n"]) == [SseEvent("\ufffd\ufffd")]
