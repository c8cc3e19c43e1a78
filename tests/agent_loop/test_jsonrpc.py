"""dsh.agent_loop.jsonrpc over real sockets: framing, concurrency, typed failures, bounded lines."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from dsh.agent_loop.jsonrpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonRpcConnection,
    ProtocolError,
    TransportClosed,
)

pytestmark = pytest.mark.anyio

CANARY = "sk-CANARY-jsonrpc-0123456789abcdef"


@asynccontextmanager
async def _socket_pair() -> AsyncIterator[tuple[Any, Any, Any, Any]]:
    left, right = socket.socketpair()
    lr, lw = await asyncio.open_connection(sock=left)
    rr, rw = await asyncio.open_connection(sock=right)
    try:
        yield lr, lw, rr, rw
    finally:
        for writer in (lw, rw):
            writer.close()


class _RawPeer:
    """The far end of the socket, driven byte by byte by the test."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def frame(self) -> dict[str, Any]:
        with anyio.fail_after(5):
            line = await self.reader.readline()
        assert line.endswith(b"\n")
        return json.loads(line)

    async def send(self, data: bytes | dict[str, Any]) -> None:
        if isinstance(data, dict):
            data = json.dumps(data).encode() + b"\n"
        self.writer.write(data)
        await self.writer.drain()


@asynccontextmanager
async def _client_and_raw_peer(**options: Any) -> AsyncIterator[tuple[JsonRpcConnection, _RawPeer]]:
    async with _socket_pair() as (lr, lw, rr, rw), JsonRpcConnection(lr, lw, **options) as conn:
        yield conn, _RawPeer(rr, rw)


async def _ask(conn: JsonRpcConnection, outcome: list[Any], method: str = "x") -> None:
    """Request ``method``; what it answered, or what it raised, goes into ``outcome``."""
    try:
        outcome.append(await conn.request(method))
    except BaseException as exc:  # the failure is what the test asserts
        outcome.append(exc)


async def test_request_response_round_trip_between_two_connections() -> None:
    async def serve(method: str, params: Any) -> Any:
        return {"method": method, "params": params}

    async with (
        _socket_pair() as (lr, lw, rr, rw),
        JsonRpcConnection(rr, rw, on_request=serve, strict=False),
        JsonRpcConnection(lr, lw) as client,
    ):
        assert await client.request("echo", {"x": [1, "ü"]}) == {"method": "echo", "params": {"x": [1, "ü"]}}
        assert await client.request("bare") == {"method": "bare", "params": None}


async def test_wire_format_with_and_without_the_jsonrpc_member() -> None:
    async with _client_and_raw_peer() as (conn, peer), anyio.create_task_group() as tg:
        tg.start_soon(conn.request, "a", {"k": 1})
        frame = await peer.frame()
        assert frame == {"jsonrpc": "2.0", "method": "a", "params": {"k": 1}, "id": frame["id"]}
        await peer.send({"jsonrpc": "2.0", "id": frame["id"], "result": None})
    async with _client_and_raw_peer(include_jsonrpc=False) as (conn, peer), anyio.create_task_group() as tg:
        tg.start_soon(conn.notify, "initialized")
        assert await peer.frame() == {"method": "initialized"}
        # codex answers without the member; a client of either kind accepts it
        tg.start_soon(conn.request, "b")
        frame = await peer.frame()
        assert "jsonrpc" not in frame
        await peer.send({"id": frame["id"], "result": {"ok": True}})


async def test_concurrent_requests_resolve_by_id_out_of_order() -> None:
    async def serve(method: str, params: Any) -> Any:
        await anyio.sleep(params["delay"])
        return params["n"]

    results: dict[int, Any] = {}
    async with (
        _socket_pair() as (lr, lw, rr, rw),
        JsonRpcConnection(rr, rw, on_request=serve, strict=False),
        JsonRpcConnection(lr, lw) as client,
    ):

        async def one(n: int) -> None:
            results[n] = await client.request("work", {"n": n, "delay": (10 - n) * 0.02})

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for n in range(10):
                    tg.start_soon(one, n)
    assert results == {n: n for n in range(10)}


async def test_notifications_before_a_response_are_handled_before_it_resolves() -> None:
    seen: list[Any] = []

    async with _client_and_raw_peer(on_notification=lambda method, params: seen.append((method, params))) as (
        conn,
        peer,
    ), anyio.create_task_group() as tg:
        outcome: list[Any] = []

        async def ask() -> None:
            outcome.append(await conn.request("session/prompt"))
            outcome.append(list(seen))

        tg.start_soon(ask)
        frame = await peer.frame()
        for n in range(50):
            await peer.send({"jsonrpc": "2.0", "method": "session/event", "params": {"n": n}})
        await peer.send({"jsonrpc": "2.0", "id": frame["id"], "result": "done"})
    assert outcome[0] == "done"
    assert outcome[1] == [("session/event", {"n": n}) for n in range(50)]


async def test_async_notification_handler_is_awaited_in_order() -> None:
    seen: list[int] = []

    async def handle(method: str, params: Any) -> None:
        await anyio.sleep(0.001 * (5 - params["n"]))
        seen.append(params["n"])

    async with _client_and_raw_peer(on_notification=handle) as (_conn, peer):
        for n in range(5):
            await peer.send({"method": "note", "params": {"n": n}})
        with anyio.fail_after(5):
            while len(seen) < 5:
                await anyio.sleep(0.01)
    assert seen == [0, 1, 2, 3, 4]


async def test_server_to_client_requests_are_answered_concurrently() -> None:
    release = anyio.Event()

    async def answer(method: str, params: Any) -> Any:
        if method == "slow":
            await release.wait()
            return "slow-done"
        release.set()
        return "fast-done"

    async with _client_and_raw_peer(on_request=answer) as (_conn, peer):
        await peer.send({"jsonrpc": "2.0", "id": "s1", "method": "slow"})
        await peer.send({"jsonrpc": "2.0", "id": 7, "method": "fast"})
        replies = [await peer.frame(), await peer.frame()]
    assert replies == [
        {"jsonrpc": "2.0", "id": 7, "result": "fast-done"},
        {"jsonrpc": "2.0", "id": "s1", "result": "slow-done"},
    ]


async def test_error_response_is_a_protocol_error_with_code_and_data() -> None:
    caught: list[BaseException] = []
    async with _client_and_raw_peer() as (conn, peer):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_ask, conn, caught)
            frame = await peer.frame()
            await peer.send(
                {"jsonrpc": "2.0", "id": frame["id"], "error": {"code": -32001, "message": "overloaded", "data": [1]}}
            )
        # the connection survives an error response
        assert not conn.closed
    (exc,) = caught
    assert isinstance(exc, ProtocolError)
    assert exc.rpc_code == -32001 and exc.data == [1]


async def test_handler_exception_answers_internal_error_without_its_text() -> None:
    async def broken(method: str, params: Any) -> Any:
        raise RuntimeError(f"secret detail {CANARY}")

    async with _client_and_raw_peer(on_request=broken) as (_conn, peer):
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "boom"})
        reply = await peer.frame()
    assert reply == {"jsonrpc": "2.0", "id": 1, "error": {"code": INTERNAL_ERROR, "message": "Internal error"}}
    assert CANARY not in json.dumps(reply)


async def test_handler_raising_protocol_error_chooses_the_error() -> None:
    async def picky(method: str, params: Any) -> Any:
        raise ProtocolError("not initialized", rpc_code=-32002)

    async with _client_and_raw_peer(on_request=picky) as (_conn, peer):
        await peer.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt"})
        error = {"code": -32002, "message": "not initialized"}
        assert await peer.frame() == {"jsonrpc": "2.0", "id": 3, "error": error}


async def test_request_without_a_handler_is_method_not_found() -> None:
    async with _client_and_raw_peer() as (_conn, peer):
        await peer.send({"jsonrpc": "2.0", "id": 9, "method": "nope"})
        reply = await peer.frame()
    assert reply["error"]["code"] == METHOD_NOT_FOUND and reply["id"] == 9


@pytest.mark.parametrize(
    "garbage",
    [
        b"not json at all\n",
        b"\xff\xfe\x00binary\x9c\n",
        b"[1, 2, 3]\n",
        b'"a string"\n',
        b'{"jsonrpc": "1.0", "id": 1, "result": 1}\n',
        b'{"id": 1}\n',
        b'{"id": 1, "error": {"code": "x", "message": 1}}\n',
        b'{"id": true, "result": 1}\n',
        b'{"method": 5}\n',
        b'{"id": 1, "result": NaN}\n',
        b"[" * 100_000 + b"\n",
    ],
    ids=lambda value: repr(value[:20]),
)
async def test_garbage_fails_pending_requests_with_protocol_error(garbage: bytes) -> None:
    async with _client_and_raw_peer() as (conn, peer), anyio.create_task_group() as tg:
        caught: list[BaseException] = []
        tg.start_soon(_ask, conn, caught)
        await peer.frame()
        await peer.send(garbage)
    assert len(caught) == 1 and type(caught[0]) is ProtocolError
    assert conn.closed and isinstance(conn.failure, ProtocolError)
    with pytest.raises(ProtocolError):
        await conn.request("later")


async def test_a_ten_megabyte_line_is_a_protocol_error_not_a_crash() -> None:
    async with _client_and_raw_peer(max_line_bytes=1024 * 1024) as (conn, peer), anyio.create_task_group() as tg:
        caught: list[BaseException] = []
        tg.start_soon(_ask, conn, caught)
        frame = await peer.frame()
        blob = b'{"jsonrpc":"2.0","id":%d,"result":"' % frame["id"] + b"A" * (10 * 1024 * 1024) + b'"}\n'
        await peer.send(blob)
    assert len(caught) == 1 and type(caught[0]) is ProtocolError
    assert caught[0].rpc_code == PARSE_ERROR


async def test_lenient_server_answers_bad_frames_and_keeps_serving() -> None:
    async def serve(method: str, params: Any) -> Any:
        return "ok"

    async with _client_and_raw_peer(on_request=serve, strict=False, max_line_bytes=4096) as (conn, peer):
        await peer.send(b"garbage\n")
        parse_error = {"code": PARSE_ERROR, "message": "Parse error"}
        assert await peer.frame() == {"jsonrpc": "2.0", "id": None, "error": parse_error}
        await peer.send(b'{"jsonrpc":"2.0","id":1,"method":' + b"x" * 100_000 + b"\n")
        assert (await peer.frame())["error"]["code"] == PARSE_ERROR
        await peer.send(b'{"jsonrpc":"2.0","id":2,"params":5,"method":"m"}\n')
        assert (await peer.frame())["error"] == {"code": -32600, "message": "Invalid Request"}
        await peer.send({"jsonrpc": "2.0", "id": 3, "method": "m"})
        assert await peer.frame() == {"jsonrpc": "2.0", "id": 3, "result": "ok"}
        assert not conn.closed


async def test_peer_eof_fails_pending_and_later_requests_with_transport_closed() -> None:
    async with _client_and_raw_peer() as (conn, peer), anyio.create_task_group() as tg:
        caught: list[BaseException] = []
        tg.start_soon(_ask, conn, caught)
        await peer.frame()
        peer.writer.close()
    assert len(caught) == 1 and type(caught[0]) is TransportClosed
    with anyio.fail_after(5):
        await conn.wait_closed()
    with pytest.raises(TransportClosed):
        await conn.request("later")
    with pytest.raises(TransportClosed):
        await conn.notify("later")


async def test_an_unterminated_final_frame_still_counts() -> None:
    async with _client_and_raw_peer() as (conn, peer), anyio.create_task_group() as tg:
        got: list[Any] = []
        tg.start_soon(_ask, conn, got)
        frame = await peer.frame()
        await peer.send(json.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": 42}).encode())
        peer.writer.close()
    assert got == [42]


async def test_closing_cancels_reader_handlers_and_pending_requests() -> None:
    handler_cancelled = anyio.Event()
    handler_started = anyio.Event()

    async def forever(method: str, params: Any) -> Any:
        handler_started.set()
        try:
            await anyio.sleep_forever()
        finally:
            handler_cancelled.set()

    caught: list[BaseException] = []
    async with _socket_pair() as (lr, lw, rr, rw):
        peer = _RawPeer(rr, rw)
        async with anyio.create_task_group() as outer:
            conn = JsonRpcConnection(lr, lw, on_request=forever)
            async with conn:
                outer.start_soon(_ask, conn, caught)
                await peer.frame()
                await peer.send({"jsonrpc": "2.0", "id": 1, "method": "hang"})
                with anyio.fail_after(5):
                    await handler_started.wait()
            # the block is left: reader and handler gone, the waiting request failed
            assert handler_cancelled.is_set()
    assert len(caught) == 1 and type(caught[0]) is TransportClosed


async def test_request_timeout_drops_the_late_response() -> None:
    async with _client_and_raw_peer() as (conn, peer):
        with pytest.raises(TimeoutError):
            await conn.request("slow", timeout=0.05)
        frame = await peer.frame()
        await peer.send({"jsonrpc": "2.0", "id": frame["id"], "result": "late"})
        async with anyio.create_task_group() as tg:
            got: list[Any] = []
            tg.start_soon(_ask, conn, got, "next")
            nxt = await peer.frame()
            await peer.send({"jsonrpc": "2.0", "id": nxt["id"], "result": "fresh"})
        assert got == ["fresh"]


async def test_write_to_a_gone_peer_is_transport_closed() -> None:
    async with _socket_pair() as (lr, lw, _rr, rw):
        rw.close()
        await rw.wait_closed()
        async with JsonRpcConnection(lr, lw) as conn:
            with anyio.fail_after(5):
                await conn.wait_closed()
            with pytest.raises(TransportClosed):
                await conn.request("x")


async def test_a_connection_runs_in_the_callers_task_group_and_closes_from_another_task() -> None:
    async with _socket_pair() as (lr, lw, _rr, _rw):
        conn = JsonRpcConnection(lr, lw)
        async with anyio.create_task_group() as tg:
            await conn.start(tg)
            assert not conn.closed
            async with anyio.create_task_group() as other:
                other.start_soon(conn.aclose)
        # the caller's group ended because the connection's reader did: nothing was left running
        assert isinstance(conn.failure, TransportClosed)
        with pytest.raises(TransportClosed):
            await conn.notify("x")


async def test_using_a_connection_before_it_started_is_a_bug() -> None:
    async with _socket_pair() as (lr, lw, _rr, _rw):
        with pytest.raises(RuntimeError, match="not started"):
            await JsonRpcConnection(lr, lw).request("x")
