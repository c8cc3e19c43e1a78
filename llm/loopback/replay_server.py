"""``--replay FILE`` and ``dsh replay-server FILE``: answer requests with a recorded wire trace.

A loopback HTTP/1.1 server (the fault server's connection plumbing) that answers the k-th request
with the k-th recorded exchange: its status and headers, its body bytes at their recorded offsets
(divided by ``speed``), and its recorded end. A stream that a reset cut live is reset (RST) after the
same bytes; a clean close mid-body closes (FIN) without the last chunk; a transport timeout or an
exchange dsh stopped reading stalls until the client goes away, so the client's own deadline fires
again. A failure before any response is a reset before any byte, except to a replaying dsh (its requests carry
``x-dsh-replay``): that gets the recorded cause chain and finding to raise again itself (dsh.llm.failure_chain),
so a refused connection replays as refused. A request beyond the recording gets HTTP 410 naming the recording.
The trace format is written by ``dsh.llm.wire_trace`` (docs/record-replay.md).

Time does not follow a crafted file either (docs/record-replay.md, "Limits"): every recorded offset and deadline
is a finite number of seconds from 0 to :data:`MAX_REPLAY_SECONDS` (``NaN`` and ``Infinity``, which Python's json
reads by default, are refused where a line is parsed), and a capsule's retries are followed up to
:data:`MAX_REPLAY_RETRIES`.

Memory does not follow the file or the requests (docs/record-replay.md, "Limits"): the trace is
checked and indexed in one streamed pass (where each exchange's lines are), and an exchange's body is
read back from the file as it is served. A request body is never kept: over :data:`MAX_REQUEST_BODY`
it is answered 413, otherwise hashed as it arrives, and a :class:`RequestSummary` of the last
:data:`SUMMARIES_KEPT` requests is all that stays.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import hashlib
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.llm.codes import ErrorCode
from dsh.llm.defaults import DEFAULT_MAX_RETRIES
from dsh.llm.endpoint import DIALECTS as _DIALECTS
from dsh.llm.errors import HarnessError, error_chain
from dsh.llm.failure_chain import MAX_TEXT, REPLAY_FAILURE_HEADER, REPLAY_REQUEST_HEADER, check_chain, rebuildable
from dsh.llm.lines import LongLine, read_lines
from dsh.llm.loopback.fault_server import (
    FaultServer,
    RecordedRequest,
    RequestHead,
    _Exchange,
    _phrase,
    body_pieces,
    error_body,
    read_head,
)
from dsh.llm.wire_trace import CAPSULE_TYPE, TRACE_TYPE, TRACE_VERSION, parse_speed, regular_file_problem

__all__ = ["MAX_REPLAY_RETRIES", "MAX_REPLAY_SECONDS", "MAX_REQUEST_BODY", "SUMMARIES_KEPT", "RecordedExchange",
           "ReplayError", "ReplayServer", "RequestSummary", "Trace", "load_trace", "main", "parse_speed",
           "serve_forever"]

# Framing is the replay's own (chunked); what the recording's server said about framing is dropped. A
# Content-Encoding the recorder inflated is gone from the trace already; one it could not is kept.
_HOP_BY_HOP = frozenset({"transfer-encoding", "content-length", "connection", "keep-alive"})
_MAX_LINE = 64 << 20
_MAX_EXCHANGES = 100_000  # exchanges indexed per trace: the index stays a few MB
# A request body over this is answered 413 unread. A whole 1M-token context is ~4-6 MiB of JSON, so
# no request dsh makes comes near it (docs/record-replay.md, "Limits").
MAX_REQUEST_BODY = 32 << 20
SUMMARIES_KEPT = 1000  # request summaries kept (the oldest go first)
_SUMMARY_PREFIX = 64 * 1024  # body bytes searched for the model name
_MODEL = re.compile(rb'"model"\s{0,8}:\s{0,8}"([^"\\]{1,128})"')
# A recorded offset ``t`` or deadline over this is refused: an hour is six times the default first-token
# deadline, and a crafted file must not hold a replay for days (or, with Infinity, for ever).
MAX_REPLAY_SECONDS = 3600.0
_DEADLINES = ("stream_idle_timeout", "first_token_timeout")  # the header's timeouts a replay uses
# A capsule's recorded max_retries is followed up to the retry policy's default, never further: 100 recorded
# 503s must not hold a replay for 16 minutes of backoff.
MAX_REPLAY_RETRIES = DEFAULT_MAX_RETRIES


class ReplayError(HarnessError):
    """A recording that cannot be replayed: one line naming the file and what is wrong (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CONFIG)


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """What the replay server keeps of a request: never its body."""

    method: str
    path: str
    size: int  # body bytes
    model: str | None  # the ``model`` named in the body's first 64 KiB
    sha256: str  # of the body


@dataclass(slots=True)
class RecordedExchange:
    """One request's recorded answer; ``status`` None when it failed before any response.

    ``chunks`` reads the body's ``data`` records from the trace file as they are iterated.
    """

    n: int
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    t_response: float = 0.0
    chunks: Callable[[], Iterator[tuple[float, bytes]]] = lambda: iter(())
    how: str = "closed"  # complete | error | closed; a trace cut short by a crash ends "closed"
    where: str | None = None
    error: str | None = None
    t_end: float = 0.0
    chain: list[dict[str, Any]] | None = None  # a failure before any response, link by link (failure_chain)
    finding: str | None = None  # what the recording dsh found out about that failure (a certificate's names)


@dataclass(slots=True)
class _Slot:
    """Where exchange ``n``'s records are in the file: offsets of its lines, -1 for none."""

    n: int
    first: int
    last: int
    response: int = -1
    data: int = -1  # the first data record
    end: int = -1
    finding: int = -1


class _Exchanges(Sequence[RecordedExchange]):
    """The exchanges of a trace in order of ``n``, each read from the file when it is asked for."""

    def __init__(self, fd: int, slots: list[_Slot]) -> None:
        self._fd = fd
        self._slots = slots

    def __len__(self) -> int:
        return len(self._slots)

    def __getitem__(self, index: int) -> RecordedExchange:  # type: ignore[override]
        slot = self._slots[index]
        exchange = RecordedExchange(slot.n, chunks=lambda: self._chunks(slot))
        if slot.response >= 0:
            response = self._record_at(slot.response)
            exchange.status, exchange.headers = response["status"], _headers(response.get("headers", []), "")
            exchange.t_response = _offset(response, "")
        if slot.end >= 0:
            _apply_end(exchange, self._record_at(slot.end))
        if slot.finding >= 0:
            exchange.finding = self._record_at(slot.finding)["text"]
        return exchange

    def _record_at(self, offset: int) -> dict[str, Any]:
        _, line = next(_trace_lines(self._fd, offset))
        return _record(line, "")

    def _chunks(self, slot: _Slot) -> Iterator[tuple[float, bytes]]:
        if slot.data < 0:
            return
        for offset, line in _trace_lines(self._fd, slot.data):
            if offset > slot.last:
                return
            if isinstance(line, bytes) and not line.strip():
                continue
            record = _record(line, "")
            if record.get("type") == "data" and record.get("n") == slot.n:
                yield _offset(record, ""), _data(record, "")


@dataclass(slots=True)
class Trace:
    path: str
    base_url: str
    proxy: str | None
    timeouts: dict[str, float]
    exchanges: Sequence[RecordedExchange]
    fd: int = -1
    dialect: str | None = None  # the recorded run's (``deepseek`` | ``openai``); None: not recorded (older files)
    # A failure capsule's max_retries (its report's settings): a replay retries as the reporter's run did, so
    # the recorded attempts are all it asks for (docs/reporting.md), up to MAX_REPLAY_RETRIES (the caller caps
    # it and says so). None for a recording, or the default.
    max_retries: int | None = None

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def _field(record: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}: {key!r} is missing or not a {kind.__name__ if isinstance(kind, type) else 'value'}")
    return value


def _offset(record: dict[str, Any], where: str) -> float:
    t = _field(record, "t", (int, float), where)
    if not 0 <= t <= MAX_REPLAY_SECONDS:  # NaN fails this too (the parser refused it already)
        raise ValueError(f"{where}: 't' must be from 0 to {MAX_REPLAY_SECONDS:g} seconds, got {t:g}")
    return float(t)


def _deadlines(header: dict[str, Any], where: str) -> dict[str, float]:
    """The recorded deadlines a replay uses, each more than 0 and at most :data:`MAX_REPLAY_SECONDS`."""
    timeouts = header.get("timeouts")
    if not isinstance(timeouts, dict):
        return {}
    checked: dict[str, float] = {}
    for key in _DEADLINES:
        if key not in timeouts:
            continue
        value = timeouts[key]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 < value <= MAX_REPLAY_SECONDS:
            shown = f"{value:g}" if number else f"{value!r:.40}"
            raise ValueError(f"{where}: 'timeouts.{key}' must be more than 0 and at most "
                             f"{MAX_REPLAY_SECONDS:g} seconds, got {shown}")
        checked[key] = float(value)
    return checked


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


def _apply_end(exchange: RecordedExchange, record: dict[str, Any]) -> None:
    exchange.how, exchange.t_end = record["how"], _offset(record, "")
    exchange.where, exchange.error = _text(record, "where"), _text(record, "error")
    chain = record.get("chain")
    exchange.chain = chain if isinstance(chain, list) else None


class _NonFinite:
    """What the parser makes of ``NaN``, ``Infinity`` and ``-Infinity`` (JSON has none of them): the line is
    refused, naming the field that holds one."""

    __slots__ = ("word",)

    def __init__(self, word: str) -> None:
        self.word = word


def _record(line: bytes | LongLine, where: str) -> dict[str, Any]:
    if isinstance(line, LongLine):
        raise ValueError(f"{where}: longer than {_MAX_LINE >> 20} MiB")
    found: list[str] = []

    def non_finite(word: str) -> _NonFinite:
        found.append(word)
        return _NonFinite(word)

    try:
        record = json.loads(line, parse_constant=non_finite)
    except (ValueError, RecursionError):
        raise ValueError(f"{where}: not JSON") from None
    if found:
        field_name, word = _non_finite_at(record) or ("", found[0])
        raise ValueError(f"{where}: {field_name or 'a value'!r} is {word}, not a finite number")
    if not isinstance(record, dict):
        raise ValueError(f"{where}: not a JSON object")
    return record


def _non_finite_at(value: Any, path: str = "") -> tuple[str, str] | None:
    """``('timeouts.stream_idle_timeout', 'Infinity')``: where the first non-finite number is, depth first (the
    parser already bounded the depth)."""
    if isinstance(value, _NonFinite):
        return path, value.word
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        inner = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        found = _non_finite_at(item, inner)
        if found is not None:
            return found
    return None


def load_trace(path: str) -> Trace:
    """Check a whole recording in one streamed pass and index it; any problem is one :class:`ReplayError` line.

    The file stays open (``Trace.close``): each exchange is read from it when it is served.
    """
    fd = -1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block start-up
        problem = regular_file_problem(os.fstat(fd).st_mode)
        if problem is None:
            os.set_blocking(fd, True)
            return _index(path, fd)
        failure = f"cannot be read: {problem}"
    except OSError as exc:
        failure = f"cannot be read: {exc.strerror or type(exc).__name__}"
    except ValueError as exc:
        failure = f"is not a dsh wire trace ({exc})"
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    if fd >= 0:
        os.close(fd)
    raise ReplayError(f"replay file {path} {failure}")  # outside the handler: the line is the whole chain


def _index(path: str, fd: int) -> Trace:
    header: dict[str, Any] | None = None
    deadlines: dict[str, float] = {}
    slots: dict[int, _Slot] = {}
    max_retries: int | None = None
    for number, (offset, line) in enumerate(_trace_lines(fd), 1):
        where = f"line {number}"
        if isinstance(line, bytes) and not line.strip():
            continue
        record = _record(line, where)
        if header is None:
            header = _check_header(record, where)
            deadlines = _deadlines(header, where)
        elif record.get("type") == "report" and header["type"] == CAPSULE_TYPE:
            max_retries = _reported_retries(record)  # the rest is a failure capsule's facts: nothing to serve
        else:
            _index_record(record, offset, where, slots)
    if header is None:
        raise ValueError("empty file")
    base_url, proxy = _text(header, "base_url") or "", _text(header, "proxy")
    exchanges = _Exchanges(fd, [slots[n] for n in sorted(slots)])
    dialect = header.get("dialect") if header.get("dialect") in _DIALECTS else None
    return Trace(path, base_url, proxy, deadlines, exchanges, fd, dialect=dialect, max_retries=max_retries)


def _reported_retries(report: dict[str, Any]) -> int | None:
    """``settings.max_retries.value`` of a capsule's report, when it is a sane count."""
    settings = report.get("settings")
    entry = settings.get("max_retries") if isinstance(settings, dict) else None
    value = entry.get("value") if isinstance(entry, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100 else None


def _trace_lines(fd: int, start: int = 0) -> Iterator[tuple[int, bytes | LongLine]]:
    """``(offset, line)`` from ``start``, a line over 64 MiB as a LongLine, a last line without its newline too."""
    for offset, line in read_lines(fd, start, max_line=_MAX_LINE):
        if line is not None:
            yield offset, line
            continue
        rest = os.fstat(fd).st_size - offset
        if rest > _MAX_LINE:
            yield offset, LongLine(rest, b"")
        elif rest > 0:
            yield offset, os.pread(fd, rest, offset)
        return


def _check_header(record: dict[str, Any], where: str) -> dict[str, Any]:
    if record.get("type") not in (TRACE_TYPE, CAPSULE_TYPE):
        raise ValueError(f"{where}: no {TRACE_TYPE} header")
    if record.get("version") != TRACE_VERSION:
        raise ValueError(f"{where}: version {record.get('version')!r} (this dsh reads {TRACE_VERSION})")
    return record


def _index_record(record: dict[str, Any], offset: int, where: str, slots: dict[int, _Slot]) -> None:
    """Check one record and note where it is; the record itself is dropped."""
    kind = record.get("type")
    if kind not in ("request", "response", "data", "end", "finding"):
        raise ValueError(f"{where}: unknown record type {kind!r:.40}")
    n = _field(record, "n", int, where)
    if n < 1:
        raise ValueError(f"{where}: 'n' must be 1 or more")
    slot = slots.get(n)
    if slot is None:
        if len(slots) >= _MAX_EXCHANGES:
            raise ValueError(f"{where}: more than {_MAX_EXCHANGES} exchanges")
        slot = slots[n] = _Slot(n, offset, offset)
    slot.last = offset
    if kind == "response":
        status = _field(record, "status", int, where)
        if not 100 <= status <= 599:
            raise ValueError(f"{where}: status {status} is not an HTTP status")
        _headers(record.get("headers", []), where)
        _offset(record, where)
        slot.response = offset
    elif kind == "data":
        if slot.response < 0:
            raise ValueError(f"{where}: body data before the response of exchange {n}")
        _offset(record, where)
        _data(record, where)
        if slot.data < 0:
            slot.data = offset
    elif kind == "end":
        if record.get("how") not in ("complete", "error", "closed"):
            raise ValueError(f"{where}: 'how' must be complete, error or closed")
        _offset(record, where)
        if "chain" in record and (problem := check_chain(record["chain"])):
            raise ValueError(f"{where}: {problem}")
        slot.end = offset
    elif kind == "finding":
        if len(_field(record, "text", str, where)) > MAX_TEXT:
            raise ValueError(f"{where}: 'text' is longer than {MAX_TEXT} characters")
        slot.finding = offset


async def summarise(head: RequestHead, pieces: AsyncIterator[bytes]) -> RequestSummary:
    """A request's summary, its body hashed as it arrives and dropped (only its first 64 KiB are searched)."""
    digest = hashlib.sha256()
    size = 0
    prefix = bytearray()
    async for piece in pieces:
        digest.update(piece)
        size += len(piece)
        if len(prefix) < _SUMMARY_PREFIX:
            prefix += piece[: _SUMMARY_PREFIX - len(prefix)]
    match = _MODEL.search(prefix)
    model = match.group(1).decode("utf-8", "replace") if match else None
    return RequestSummary(head.method, head.path[:256], size, model, digest.hexdigest())


class ReplayServer(FaultServer):
    """Answers the k-th POST with the k-th recorded exchange (see the module docstring)."""

    def __init__(self, trace: Trace, *, speed: float = 1.0, port: int = 0) -> None:
        super().__init__(port=port, max_body=MAX_REQUEST_BODY)
        self.trace = trace
        self.speed = speed
        self.served = 0
        self.summaries: collections.deque[RequestSummary] = collections.deque(maxlen=SUMMARIES_KEPT)

    async def _next_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        """The request without its body: the body is summarised as it arrives, never kept."""
        head = await read_head(reader)
        if head is None:
            return None
        self.summaries.append(await summarise(head, body_pieces(reader, head.headers, self.max_body)))
        return head.request(b"")

    async def _dispatch(self, request: RecordedRequest, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> bool:
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
            if ex.request.headers.get(REPLAY_REQUEST_HEADER) == "1" and _raisable(exchange):
                return await self._raise_again(ex, exchange)
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
        for offset, data in exchange.chunks():
            await at(offset)
            await ex.send(data)
        if exchange.how == "complete":
            return await ex.finish()
        await at(exchange.t_end)
        return await self._end(ex, exchange)

    @staticmethod
    async def _raise_again(ex: _Exchange, exchange: RecordedExchange) -> bool:
        """A failure before any response, for a replaying dsh to raise again (dsh.llm.replay_transport)."""
        body = json.dumps({"chain": exchange.chain, "finding": exchange.finding})  # ASCII: lone surrogates too
        return await ex.respond(200, body.encode("ascii"), "application/json",
                                [(REPLAY_FAILURE_HEADER, "1")])

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


def _raisable(exchange: RecordedExchange) -> bool:
    """Whether a replaying dsh can be handed this failure to raise: a recorded chain of allowed classes only
    (an old trace, or a hand-edited class, replays as a reset)."""
    return exchange.how == "error" and exchange.chain is not None and rebuildable(exchange.chain)


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


def main(args: Sequence[str], *, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """``dsh replay-server FILE [--port P] [--speed N]``; ``out``/``err`` write one sanitized line each."""
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
        err(f"dsh: failed to start: cannot listen on 127.0.0.1:{options.port}: {error_chain(exc)}")
        return 1
    finally:
        trace.close()
    return 0
