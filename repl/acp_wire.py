"""ACP's JSON-RPC 2.0 on stdio with plain dicts: what ``dsh acp`` says and hears, without the ``acp`` SDK.

The wire is one JSON object per line (docs/editors.md). Frames in are read by :class:`ClientFrames`: bounded
(:data:`FRAME_LIMIT`), checked as agent_loop/jsonrpc.py checks a peer's frames, a line that is no JSON-RPC message
answered ``-32700`` / ``-32600`` and skipped. :class:`AgentConnection` runs each request and notification from the
client in a task of its own (a prompt runs while its cancel and the answers to its permission requests arrive),
answers each request with its handler's result or a :class:`WireError`, and sends the agent's own requests
(``session/request_permission``, ``fs/*``) and notifications (``session/update``). Field names and error codes
are the protocol's (its schema, version :data:`PROTOCOL_VERSION`); importing the SDK's pydantic schema took most
of ``dsh acp``'s start (docs/performance.md, "Editors' first chunk").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc

from dsh.agent_loop.jsonrpc import OVERSIZED, BadFrame, error_text, frame_lines, parse_frame
from dsh.llm.text import scrub_surrogates

__all__ = [
    "FRAME_LIMIT",
    "PROTOCOL_VERSION",
    "RESOURCE_NOT_FOUND",
    "AgentConnection",
    "ClientFrames",
    "Handler",
    "WireError",
    "read_bool",
    "read_list",
    "read_str",
    "stdio_streams",
]

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
FRAME_LIMIT = 50 * 1024 * 1024  # a frame's bytes, as ACP clients' own stdio readers bound theirs
INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32600, -32601, -32602, -32603
RESOURCE_NOT_FOUND = -32002
# A handler gets the method, its params (whatever the client sent) and whether it is a notification.
Handler = Callable[[str, Any, bool], Awaitable[Any]]


class WireError(Exception):
    """A JSON-RPC error: raised by a handler to answer its request with it, or the client's answer to one of ours."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    @classmethod
    def invalid_params(cls, data: Mapping[str, Any]) -> WireError:
        return cls(INVALID_PARAMS, "Invalid params", dict(data))

    @classmethod
    def invalid_request(cls, data: Mapping[str, Any]) -> WireError:
        return cls(INVALID_REQUEST, "Invalid request", dict(data))

    @classmethod
    def method_not_found(cls, method: str) -> WireError:
        return cls(METHOD_NOT_FOUND, "Method not found", {"method": scrub_surrogates(method)})

    def error(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "data": self.data}


def read_str(params: Mapping[str, Any], name: str) -> str:
    """``params[name]``, a string the schema requires; else the request's ``-32602``."""
    value = params.get(name)
    if not isinstance(value, str):
        raise WireError.invalid_params({name: "a string is required"})
    return value


def read_list(params: Mapping[str, Any], name: str) -> list[Any]:
    """``params[name]``, a list the schema requires; else the request's ``-32602``."""
    value = params.get(name)
    if not isinstance(value, list):
        raise WireError.invalid_params({name: "a list is required"})
    return value


def read_bool(params: Any, name: str) -> bool:
    """An optional flag: true only when the client said ``true`` (a capability it does not name is not offered)."""
    return isinstance(params, Mapping) and params.get(name) is True


async def stdio_streams(out_fd: int) -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
    """Streams over stdin and the kept stdout ``out_fd`` (pipes: what every ACP client gives its agent)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=FRAME_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = os.fdopen(out_fd, "wb", buffering=0)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
    return asyncio.StreamWriter(transport, protocol, None, loop), reader


class ClientFrames:
    """The frames on stdio: each line read bounded and checked as agent_loop/jsonrpc.py checks a peer's. What is
    no JSON-RPC message (``[]``, ``5``, a batch, broken JSON) is answered as the specification says (``-32700``
    Parse error, ``-32600`` Invalid Request, id null when it could not be read) and the session goes on. The
    client's bytes reach dsh.log only as the reason's closed words."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._lines: AsyncIterator[bytes] = frame_lines(reader, FRAME_LIMIT)
        self._writer = writer
        self._write_lock = asyncio.Lock()

    async def receive(self) -> dict[str, Any] | None:
        """The next JSON-RPC message, or None when stdin ended."""
        while (line := await anext(self._lines, None)) is not None:
            if line is not OVERSIZED and not line.strip():
                continue  # a blank line is no frame
            try:
                return parse_frame(line, FRAME_LIMIT)
            except BadFrame as bad:
                log.warning("acp: a frame from the client is no JSON-RPC message (%s)", bad.reason)
                if bad.answerable:
                    await self.send({"jsonrpc": "2.0", "id": bad.request_id,
                                     "error": {"code": bad.code, "message": error_text(bad.code)}})
        return None

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        async with self._write_lock:
            self._writer.write(data)
            await self._writer.drain()


class AgentConnection:
    """The agent's side of one client connection: requests in, answered; requests and notifications out."""

    def __init__(self, frames: ClientFrames, tasks: anyio.abc.TaskGroup, mask: Callable[[str], str]) -> None:
        self._frames = frames
        self._tasks = tasks  # the handlers' (cancelled with the agent's)
        self._mask = mask  # the config's secrets out of a handler's own failure, before it goes to the client
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._closed = False

    async def listen(self, handler: Handler) -> None:
        """Until stdin ends: each message to its handler (in a task), each answer to the request that awaits it."""
        while (message := await self._frames.receive()) is not None:
            method = message.get("method")
            if isinstance(method, str):
                if "id" in message:
                    self._tasks.start_soon(self._answer, handler, method, message)
                else:
                    self._tasks.start_soon(self._notified, handler, method, message.get("params"))
            elif "id" in message:
                self._answered(message)
        self.close()

    async def _answer(self, handler: Handler, method: str, message: dict[str, Any]) -> None:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            frame["result"] = await handler(method, message.get("params"), False)
        except WireError as exc:
            frame["error"] = exc.error()
        except Exception as exc:  # a handler's own failure: the request fails, the connection goes on
            log.exception("acp: %s failed", scrub_surrogates(method))
            frame["error"] = WireError(INTERNAL_ERROR, "Internal error",
                                       {"details": self._mask(scrub_surrogates(str(exc)))}).error()
        await self._send(frame)

    async def _notified(self, handler: Handler, method: str, params: Any) -> None:
        try:
            await handler(method, params, True)
        except Exception as exc:  # a notification has no answer: the log says what went wrong
            log.warning("acp: the %s notification failed: %s", scrub_surrogates(method), type(exc).__name__)

    def _answered(self, message: dict[str, Any]) -> None:
        future = self._pending.pop(message["id"], None) if type(message["id"]) is int else None  # ours are ints
        if future is None or future.done():
            return
        error = message.get("error")
        if isinstance(error, Mapping):
            code, text = error.get("code"), error.get("message")
            future.set_exception(WireError(code if isinstance(code, int) else INTERNAL_ERROR,
                                           text if isinstance(text, str) else "Error", error.get("data")))
        else:
            future.set_result(message.get("result"))

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            await self._frames.send(frame)
        except Exception as exc:  # the client is gone (or the frame could not go): it is lost, dsh goes on
            log.warning("acp: could not send a frame: %s", type(exc).__name__)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """The client's result of one request of the agent's; :class:`WireError` for its error, ConnectionError
        once the connection closed."""
        if self._closed:
            raise ConnectionError("the client's connection is closed")
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._frames.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if self._closed:
            raise ConnectionError("the client's connection is closed")
        await self._frames.send({"jsonrpc": "2.0", "method": method, "params": params})

    def close(self) -> None:
        """No more requests: those still waiting for the client's answer fail with ConnectionError."""
        self._closed = True
        pending = list(self._pending.values())
        self._pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(ConnectionError("the client's connection is closed"))

    # What the agent asks of the client (the ``Client`` methods of the protocol).

    async def session_update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.notify("session/update", {"sessionId": session_id, "update": update})

    async def request_permission(self, session_id: str, tool_call: dict[str, Any],
                                 options: list[dict[str, Any]]) -> str | None:
        """The ``optionId`` the client picked, or None (cancelled, or an answer that is no pick)."""
        result = await self.request("session/request_permission",
                                    {"sessionId": session_id, "toolCall": tool_call, "options": options})
        outcome = result.get("outcome") if isinstance(result, Mapping) else None
        if isinstance(outcome, Mapping) and outcome.get("outcome") == "selected":
            option = outcome.get("optionId")
            return option if isinstance(option, str) else None
        return None

    async def read_text_file(self, session_id: str, path: str) -> str:
        result = await self.request("fs/read_text_file", {"sessionId": session_id, "path": path})
        content = result.get("content") if isinstance(result, Mapping) else None
        if not isinstance(content, str):
            raise WireError(INVALID_PARAMS, "Invalid params", None)  # an answer without the file's text
        return content

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        await self.request("fs/write_text_file", {"sessionId": session_id, "path": path, "content": content})
