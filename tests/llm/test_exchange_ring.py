"""The failure capsule's ring (llm/exchange_ring.py): bounded, whole exchanges, masked as ``--record`` masks.

The ring is fed by a real :class:`TraceWriter` and the recording transport over a real loopback server, as
the client feeds it; the bound is asserted on the bytes it holds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from dsh.llm import ChatRequest, DeepSeekClient, LlmError, Message
from dsh.llm.exchange_ring import ExchangeRing
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.wire_trace import BodyTee, TraceWriter
from tests import canaries

CAP = 64 * 1024


def _exchange(writer: TraceWriter, body: bytes, *, status: int = 200, request: bytes = b"{}") -> int:
    """One exchange through the writer as the recording transport writes it."""
    n = writer.next_exchange()
    writer.request(n, "POST", "http://127.0.0.1:9/chat/completions", "/chat/completions",
                   [("Authorization", f"Bearer {canaries.API_KEY}")], request)
    writer.response(n, 0.001, status, [("content-type", "text/event-stream")])
    tee = BodyTee(writer, n, time.monotonic(), None)
    for start in range(0, len(body), 8192):
        tee.feed(body[start:start + 8192])
    tee.flush()
    writer.end(n, 0.002, "complete", note="cut" if tee.cut else None)
    return n


def _lines(ring: ExchangeRing, after: int = 0) -> list[dict]:
    return [json.loads(line) for _, line in ring.lines(after)]


def test_a_long_session_s_ring_stays_under_its_cap_and_keeps_the_latest_whole_exchanges() -> None:
    ring = ExchangeRing(CAP)
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=ring)
    body = b"".join(b'data: {"choices":[{"delta":{"content":"%d"}}]}\n\n' % i for i in range(200))  # ~9 KB
    sizes = []
    for _ in range(100):
        _exchange(writer, body)
        sizes.append(ring.size)
    assert max(sizes) <= CAP
    # The size counts the raw bytes held (masked and serialized only when read): every body byte is in it.
    assert sum(len(r["text"].encode()) for r in _lines(ring) if r["type"] == "data") <= ring.size
    held = ring.exchanges()
    assert held == list(range(101 - len(held), 101)) and 4 <= len(held) < 10  # the newest, oldest dropped
    for n in held:  # each kept exchange is whole: request, response, the whole body, end
        records = [record for record in _lines(ring, n - 1) if record["n"] == n]
        assert [r["type"] for r in records[:2]] == ["request", "response"] and records[-1]["type"] == "end"
        assert "".join(r["text"] for r in records if r["type"] == "data") == body.decode()
    assert canaries.API_KEY not in "".join(line.decode() for _, line in ring.lines(0))


def test_one_exchange_over_the_cap_keeps_its_request_response_and_end_and_notes_the_cut_body() -> None:
    ring = ExchangeRing(CAP)
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=ring)
    _exchange(writer, b"data: small\n\n")
    huge_request = json.dumps({"messages": [{"content": "x" * (CAP * 2)}]}).encode()
    n = _exchange(writer, b"data: " + b"y" * 100 + b"\n\n" * 1 + b"data: zzzz\n\n" * 20_000, request=huge_request)
    records = [record for record in _lines(ring) if record["n"] == n]
    assert ring.exchanges()[-1] == n
    assert [r["type"] for r in records][:2] == ["request", "response"]
    assert records[0]["note"] == "cut" and len(records[0]["body"]) == CAP // 16
    assert records[-1] == {"type": "end", "n": n, "t": 0.002, "how": "complete", "note": "cut"}
    assert ring.size <= CAP + 200  # the cap, and at most the end record over it
    assert not ring.keeps(n)


def test_with_record_on_the_file_gets_every_exchange_and_the_ring_the_same_lines_for_the_latest(
        tmp_path: Path) -> None:
    ring = ExchangeRing(CAP)
    trace = tmp_path / "trace.jsonl"
    writer = TraceWriter(trace, secrets=(canaries.API_KEY,), ring=ring)
    body = b"data: " + b"q" * 3000 + b"\n\n"
    for _ in range(40):
        _exchange(writer, body)
    writer.close()
    lines = trace.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[0])["type"] == "dsh-wire-trace"
    assert sum(1 for line in lines if b'"type":"end"' in line) == 40
    kept = [line for _, line in ring.lines(0)]
    assert kept == lines[-len(kept):]  # one format: the ring holds the file's own lines
    assert ring.exchanges()[-1] == 40 and ring.size <= CAP


@pytest.mark.anyio
async def test_the_client_s_ring_holds_each_exchange_masked_and_numbers_them_for_the_turn() -> None:
    server = FaultServer(script=[Behaviour("text"), Behaviour("http_500", message=f"echo {canaries.API_KEY}")])
    server.start_in_thread()
    try:
        async with DeepSeekClient(base_url=server.url, api_key=canaries.API_KEY, ring_bytes=CAP) as client:
            request = ChatRequest(model="m", messages=[Message("user", "hi")])
            async for _ in client.stream(request):
                pass
            with pytest.raises(LlmError):
                async for _ in client.stream(request):
                    pass
            assert client.ring is not None and client.ring.last == 2
            text = b"".join(line for _, line in client.ring.lines(1)).decode()
            header = client.trace_header
    finally:
        server.stop()
    assert canaries.API_KEY not in text and '"status":500' in text
    assert header is not None and header["type"] == "dsh-wire-trace" and header["base_url"] == server.url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_big_request_is_masked_only_as_far_as_the_ring_keeps_it_and_a_secret_across_the_cut_is_masked() -> None:
    ring = ExchangeRing(CAP)
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=ring)
    cut = CAP // 16
    head = "x" * (cut - len('{"content":"') - 5)  # the key starts 5 characters before the cut point
    body = ('{"content":"' + head + canaries.API_KEY + "y" * (CAP * 4) + canaries.API_KEY + '"}').encode()
    n = _exchange(writer, b"data: ok\n\n", request=body)
    [request] = [record for record in _lines(ring) if record["n"] == n and record["type"] == "request"]
    assert request["note"] == "cut" and len(request["body"]) == cut
    assert request["body"].endswith("x***yy")  # masked whole, then cut: no piece of the key is left
    assert canaries.API_KEY not in "".join(line.decode() for _, line in ring.lines(0))


def test_no_ring_and_no_record_means_no_trace_at_all() -> None:
    client = DeepSeekClient(base_url="http://127.0.0.1:9", api_key="k")
    assert client.ring is None and client.trace_header is None
    anyio.run(client.aclose)
