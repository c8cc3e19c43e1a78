"""The stdio transport: the SDK's ``ClientSession`` fed from a :class:`ManagedProcess`'s stdout and stdin.

Not the SDK's ``stdio_client``: the child must be dsh's managed child (own process group, env allowlist,
stderr drained into a bounded host-side ring, the teardown ladder; agent_loop/process.py), and a line that
is not JSON-RPC must be a *protocol* failure the diagnostics can name, not an exception value the session
hands to a log. So the reader here ends the stream at the first bad line and says so in :class:`StreamFacts`;
the session then sees the connection closed and every pending request fails.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCMessage, jsonrpc_message_adapter

from dsh.agent_loop.process import LineTooLong, ManagedProcess, read_line

__all__ = ["StreamFacts", "stdio_streams"]

_Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@dataclass
class StreamFacts:
    """What the transport saw, read by the diagnostics: a line that was not JSON-RPC, an HTTP status."""

    protocol_error: BaseException | None = None
    http_status: int | None = None
    eof: bool = False


@contextlib.asynccontextmanager
async def stdio_streams(process: ManagedProcess, facts: StreamFacts) -> AsyncIterator[_Streams]:
    """The (read, write) stream pair over a started ``process``; its tasks end when the block leaves."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as group:
        group.start_soon(_read, process, read_writer, facts)
        group.start_soon(_write, process, write_reader, read_writer)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()
            for stream in (read_stream, write_stream, read_writer, write_reader):
                stream.close()


async def _read(process: ManagedProcess, out: MemoryObjectSendStream[SessionMessage | Exception],
                facts: StreamFacts) -> None:
    assert process.stdout is not None
    async with out:
        while True:
            try:
                line = await read_line(process.stdout)
            except LineTooLong as exc:
                facts.protocol_error = exc
                return
            except OSError:
                break
            if line is None:
                break
            if not line.strip():
                continue
            try:
                message = _parse(line)
            except ValueError as exc:  # pydantic's ValidationError is a ValueError: not JSON-RPC
                facts.protocol_error = exc
                return  # closing the stream fails every pending request: the server is not speaking MCP
            try:
                await out.send(SessionMessage(message))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
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
