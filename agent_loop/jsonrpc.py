"""Newline-delimited JSON-RPC 2.0 over asyncio streams: shared by ``dsh serve``, the dsh-sdk and codex clients.

One frame per line (``json.dumps`` never emits a raw newline). A :class:`JsonRpcConnection` sends
requests (with ids, many in flight at once), notifications and responses, and dispatches what arrives:

* responses resolve the pending request with the same id (a response to an unknown id — e.g. one we
  stopped waiting for — is dropped);
* notifications are handled inline, in arrival order, *before* anything after them is read: a client
  has processed every notification the peer wrote before a response by the time that response resolves;
* requests from the peer run concurrently in the connection's task group and are answered with the
  handler's return value or a JSON-RPC error.

Usage::

    async with JsonRpcConnection(reader, writer, on_notification=handle) as conn:
        result = await conn.request("initialize", {...})
        await conn.notify("session/cancel")

Typed failures (classify by type, never by message):

* :class:`ProtocolError` — a bad frame (not JSON, not an object, a line over ``max_line_bytes``, a
  malformed message) or a JSON-RPC error response (``.rpc_code`` is then the peer's integer error code,
  ``.data`` its data). Its text is for host logs only.
* :class:`TransportClosed` — the peer's stream ended, or writing to it failed, or the connection is closed.

In ``strict`` mode (the default: clients of a child) a bad frame is fatal: every pending and later
request raises :class:`ProtocolError`. A server passes ``strict=False``: a bad frame is answered with a
``-32700``/``-32600`` error and the connection carries on. Either way a 10 MB line or binary garbage
never crashes the reader: lines are read in bounded chunks and an oversized one is discarded.

``include_jsonrpc=False`` omits the ``"jsonrpc": "2.0"`` member on the wire (the codex app-server
format); incoming frames are accepted with or without it (but a present value must be ``"2.0"``).

The reader and the request handlers run in a task group the caller provides, trio style:
``async with`` holds one for the block, or ``await conn.start(tg)`` runs them in the caller's own.
Leaving the block (or :meth:`JsonRpcConnection.aclose`, callable from any task) cancels the reader and
any running request handlers, fails pending requests with :class:`TransportClosed`, and waits until
they are gone. It does not close the streams: their owner (e.g. the managed child process) does.
Under ``async with`` the reader is shielded from the block's cancellation until the block is left, so
a shielded clean-up inside the block (``turn/interrupt`` after a Ctrl-C) still reads its answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc

from dsh.agent_loop.frames import FrameTap
from dsh.agent_loop.owned_group import OwnedTaskGroup
from dsh.llm import ErrorCode, HarnessError
from dsh.llm import text as json_text

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "OVERSIZED",
    "PARSE_ERROR",
    "BadFrame",
    "JsonRpcConnection",
    "NotificationHandler",
    "ProtocolError",
    "RequestHandler",
    "TransportClosed",
    "error_text",
    "frame_lines",
    "parse_frame",
]

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
_READ_CHUNK = 64 * 1024
_MAX_REMOTE_MESSAGE = 200  # how much of a peer's error message the host-log text keeps


class ProtocolError(HarnessError):
    """A bad frame, or a JSON-RPC error response (then ``rpc_code`` is the peer's integer error code).

    Handlers of incoming requests may raise it to answer with that error (``rpc_code`` defaults to -32603).
    """

    def __init__(self, message: str, *, rpc_code: int | None = None, data: Any = None) -> None:
        super().__init__(message, ErrorCode.PROTOCOL)
        self.rpc_code = rpc_code
        self.data = data


class TransportClosed(HarnessError):
    """The peer's stream ended, writing failed, or the connection was closed."""

    def __init__(self, message: str = "JSON-RPC transport closed") -> None:
        super().__init__(message, ErrorCode.TRANSPORT_CLOSED)


RequestHandler = Callable[[str, Any], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], Awaitable[None] | None]


class FrameReader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class FrameWriter(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def is_closing(self) -> bool: ...


class BadFrame(Exception):
    """A line that is no JSON-RPC message: ``code`` is the error to answer it with (when ``answerable``)."""

    def __init__(self, code: int, reason: str, request_id: Any = None, *, answerable: bool = True) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.request_id = request_id
        self.answerable = answerable  # False for a malformed response: responses are never answered


OVERSIZED: Any = object()  # what frame_lines yields for a discarded oversized line


class JsonRpcConnection:
    """One JSON-RPC peer over a byte reader and writer. See the module docstring."""

    def __init__(
        self,
        reader: FrameReader,
        writer: FrameWriter,
        *,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        include_jsonrpc: bool = True,
        strict: bool = True,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        name: str = "jsonrpc",
        on_frame: FrameTap | None = None,
    ) -> None:
        """``on_frame``: told of every frame sent and received (a failure report's memory, agent_loop/frames.py)."""
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self._reader = reader
        self._writer = writer
        self._on_request = on_request
        self._on_notification = on_notification
        self._include_jsonrpc = include_jsonrpc
        self._strict = strict
        self._max_line = max_line_bytes
        self._name = name
        self._on_frame = on_frame
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._write_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._own_group = OwnedTaskGroup()  # when entered as a context manager
        self._started = False
        self._reader_outlives_cancel = False  # under `async with`: the block's exit always closes it
        self._finished = anyio.Event()
        self._close_requested = anyio.Event()
        self._handlers_running = 0
        self._handlers_idle = anyio.Event()
        self._handlers_idle.set()
        self._failure: BaseException | None = None  # why the connection stopped (TransportClosed/ProtocolError)
        self._stopped = anyio.Event()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> JsonRpcConnection:
        """Start reading: the reader and request handlers run in ``tg``, the caller's task group."""
        if self._started:
            raise RuntimeError("JsonRpcConnection already started")
        self._started = True
        await tg.start(self._serve, name=self._name)
        return self

    async def aclose(self) -> None:
        """Stop: cancel the reader and running handlers, fail pending requests with
        :class:`TransportClosed`, and wait for all of it (shielded from the caller's cancellation)."""
        self._stop(TransportClosed("JSON-RPC connection closed"))
        self._close_requested.set()
        if not self._started:
            return
        with anyio.CancelScope(shield=True):
            await self._finished.wait()

    async def __aenter__(self) -> JsonRpcConnection:
        group = await self._own_group.open()
        self._reader_outlives_cancel = True
        try:
            return await self.start(group)
        except BaseException:
            await self._own_group.close()
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.aclose()
        finally:
            await self._own_group.close()

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            with anyio.CancelScope(shield=self._reader_outlives_cancel):
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._read_loop, name=f"{self._name} reader")
                    task_status.started()
                    await self._close_requested.wait()
                    tg.cancel_scope.cancel()
        except Exception:  # nothing in the group raises; this only keeps a bug out of the caller's group
            log.exception("%s: connection failed", self._name)
            self._stop(ProtocolError("JSON-RPC connection failed"))
        finally:
            self._finished.set()

    @property
    def closed(self) -> bool:
        """True once the peer's stream ended, a fatal protocol error happened, or the block was left."""
        return self._failure is not None

    @property
    def failure(self) -> BaseException | None:
        """The :class:`TransportClosed` or :class:`ProtocolError` that stopped the connection, if any."""
        return self._failure

    async def wait_closed(self) -> None:
        """Return once the connection stopped (peer EOF, fatal error, or close)."""
        await self._stopped.wait()

    async def wait_requests_answered(self) -> None:
        """Return once no incoming request is being handled (every one so far has been answered).

        A server that stops on a ``shutdown`` request waits for this so that its own reply is written.
        """
        while self._handlers_running:
            await self._handlers_idle.wait()

    # -- outgoing --------------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send a request and wait for its result.

        Raises :class:`ProtocolError` (error response or broken protocol), :class:`TransportClosed`,
        or ``TimeoutError`` after ``timeout`` seconds (the late response is then dropped).
        """
        self._raise_if_stopped()
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send(self._frame(method=method, params=params, id=request_id))
            if timeout is None:
                return await future
            with anyio.fail_after(timeout):
                return await future
        finally:
            self._pending.pop(request_id, None)
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # mark retrieved: a failure nobody awaited must not warn at GC

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no response). Raises :class:`TransportClosed` if the peer is gone."""
        self._raise_if_stopped()
        await self._send(self._frame(method=method, params=params))

    def _raise_if_stopped(self) -> None:
        if not self._started:
            raise RuntimeError("JsonRpcConnection not started (use `async with` or start(tg))")
        if self._failure is not None:
            raise _copy_failure(self._failure)

    def _frame(self, **members: Any) -> dict[str, Any]:
        frame: dict[str, Any] = {"jsonrpc": "2.0"} if self._include_jsonrpc else {}
        for key, value in members.items():
            if key == "params" and value is None:
                continue
            frame[key] = value
        return frame

    async def _send(self, frame: dict[str, Any]) -> None:
        data = json.dumps(frame, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        if self._on_frame is not None:
            self._on_frame("sent", frame, len(data))
        async with self._write_lock:
            if self._writer.is_closing():
                raise TransportClosed("JSON-RPC peer stream is closed")
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (OSError, RuntimeError) as exc:  # broken pipe, reset, closed transport
                failure = TransportClosed("JSON-RPC write to peer failed")
                failure.__cause__ = exc
                self._stop(failure)
                raise failure from exc

    # -- incoming --------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            async with contextlib.aclosing(frame_lines(self._reader, self._max_line)) as lines:
                async for line in lines:
                    if self._failure is not None:
                        return
                    await self._dispatch(line)
            self._stop(TransportClosed("JSON-RPC peer closed its stream"))
        except (OSError, RuntimeError) as exc:
            failure = TransportClosed("JSON-RPC read from peer failed")
            failure.__cause__ = exc
            self._stop(failure)
        except Exception as exc:
            # Never let a reader bug escape into the owner's task group; the connection just stops.
            log.exception("%s: reader failed", self._name)
            broken = ProtocolError("JSON-RPC reader failed")
            broken.__cause__ = exc
            self._stop(broken)

    async def _dispatch(self, line: Any) -> None:
        if line is not OVERSIZED and not line.strip():
            return  # blank lines (and a lone \r) are not frames
        try:
            message = parse_frame(line, self._max_line)
        except BadFrame as bad:
            if self._on_frame is not None:
                self._on_frame("received", None, None if line is OVERSIZED else len(line))
            log.warning("%s: bad frame from peer (%s)", self._name, bad.reason)
            if self._strict:
                self._stop(ProtocolError(f"bad JSON-RPC frame from peer: {bad.reason}", rpc_code=bad.code))
            elif bad.answerable:
                await self._reply_error(bad.request_id, bad.code, error_text(bad.code))
            return
        if self._on_frame is not None:
            self._on_frame("received", message, len(line))
        if "method" in message:
            params = message.get("params")
            if "id" in message and message["id"] is not None:
                assert self._tg is not None
                self._handlers_running += 1
                self._handlers_idle = anyio.Event()
                self._tg.start_soon(self._answer, message["id"], message["method"], params)
            else:
                await self._notify_handler(message["method"], params)
            return
        self._resolve(message)

    def _resolve(self, message: dict[str, Any]) -> None:
        # An error with id null answers a frame the peer could not parse: valid, but nobody waits for it.
        future = self._pending.get(message["id"]) if isinstance(message.get("id"), int) else None
        if future is None or future.done():
            log.debug("%s: dropped a response to an unknown request id", self._name)
            return
        if "error" in message:
            error = message["error"]
            remote_text = error["message"][:_MAX_REMOTE_MESSAGE]
            future.set_exception(
                ProtocolError(
                    f"JSON-RPC error {error['code']} from peer: {remote_text}",
                    rpc_code=error["code"],
                    data=error.get("data"),
                )
            )
        else:
            future.set_result(message["result"])

    async def _notify_handler(self, method: str, params: Any) -> None:
        if self._on_notification is None:
            return
        try:
            outcome = self._on_notification(method, params)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            # A handler bug must not kill the connection; the traceback is host-side only.
            log.exception("%s: notification handler failed", self._name)

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        try:
            await self._answer_one(request_id, method, params)
        finally:
            self._handlers_running -= 1
            if self._handlers_running == 0:
                self._handlers_idle.set()

    async def _answer_one(self, request_id: Any, method: str, params: Any) -> None:
        if self._on_request is None:
            await self._reply_error(request_id, METHOD_NOT_FOUND, error_text(METHOD_NOT_FOUND))
            return
        try:
            result = await self._on_request(method, params)
        except ProtocolError as exc:
            await self._reply_error(request_id, exc.rpc_code or INTERNAL_ERROR, exc.message, exc.data)
            return
        except Exception:
            log.exception("%s: request handler failed", self._name)
            await self._reply_error(request_id, INTERNAL_ERROR, error_text(INTERNAL_ERROR))
            return
        try:
            await self._send(self._frame(id=request_id, result=result))
        except (TypeError, ValueError):  # a result JSON cannot carry (NaN, an object): our bug, not theirs
            log.exception("%s: could not encode the result of %s", self._name, method)
            await self._reply_error(request_id, INTERNAL_ERROR, error_text(INTERNAL_ERROR))
        except TransportClosed:
            pass

    async def _reply_error(self, request_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        with contextlib.suppress(TransportClosed):
            await self._send(self._frame(id=request_id, error=error))

    def _stop(self, failure: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = failure
        self._stopped.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(_copy_failure(failure))


async def frame_lines(reader: FrameReader, max_line: int) -> AsyncGenerator[Any, None]:
    """Lines without terminators, read in bounded chunks; an oversized line is discarded and yielded as
    :data:`OVERSIZED` (:func:`parse_frame` makes it a parse error)."""
    buffer = bytearray()
    discarding = False
    while True:
        chunk = await reader.read(_READ_CHUNK)
        if not chunk:
            if buffer and not discarding:
                yield bytes(buffer)  # a final unterminated fragment still counts as a frame
            return
        start = 0
        while (newline := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:newline]
            start = newline + 1
            if discarding:
                discarding = False
                continue
            if len(buffer) + len(piece) > max_line:
                buffer.clear()
                yield OVERSIZED
                continue
            buffer += piece
            line = bytes(buffer)
            buffer.clear()
            yield line
        if not discarding:
            buffer += chunk[start:]
            if len(buffer) > max_line:
                buffer.clear()
                discarding = True
                yield OVERSIZED


def parse_frame(line: Any, max_line: int) -> dict[str, Any]:
    """One line (or :data:`OVERSIZED`) as a JSON-RPC 2.0 message: a request, a notification or a response.

    Raises :class:`BadFrame` with the error code to answer (``-32700``, ``-32600``) and, for a request whose
    id could be read, that id. Nothing of the line is kept in the reason (host logs only, still).
    """
    if line is OVERSIZED:
        raise BadFrame(PARSE_ERROR, f"line longer than {max_line} bytes")
    try:
        message = json_text.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise BadFrame(PARSE_ERROR, f"not JSON ({len(line)} bytes)")
    if not isinstance(message, dict):
        raise BadFrame(INVALID_REQUEST, "frame is not a JSON object")
    request_id = message.get("id")
    if not _valid_id(request_id):
        raise BadFrame(INVALID_REQUEST, "invalid id")
    if "jsonrpc" in message and message["jsonrpc"] != "2.0":
        raise BadFrame(INVALID_REQUEST, "unsupported jsonrpc version", request_id)
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            raise BadFrame(INVALID_REQUEST, "method is not a string", request_id)
        if "params" in message and not isinstance(message["params"], dict | list | None):
            raise BadFrame(INVALID_REQUEST, "params is not an object or array", request_id)
        return message
    if request_id is None and "error" not in message:
        raise BadFrame(INVALID_REQUEST, "frame has neither method nor id", answerable=False)
    if "error" in message:
        error = message["error"]
        if (
            not isinstance(error, dict)
            or not isinstance(error.get("code"), int)
            or isinstance(error.get("code"), bool)
            or not isinstance(error.get("message"), str)
        ):
            raise BadFrame(INVALID_REQUEST, "malformed error object", answerable=False)
    elif "result" not in message:
        raise BadFrame(INVALID_REQUEST, "response has neither result nor error", answerable=False)
    return message


_ERROR_TEXT = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
}


def error_text(code: int) -> str:
    """The JSON-RPC 2.0 specification's message for one of its error codes."""
    return _ERROR_TEXT[code]


def _copy_failure(failure: BaseException) -> BaseException:
    """A fresh exception of the same type per waiter (one instance raised in many tasks tangles tracebacks)."""
    if isinstance(failure, ProtocolError):
        copy: BaseException = ProtocolError(failure.message, rpc_code=failure.rpc_code, data=failure.data)
    else:
        copy = TransportClosed(str(failure))
    copy.__cause__ = failure.__cause__
    return copy


def _valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")
