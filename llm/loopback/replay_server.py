"""``--replay FILE`` and ``dsh replay-server FILE``: answer requests with a recorded wire trace.

A loopback HTTP/1.1 server (the fault server's connection plumbing) that answers the k-th request
with the k-th recorded exchange: its status and headers, its body bytes at their recorded offsets
(divided by ``speed``), and its recorded end. A stream that a reset cut live is reset (RST) after the
same bytes; a clean close mid-body closes (FIN) without the last chunk; a transport timeout or an
exchange dsh stopped reading stalls until the client goes away, so the client's own deadline fires
again. A request beyond the recording gets HTTP 410 naming the recording. The trace format is
written by ``dsh.llm.wire_trace`` (docs/record-replay.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError
from dsh.llm.loopback.fault_server import (
    FaultServer,
    RecordedRequest,
    _Exchange,
    _phrase,
    error_body,
)
from dsh.llm.wire_trace import TRACE_TYPE, TRACE_VERSION

__all__ = ["RecordedExchange", "ReplayError", "ReplayServer", "Trace", "load_trace", "main", "parse_speed",
           "serve_forever"]

# Framing is the replay's own (chunked); what the recording's server said about framing is dropped. A
# Content-Encoding the recorder inflated is gone from the trace already; one it could not is kept.
_HOP_BY_HOP = frozenset({"transfer-encoding", "content-length", "connection", "keep-alive"})
_MAX_LINE = 64 << 20


class ReplayError(HarnessError):
    """A recording that cannot be replayed: one line naming the file and what is wrong (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CONFIG)


@dataclass(slots=True)
class RecordedExchange:
    """One request's recorded answer; ``status`` None when it failed before any response."""

    n: int
    path: str = ""
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    t_response: float = 0.0
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    how: str = "closed"  # complete | error | closed; a trace cut short by a crash ends "closed"
    where: str | None = None
    error: str | None = None
    t_end: float = 0.0

    @property
    def body_bytes(self) -> int:
        return sum(len(data) for _, data in self.chunks)


@dataclass(slots=True)
class Trace:
    path: str
    base_url: str
    proxy: str | None
    timeouts: dict[str, float]
    exchanges: list[RecordedExchange]


def _field(record: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}: {key!r} is missing or not a {getattr(kind, '__name__', 'value')}")
    return value


def _offset(record: dict[str, Any], where: str) -> float:
    t = _field(record, "t", (int, float), where)
    if not 0 <= t < 86400 * 7:
        raise ValueError(f"{where}: 't' is out of range")
    return float(t)


def _headers(value: object, where: str) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair) for pair in value
    ):
        raise ValueError(f"{where}: 'headers' is not a list of [name, value] pairs")
    for name, text in value:
        if not name or any(c in name + text for c in "\r\n") or ":" in name:
            raise ValueError(f"{where}: a header holds a line break or a colon in its name")
    return [(name, text) for name, text in value]


def _text(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) else None


def _data(record: dict[str, Any], where: str) -> bytes:
    text = record.get("text")
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(_field(record, "b64", str, where), validate=True)
    except ValueError:
        raise ValueError(f"{where}: neither 'text' nor valid 'b64'") from None


def load_trace(path: str) -> Trace:
    """Read and check a whole recording; any problem is one :class:`ReplayError` line."""
    try:
        with open(path, "rb") as handle:
            return _parse(path, handle)
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror or type(exc).__name__}"
    except ValueError as exc:
        problem = f"is not a dsh wire trace ({exc})"
    raise ReplayError(f"replay file {path} {problem}")  # outside the handler: the line is the whole chain


def _parse(path: str, handle: Any) -> Trace:
    header: dict[str, Any] | None = None
    exchanges: dict[int, RecordedExchange] = {}
    for number, raw in enumerate(handle, 1):
        where = f"line {number}"
        if len(raw) > _MAX_LINE:
            raise ValueError(f"{where}: longer than {_MAX_LINE >> 20} MiB")
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            raise ValueError(f"{where}: not JSON") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}: not a JSON object")
        if header is None:
            if record.get("type") != TRACE_TYPE:
                raise ValueError(f"{where}: no {TRACE_TYPE} header")
            if record.get("version") != TRACE_VERSION:
                raise ValueError(f"{where}: version {record.get('version')!r} (this dsh reads {TRACE_VERSION})")
            header = record
            continue
        kind = record.get("type")
        if kind not in ("request", "response", "data", "end"):
            raise ValueError(f"{where}: unknown record type {kind!r:.40}")
        n = _field(record, "n", int, where)
        if n < 1:
            raise ValueError(f"{where}: 'n' must be 1 or more")
        exchange = exchanges.setdefault(n, RecordedExchange(n))
        if kind == "request":
            exchange.path = str(record.get("path", ""))
        elif kind == "response":
            status = _field(record, "status", int, where)
            if not 100 <= status <= 599:
                raise ValueError(f"{where}: status {status} is not an HTTP status")
            exchange.status = status
            exchange.headers = _headers(record.get("headers", []), where)
            exchange.t_response = _offset(record, where)
        elif kind == "data":
            if exchange.status is None:
                raise ValueError(f"{where}: body data before the response of exchange {n}")
            exchange.chunks.append((_offset(record, where), _data(record, where)))
        else:
            how = record.get("how")
            if how not in ("complete", "error", "closed"):
                raise ValueError(f"{where}: 'how' must be complete, error or closed")
            exchange.how, exchange.t_end = how, _offset(record, where)
            exchange.where, exchange.error = _text(record, "where"), _text(record, "error")
    if header is None:
        raise ValueError("empty file")
    timeouts = header.get("timeouts")
    checked = {k: float(v) for k, v in timeouts.items() if isinstance(v, int | float) and not isinstance(v, bool)
               and v > 0} if isinstance(timeouts, dict) else {}
    base_url, proxy = _text(header, "base_url") or "", _text(header, "proxy")
    return Trace(path, base_url, proxy, checked, [exchanges[n] for n in sorted(exchanges)])


class ReplayServer(FaultServer):
    """Answers the k-th POST with the k-th recorded exchange (see the module docstring)."""

    def __init__(self, trace: Trace, *, speed: float = 1.0, port: int = 0) -> None:
        super().__init__(port=port)
        self.trace = trace
        self.speed = speed
        self.served = 0

    async def _dispatch(self, request: RecordedRequest, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> bool:
        self.requests.append(request)
        ex = _Exchange(reader, writer, request, {}, "")
        if request.method != "POST":
            body = error_body(f"the replay of {self.trace.path} answers POST requests only")
            return await ex.respond(404, body, "application/json")
        self.served += 1
        if self.served > len(self.trace.exchanges):
            held = len(self.trace.exchanges)
            message = (f"replay {self.trace.path} holds {held} exchange(s); "
                       f"request {self.served} is beyond the recording")
            return await ex.respond(410, error_body(message), "application/json")
        return await self._play(ex, self.trace.exchanges[self.served - 1])

    async def _play(self, ex: _Exchange, exchange: RecordedExchange) -> bool:
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def at(offset: float) -> None:
            delay = start + offset / self.speed - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

        if exchange.status is None:
            await at(exchange.t_end)
            return await self._end(ex, exchange)
        await at(exchange.t_response)
        headers = [(k, v) for k, v in exchange.headers if k.lower() not in _HOP_BY_HOP]
        bodiless = exchange.status < 200 or exchange.status in (204, 304)  # no body, so no framing either
        lines = [f"HTTP/1.1 {exchange.status} {_phrase(exchange.status)}", *(f"{k}: {v}" for k, v in headers),
                 *([] if bodiless else ["transfer-encoding: chunked"])]
        ex.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace"))
        await ex.writer.drain()
        if bodiless:
            return exchange.status >= 200
        for offset, data in exchange.chunks:
            await at(offset)
            await ex.send(data)
        if exchange.how == "complete":
            return await ex.finish()
        await at(exchange.t_end)
        return await self._end(ex, exchange)

    async def _end(self, ex: _Exchange, exchange: RecordedExchange) -> bool:
        """The recorded failure again: a reset, a clean close, or silence until the client gives up."""
        error = exchange.error or ""
        if exchange.how == "closed" or error.endswith("Timeout"):
            await ex.client_gone()
        elif error == "RemoteProtocolError":
            pass  # a clean close (FIN) without the body's end: the connection loop closes it
        else:
            ex.reset()
        return False


async def serve_forever(trace: Trace, *, port: int, speed: float, out: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM; ``out`` gets one line on start and one on stop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with ReplayServer(trace, speed=speed, port=port) as server:
        out(f"dsh replay-server: {len(trace.exchanges)} exchange(s) from {trace.path} "
            f"at {server.url}/chat/completions (Ctrl-C stops)")
        await stop.wait()
        out(f"dsh replay-server: stopped after {server.served} request(s)")


def parse_speed(text: str) -> float:
    """``--replay-speed`` / ``--speed``: a positive, finite factor."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r:.40}")
    return value


def main(args: Sequence[str], *, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """``dsh replay-server FILE [--port P] [--speed N]``; ``out``/``err`` write one sanitized line each."""
    import argparse

    parser = argparse.ArgumentParser(prog="dsh replay-server", description="Serve a --record trace on loopback.")
    parser.add_argument("file", metavar="FILE", help="a trace written by dsh --record")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--speed", type=parse_speed, default=1.0, metavar="N", help="replay N times faster")
    options = parser.parse_args(list(args))
    try:
        trace = load_trace(options.file)
    except ReplayError as exc:
        err(f"dsh: failed to start: {exc}")
        return 2
    try:
        asyncio.run(serve_forever(trace, port=options.port, speed=options.speed, out=out))
    except OSError as exc:
        from dsh.llm.errors import error_chain

        err(f"dsh: failed to start: cannot listen on 127.0.0.1:{options.port}: {error_chain(exc)}")
        return 1
    return 0
