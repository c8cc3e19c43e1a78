"""The capsule's ring holds the exchanges' bytes raw and masks them when read (llm/exchange_ring.py,
docs/reporting.md): a turn pays no masking for a report it almost never asks for, and the report is masked
with every secret known when it is written, including one the client never knew.

A real :class:`TraceWriter` feeds the ring as the recording transport does (tests/llm/test_exchange_ring.py's
``_exchange``); what a reader gets is compared with what a ``--record`` file gets for the same exchange.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm.exchange_ring import ExchangeRing
from dsh.llm.wire_trace import TraceWriter
from tests import canaries
from tests.llm.test_exchange_ring import CAP, _exchange

LATER = "canaryRingLaterSecret4417"  # known only when the report is written (a secret-named variable, say)


def _records(ring: ExchangeRing, writer: TraceWriter | None = None) -> list[dict]:
    render = writer.finish if writer is not None else None
    return [json.loads(line) for _, line in ring.lines(0, render)]


def test_a_ring_alone_masks_nothing_until_read_and_a_report_masks_what_it_knows_then() -> None:
    ring = ExchangeRing(CAP)
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=ring)
    body = f'data: {{"c":"{canaries.API_KEY} and {LATER}"}}\n\n'.encode()
    _exchange(writer, body, request=f'{{"m":"{LATER}"}}'.encode())

    by_client = _records(ring)  # the client's secrets alone: what --record would have written
    assert by_client[2]["text"] == f'data: {{"c":"*** and {LATER}"}}\n\n'
    report = TraceWriter(secrets=(*ring.secrets, LATER))
    by_report = _records(ring, report)
    assert [r["type"] for r in by_report] == ["request", "response", "data", "end"]
    assert by_report[0]["body"] == '{"m":"***"}' and by_report[0]["headers"] == [["Authorization", "***"]]
    assert by_report[2]["text"] == 'data: {"c":"*** and ***"}\n\n'
    assert ring.secrets == (canaries.API_KEY,)


def test_the_ring_reads_back_the_lines_a_record_file_writes_for_the_same_exchange(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    alone, filed = ExchangeRing(CAP), TraceWriter(trace, secrets=(canaries.API_KEY,))
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=alone)
    body = (b'data: {"k":"' + canaries.API_KEY.encode() + b'"}\n\n' + b"data: \xff\xfe not utf-8\n\n"
            + "data: é \ud83d\n\n".encode("utf-8", "surrogatepass"))
    _exchange(writer, body, status=500)
    _exchange(filed, body, status=500)
    filed.close()
    written = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()[1:]]
    for record in (*written, *(read := _records(alone))):
        record.pop("t", None)  # when each piece arrived differs between the two runs
    assert read == written


def test_an_image_in_a_request_is_held_as_its_size_and_hash_never_its_bytes() -> None:
    ring = ExchangeRing(CAP)
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=ring)
    image = bytes(range(256)) * 40
    encoded = base64.b64encode(image).decode()
    _exchange(writer, b"data: ok\n\n", request=json.dumps({"url": f"data:image/png;base64,{encoded}"}).encode())
    [request] = [r for r in _records(ring, TraceWriter(secrets=ring.secrets)) if r["type"] == "request"]
    digest = hashlib.sha256(image).hexdigest()
    assert request["body"] == json.dumps({"url": f"data:image/png;base64,<image omitted: {len(image)} bytes, "
                                                 f"sha256 {digest}>"})
    assert encoded[:64] not in "".join(line.decode() for _, line in ring.lines(0))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=4096), st.integers(min_value=0, max_value=4096))
def test_hostile_bytes_around_the_key_are_held_under_the_cap_and_never_read_back_with_it(
        noise: bytes, at: int) -> None:
    ring = ExchangeRing(4096)
    writer = TraceWriter(secrets=(canaries.API_KEY,), ring=ring)
    body = noise[:at] + canaries.API_KEY.encode() + noise[at:]
    for _ in range(3):
        _exchange(writer, body, request=body)
    assert ring.size <= 4096 + 256  # the cap, and one end record over it
    text = b"".join(line for _, line in ring.lines(0))
    assert canaries.API_KEY.encode() not in text
    for record in map(json.loads, text.splitlines()):
        if "b64" in record:
            assert canaries.API_KEY.encode() not in base64.b64decode(record["b64"])
