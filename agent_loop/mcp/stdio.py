"""The stdio transport: the SDK's ``ClientSession`` fed from a :class:`ManagedProcess`'s stdout and stdin.

Not the SDK's ``stdio_client``: the child must be dsh's managed child (own process group, env allowlist,
stderr drained into a bounded host-side ring, the teardown ladder; agent_loop/process.py), and what the
server writes is bounded here, at the reader (docs/mcp.md, "Limits"):

* one message (one line) is at most :data:`MAX_MESSAGE_BYTES`: a longer one is dropped as it arrives, never
  held whole, and the connection is told (:class:`FrameTooLarge`) so the request it answered fails at once;
* a line that is not JSON-RPC (a stray ``print``, a banner) is skipped and counted, as the official SDK
  clients skip it; the first one is kept (cut to :data:`STRAY_KEPT_BYTES`) for ``/why``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCMessage, jsonrpc_message_adapter

from dsh.agent_loop.process import ManagedProcess

__all__ = [
    "MAX_MESSAGE_BYTES",
    "STRAY_KEPT_BYTES",
    "FrameTooLarge",
    "Skipped",
    "StreamFacts",
    "read_lines",
    "stdio_streams",
]

_Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
# One message may carry a whole file, but the model gets at most MAX_RESULT_CHARS of any result and parsing
# costs ~15x the message in memory: 16 MiB keeps a worst case near 250 MB, and a 10 MiB file read still works.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
STRAY_KEPT_BYTES = 2048  # of the first stray line, for /why (masked, made inert and cut again there)
_CHUNK = 64 * 1024
Skipped = Literal["stray", "too-large"]


class FrameTooLarge(ValueError):
    """A message over :data:`MAX_MESSAGE_BYTES` was dropped unread: the request it answered failed."""

    def __init__(self) -> None:
        super().__init__(f"a message of more than {MAX_MESSAGE_BYTES >> 20} MiB from the server, dropped unread "
                         "(the limit of one MCP message)")


@dataclass
class StreamFacts:
    """What the transport saw, read by the diagnostics: lines skipped, an HTTP status, the end of stdout."""

    protocol_error: BaseException | None = None
    http_status: int | None = None
    eof: bool = False
    stray: int = 0  # stdout lines that were not JSON-RPC, skipped
    first_stray: str | None = None  # the first of them, cut to STRAY_KEPT_BYTES
    too_large: int = 0  # messages over MAX_MESSAGE_BYTES, dropped


async def read_lines(receive: Callable[[int], Awaitable[bytes]], limit: int) -> AsyncIterator[bytes | None]:
    """Each ``\\n``-terminated line of a byte stream (``await receive(n)``: up to n bytes, b"" at its end),
    without its terminator; ``None`` for a line longer than ``limit``, whose bytes are dropped as they come.
    Memory stays within ``limit`` plus one chunk, whatever the stream holds."""
    pending = bytearray()
    dropping = False
    while True:
        chunk = await receive(_CHUNK)
        if not chunk:
            if pending and not dropping:
                yield bytes(pending)
            return
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if dropping:
                dropping = False
            elif len(pending) + end - start > limit:
                yield None
            else:
                pending += chunk[start:end]
                yield bytes(pending)
            pending.clear()
            start = end + 1
        if not dropping:
            pending += chunk[start:]
            if len(pending) > limit:
                pending.clear()
                dropping = True
                yield None  # said once, as soon as it is known; the rest of the line is dropped unread


@contextlib.asynccontextmanager
async def stdio_streams(process: ManagedProcess, facts: StreamFacts,
                        on_skip: Callable[[Skipped], None]) -> AsyncIterator[_Streams]:
    """The (read, write) stream pair over a started ``process``; its tasks end when the block leaves.
    ``on_skip`` hears of each line skipped (not JSON-RPC) or dropped (too large), after ``facts`` counts it."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as group:
        group.start_soon(_read, process, read_writer, facts, on_skip)
        group.start_soon(_write, process, write_reader, read_writer)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()
            for stream in (read_stream, write_stream, read_writer, write_reader):
                stream.close()


async def _read(process: ManagedProcess, out: MemoryObjectSendStream[SessionMessage | Exception],
                facts: StreamFacts, on_skip: Callable[[Skipped], None]) -> None:
    assert process.stdout is not None
    async with out:
        try:
            async for line in read_lines(process.stdout.read, MAX_MESSAGE_BYTES):
                if line is None:
                    facts.too_large += 1
                    on_skip("too-large")
                    continue
                if not line.strip():
                    continue
                try:
                    message = _parse(line)
                except ValueError:  # pydantic's ValidationError is a ValueError: not JSON-RPC
                    facts.stray += 1
                    if facts.first_stray is None:
                        facts.first_stray = line[:STRAY_KEPT_BYTES].decode("utf-8", "replace")
                    on_skip("stray")
                    continue
                try:
                    await out.send(SessionMessage(message))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
        except OSError:
            pass
    facts.eof = True


def _parse(line: bytes) -> JSONRPCMessage:
    try:
        return jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        # pydantic's JSON parser rejects a lone surrogate escape ("\\ud800") that JSON allows; the stdlib's
        # takes it, and the text is cleaned where dsh shows it (tools.py). Anything else still fails here.
        return jsonrpc_message_adapter.validate_python(json.loads(line), by_name=False)


def _dump(message: JSONRPCMessage) -> str:
    try:
        return message.model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError:
        # A lone surrogate (a tool name a server gave us) cannot be UTF-8: the stdlib writes it as the
        # escape the server sent, instead of the serializer's error ending the transport.
        return json.dumps(message.model_dump(mode="json", by_alias=True, exclude_unset=True))


async def _write(process: ManagedProcess, messages: MemoryObjectReceiveStream[SessionMessage],
                 read_writer: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    assert process.stdin is not None
    try:
        async with messages:
            async for message in messages:
                data = _dump(message.message) + "\n"
                process.stdin.write(data.encode("utf-8", "replace"))
                await process.stdin.drain()
    except (OSError, RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        read_writer.close()  # the server stopped reading: the session sees the connection end
