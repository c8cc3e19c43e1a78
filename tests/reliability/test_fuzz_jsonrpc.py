"""Fuzzing the JSON-RPC reader (agent_loop/jsonrpc.py): random frames, randomly chunked, never crash the parent.

Each example is a list of frames, each tagged by construction: *benign* (blank lines, notifications,
requests from the peer, responses to ids nobody waits for), *bad* (not JSON, not an object, bad ids,
wrong member types, NaN, an oversized line, invalid UTF-8 ...) or *unknown* (raw random bytes). The
bytes are cut at random offsets before the reader sees them.

* strict (a client of a child): a pending request resolves with the peer's answer when every frame
  before it was benign, and fails with ``ProtocolError`` when one was bad -- never anything else, never
  an exception out of the connection's ``async with``; everything we wrote is valid JSON-RPC.
* lenient (``dsh serve``): the connection keeps serving whatever came before, answers the final request,
  sends only ``-32700``/``-32600`` for bad frames, and ends with the peer's EOF.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from jsonrpc_frames import BAD, BENIGN, CUTS, FRAMES, MAX_LINE, UNKNOWN, wire

from dsh.agent_loop.jsonrpc import JsonRpcConnection, ProtocolError, TransportClosed

# -- the peer's side of the pipe --------------------------------------------------------------------------


class _Writer:
    """What the connection wrote; ``request_sent`` is set once our own request is on the wire."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.request_sent = anyio.Event()

    def write(self, data: bytes) -> None:
        self.data += data
        if b'"method":"ping"' in data:
            self.request_sent.set()

    async def drain(self) -> None:
        await anyio.lowlevel.checkpoint()

    def is_closing(self) -> bool:
        return False

    def frames(self) -> list[dict[str, Any]]:
        lines = bytes(self.data).split(b"\n")
        assert lines[-1] == b"", "every frame we write ends with a newline"
        frames = [json.loads(line) for line in lines[:-1]]
        assert all(isinstance(frame, dict) and frame.get("jsonrpc") == "2.0" for frame in frames)
        return frames


class _Reader:
    """Serves ``head`` cut at ``cuts``; then (once ``gate`` is set, if given) ``tail``; then EOF."""

    def __init__(self, head: bytes, cuts: list[int], tail: bytes = b"", gate: anyio.Event | None = None) -> None:
        points = sorted({cut % (len(head) + 1) for cut in cuts})
        self._pieces = [head[a:b] for a, b in zip([0, *points], [*points, len(head)], strict=True) if b > a]
        self._tail, self._gate = tail, gate

    async def read(self, n: int = -1) -> bytes:
        await anyio.lowlevel.checkpoint()
        if self._pieces:
            piece = self._pieces.pop(0)
            if n > 0 and len(piece) > n:
                self._pieces.insert(0, piece[n:])
                piece = piece[:n]
            return piece
        if self._tail:
            if self._gate is not None:
                await self._gate.wait()
            tail, self._tail = self._tail, b""
            return tail
        return b""


async def _on_request(method: str, params: Any) -> Any:
    if method == "fail":
        raise ProtocolError("scripted failure", rpc_code=-32000)
    if method == "crash":
        raise RuntimeError("a handler bug")
    if method == "unknown/method":
        raise ProtocolError("no such method", rpc_code=-32601)
    return {"echo": params}


# -- the properties -----------------------------------------------------------------------------------------


async def _strict(frames: list[tuple[str, bytes]], cuts: list[int]) -> None:
    writer = _Writer()
    answer = b'{"jsonrpc": "2.0", "id": 1, "result": "pong"}\n'
    reader = _Reader(wire(frames), cuts, answer, writer.request_sent)
    notifications: list[str] = []
    outcome: object
    async with JsonRpcConnection(reader, writer, on_request=_on_request, strict=True, max_line_bytes=MAX_LINE,
                                 on_notification=lambda method, params: notifications.append(method)) as conn:
        with anyio.fail_after(10):
            try:
                outcome = await conn.request("ping")
            except ProtocolError:
                outcome = ProtocolError
            await conn.wait_closed()
            await conn.wait_requests_answered()
    tags = {tag for tag, _ in frames}
    if BAD in tags and UNKNOWN not in tags:
        assert outcome is ProtocolError
    elif tags <= {BENIGN}:
        assert outcome == "pong"
        assert isinstance(conn.failure, TransportClosed)  # the peer's EOF, after our answer
    else:
        assert outcome in ("pong", ProtocolError)
    assert isinstance(conn.failure, ProtocolError | TransportClosed)
    written = writer.frames()
    assert written[0]["method"] == "ping"
    for frame in written[1:]:  # answers to the peer's requests: a result or one of the fixed errors
        assert "result" in frame or frame["error"]["code"] in (-32000, -32601, -32603)
        assert "a handler bug" not in json.dumps(frame)


async def _lenient(frames: list[tuple[str, bytes]], cuts: list[int]) -> None:
    writer = _Writer()
    final = b'{"jsonrpc": "2.0", "id": "final", "method": "echo", "params": {"n": 1}}\n'
    reader = _Reader(wire(frames) + final, cuts)
    async with JsonRpcConnection(reader, writer, on_request=_on_request, strict=False,
                                 max_line_bytes=MAX_LINE) as conn:
        with anyio.fail_after(10):
            await conn.wait_closed()
            await conn.wait_requests_answered()
    assert isinstance(conn.failure, TransportClosed)  # only the peer's EOF stops a server
    written = writer.frames()
    answers = [frame for frame in written if frame.get("id") == "final"]
    assert answers == [{"jsonrpc": "2.0", "id": "final", "result": {"echo": {"n": 1}}}]  # nothing before it lost it
    bad = sum(tag != BENIGN for tag, _ in frames)
    parse_errors = [frame for frame in written if frame.get("error", {}).get("code") in (-32700, -32600)]
    # Raw bytes may hold several lines, so unknown frames can cost several error replies; bad ones one.
    if all(tag != UNKNOWN for tag, _ in frames):
        assert len(parse_errors) <= bad
    for frame in written:
        assert "result" in frame or frame["error"]["code"] in (-32700, -32600, -32000, -32601, -32603)


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])


@_SETTINGS
@given(FRAMES, CUTS)
def test_strict_reader_never_crashes_and_fails_only_with_protocol_error(frames, cuts) -> None:
    anyio.run(_strict, frames, cuts)


@_SETTINGS
@given(FRAMES, CUTS)
def test_lenient_reader_keeps_serving_through_random_frames(frames, cuts) -> None:
    anyio.run(_lenient, frames, cuts)


def test_ten_megabyte_garbage_without_a_newline_then_a_good_frame() -> None:
    # The oversized line is discarded in bounded chunks; a server keeps going and answers what follows.
    async def run() -> None:
        writer = _Writer()
        head = b"\x00\xff" * (5 * 1024 * 1024) + b"\n"
        final = b'{"jsonrpc": "2.0", "id": "final", "method": "echo", "params": [1]}\n'
        reader = _Reader(head + final, list(range(0, len(head), 1 << 20)))
        async with JsonRpcConnection(reader, writer, on_request=_on_request, strict=False) as conn:
            with anyio.fail_after(30):
                await conn.wait_closed()
                await conn.wait_requests_answered()
        frames = writer.frames()
        assert frames[0]["error"]["code"] == -32700
        assert frames[-1] == {"jsonrpc": "2.0", "id": "final", "result": {"echo": [1]}}

    anyio.run(run)
