"""One MCP server's connection on the official SDK: spawn or connect, initialize, list tools, call, close.

:meth:`ServerConnection.run` is the connection's whole life, in one task of the manager's task group (the
SDK's ``ClientSession`` must be entered and left in the same task): it connects, lists the tools, then
waits for commands (re-list after ``notifications/tools/list_changed``, stop). Calls come from the turn's
task through :meth:`ServerConnection.call`; cancelling the turn cancels the SDK request, which sends
``notifications/cancelled`` (its dispatcher's ``cancel_on_abandon``). Every failure becomes an
:class:`~dsh.agent_loop.mcp.diagnostics.McpFailure` of closed facts (docs/mcp.md). This module imports the
SDK at its top: the manager imports it only when a server starts.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Self

import anyio
import httpx2
from mcp import ClientSession
from mcp import types as mcp_types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from dsh.agent_loop.frames import FrameTap
from dsh.agent_loop.mcp import plain  # the plain data this module turns the SDK's objects into
from dsh.agent_loop.mcp.config import McpServerConfig, expand_headers
from dsh.agent_loop.mcp.diagnostics import CallFailed, Category, McpFailure, Stage
from dsh.agent_loop.mcp.stdio import MAX_MESSAGE_BYTES, FrameTooLarge, Skipped, StreamFacts, stdio_streams
from dsh.agent_loop.process import ExitStatus, ManagedProcess, ProcessStartError

__all__ = ["ServerConnection"]

_log = logging.getLogger("dsh.mcp")
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001
# An answer that could not be parsed: over streamable HTTP the SDK's transport answers the request itself with
# this code when the server's reply is not JSON-RPC (a lone surrogate escape is enough; docs/mcp.md). The
# connection is still up (each request is its own POST), so it is that call's protocol failure.
_PARSE_ERROR = -32700
# The SDK's own answer to a request whose SSE event passed max_sse_event_size (httpx2's SSEError, relayed with
# the connection-closed code): the connection is fine, that one answer was too large.
_SSE_TOO_LARGE = "byte limit"
_EXIT_WAIT = 1.0  # after stdout closed, the exit is usually a moment away: wait this long for its code
_MAX_PAGES = 50  # tools/list pages followed; a server paging forever is cut here
_STDOUT_BUFFER = 1024 * 1024  # the pipe's reader pauses past twice this; stdio.py reads it in chunks

State = Literal["starting", "ready", "failed", "stopped"]


def _facts(tap: FrameTap, direction: Literal["sent", "received"], item: object) -> None:
    """Tell ``tap`` of one SDK message as the plain JSON-RPC shape (the facts only: agent_loop/frames.py)."""
    if not isinstance(item, SessionMessage):
        tap(direction, None, None)  # a transport's parse failure: an invalid frame
        return
    message = item.message
    if isinstance(message, mcp_types.JSONRPCRequest):
        tap(direction, {"method": message.method, "id": message.id}, None)
    elif isinstance(message, mcp_types.JSONRPCNotification):
        tap(direction, {"method": message.method}, None)
    elif isinstance(message, mcp_types.JSONRPCResponse):
        tap(direction, {"id": message.id, "result": None}, None)
    else:
        tap(direction, {"id": message.id, "error": {"code": message.error.code}}, None)


class _Tapped:
    """What a tapped stream passes straight on to the SDK's stream it wraps."""

    def __init__(self, stream: Any, tap: FrameTap) -> None:
        self._stream, self._tap = stream, tap

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        result: bool | None = await self._stream.__aexit__(*exc_info)
        return result


class _TappedRead(_Tapped):
    """The SDK's read stream, each message told to a frame tap as it is received."""

    @property
    def last_context(self) -> Any:
        # getattr: the SDK's ReadStream protocol leaves last_context undeclared (only its HTTP transport's stream
        # has it) and reads it this way itself (mcp.shared._stream_protocols); passed on as the SDK would see it.
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        item = await self._stream.receive()
        _facts(self._tap, "received", item)
        return item

    def __aiter__(self) -> _TappedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


class _TappedWrite(_Tapped):
    """The SDK's write stream, each message told to a frame tap as it is sent."""

    async def send(self, item: Any, /) -> None:
        _facts(self._tap, "sent", item)
        await self._stream.send(item)


class ServerConnection:
    def __init__(self, config: McpServerConfig, *, environ: Mapping[str, str],
                 on_change: Callable[[ServerConnection], None], frames: FrameTap | None = None,
                 on_stray: Callable[[ServerConnection, str], None] | None = None) -> None:
        self.config = config
        self._on_stray = on_stray
        self._frames = frames
        self._environ = environ
        self._on_change = on_change
        self.state: State = "starting"
        self.tools: list[plain.ListedTool] = []
        self.failure: McpFailure | None = None
        self.settled = anyio.Event()  # ready or failed: what a waiting turn waits for
        # Set once the re-listing a tools/list_changed asked for is done (or the connection ended): the next turn
        # waits for it, so its requests carry the list the server said it now has. None: none pending.
        self.relisting: anyio.Event | None = None
        # The startup clock starts here, not when the handshake does: spawning (and, with several servers,
        # the other spawns before it) counts, so a turn that waits from now sees the server settled by then.
        self.deadline = anyio.current_time() + config.startup_timeout
        self.done = anyio.Event()  # run() has returned: the child is reaped
        self.secrets: tuple[str, ...] = ()  # header values expanded from the environment
        self._session: ClientSession | None = None
        self._process: ManagedProcess | None = None
        self._facts = StreamFacts()
        self._stage = Stage.SPAWN
        self._exit: ExitStatus | None = None  # the server's own exit, seen before any teardown
        self._exit_noted = False
        self._send, self._commands = anyio.create_memory_object_stream[str](math.inf)
        self._life = anyio.CancelScope()  # run()'s: stop() cancels a start that has not finished
        self._waiting: set[anyio.CancelScope] = set()  # requests a dropped (too large) message fails at once

    # --- the connection's life (one task) -------------------------------------------------------

    async def run(self) -> None:
        try:
            with self._life:
                async with contextlib.AsyncExitStack() as stack:
                    try:
                        await self._connect(stack)
                    except Exception as exc:  # recorded before the teardown: a waiting turn sees it at once
                        self._session = None
                        self._fail(await self.classify(exc, self._stage))
        except Exception as exc:  # every failure is this server's, never the session's
            if self.state != "failed":
                self._fail(await self.classify(exc, self._stage))
        finally:
            self._session = None
            self._send.close()
            if self.state in ("starting", "ready"):
                self._set("stopped")
            self.settled.set()
            self.done.set()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> None:
        read, write = await self._open(stack)
        if self._frames is not None:
            read, write = _TappedRead(read, self._frames), _TappedWrite(write, self._frames)
        session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._message))
        with anyio.fail_after(max(0.0, self.deadline - anyio.current_time())), self._answerable() as answer:
            self._stage = Stage.INITIALIZE
            await session.initialize()
            self._stage = Stage.LIST_TOOLS
            self.tools = await self._list(session)
        if answer.cancel_called:
            raise FrameTooLarge()
        self._session = session
        self._set("ready")
        await self._serve(session)

    async def _open(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        config = self.config
        if config.transport == "stdio":
            process = ManagedProcess(config.command, env=config.env, cwd=config.cwd, base_env=self._environ,
                                     stdout_limit=_STDOUT_BUFFER)
            # Shielded: a cancel between spawn and the handle being owned would orphan the child.
            with anyio.CancelScope(shield=True):
                await process.start()
            self._process = process
            stack.push_async_callback(process.terminate)
            stack.push_async_callback(self._note_exit)  # runs first: the exit the server chose, not our ladder's
            return await stack.enter_async_context(stdio_streams(process, self._facts, self._skipped))
        assert config.url is not None
        headers, self.secrets = expand_headers(config.headers, self._environ)
        self._stage = Stage.INITIALIZE  # no child to spawn: the first request is where HTTP can fail
        client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0), trust_env=False,
                                    event_hooks={"response": [self._saw_response]},
                                    transport=_CappedBodies(httpx2.AsyncHTTPTransport(trust_env=False)))
        await stack.enter_async_context(client)
        read, write = await stack.enter_async_context(
            streamable_http_client(config.url, http_client=client, max_sse_event_size=MAX_MESSAGE_BYTES))
        return read, write

    def _skipped(self, what: Skipped) -> None:
        """A stdout line the reader skipped (not JSON-RPC) or dropped (over MAX_MESSAGE_BYTES)."""
        if what == "too-large":
            _log.warning("MCP server %s: a message over %d bytes dropped", self.config.name, MAX_MESSAGE_BYTES)
            for scope in self._waiting:  # the answer they wait for may have been it: they fail now
                scope.cancel()
        elif self._facts.stray == 1 and self._on_stray is not None and self._facts.first_stray is not None:
            self._on_stray(self, self._facts.first_stray)

    @property
    def stray_lines(self) -> int:
        return self._facts.stray

    @contextlib.contextmanager
    def _answerable(self) -> Iterator[anyio.CancelScope]:
        """A request whose answer may be dropped as too large: the wait ends at once, and the caller, seeing
        the scope's ``cancel_called``, raises FrameTooLarge (a protocol failure) instead of waiting out its
        timeout; the connection itself carries on. Raised by the caller, outside the cancellation, so /why's
        chain names the limit and not the cancellation beneath it."""
        scope = anyio.CancelScope()
        self._waiting.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._waiting.discard(scope)

    async def _note_exit(self) -> None:
        if self._process is not None and not self._exit_noted:
            self._exit_noted = True
            self._exit = await self._process.wait_exit(_EXIT_WAIT if self._facts.eof else 0)

    async def _saw_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._facts.http_status = response.status_code

    async def _list(self, session: ClientSession) -> list[plain.ListedTool]:
        tools: list[plain.ListedTool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = await session.list_tools(params=params)
            tools.extend(_listed(tool) for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _serve(self, session: ClientSession) -> None:
        async for command in self._commands:
            if command == "stop":
                return
            try:
                with anyio.fail_after(self.config.startup_timeout), self._answerable() as answer:
                    tools = await self._list(session)
                if answer.cancel_called:
                    raise FrameTooLarge()
                self.tools = tools
            except Exception as exc:  # a failed re-listing keeps the last good list
                _log.warning("MCP server %s: re-listing tools failed: %s", self.config.name, type(exc).__name__)
                if isinstance(exc, MCPError) and exc.code == _CONNECTION_CLOSED:
                    raise
                continue
            finally:
                self._relisted()
            self._on_change(self)

    async def _message(self, message: IncomingMessage) -> None:
        # By its method, not its class: each protocol version's notification has a class of its own.
        if not isinstance(message, Exception) and message.method == "notifications/tools/list_changed":
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._send.send_nowait("relist")
                self.relisting = self.relisting or anyio.Event()

    def _relisted(self) -> None:
        pending, self.relisting = self.relisting, None
        if pending is not None:
            pending.set()

    def stop(self) -> None:
        if self.state == "starting":  # a handshake in progress is abandoned; the teardown still reaps the child
            self._life.cancel()
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait("stop")

    def _set(self, state: State) -> None:
        self.state = state
        if state != "starting":
            self.settled.set()
        if state not in ("starting", "ready"):
            self._relisted()  # no re-listing comes from a connection that ended
        self._on_change(self)

    def _fail(self, failure: McpFailure) -> None:
        self.failure = failure
        self.tools = []
        self._set("failed")

    # --- calls (the turn's task) -----------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> plain.CallResult:
        """The server's result (its own ``isError`` included); :class:`CallFailed` otherwise."""
        session = self._session
        if session is None or self.state != "ready":
            raise CallFailed(self.failure or McpFailure(Stage.CALL, Category.TRANSPORT))
        try:
            with anyio.fail_after(timeout), self._answerable() as answer:
                result = await session.call_tool(tool, arguments)
            if answer.cancel_called:
                raise FrameTooLarge()
        except TimeoutError as exc:
            raise CallFailed(McpFailure(Stage.CALL, Category.TIMEOUT, cause=exc)) from None
        except Exception as exc:
            failure = await self.classify(exc, Stage.CALL)
            if not self._answered(failure):  # the connection is gone: so are its tools
                self._fail(failure)
                self.stop()
            raise CallFailed(failure) from None
        if not isinstance(result, mcp_types.CallToolResult):
            raise CallFailed(McpFailure(Stage.CALL, Category.PROTOCOL))
        return plain.CallResult(tuple(_block(block) for block in result.content), result.structured_content,
                          bool(result.is_error))

    def _answered(self, failure: McpFailure) -> bool:
        """Whether a failed call was answered (a JSON-RPC error: the server's, or the SDK's for a reply it could
        not parse) on a connection that is still up, rather than lost with the connection."""
        if failure.category == Category.TOOL_ERROR or isinstance(failure.cause, FrameTooLarge) or _sse_too_large(
                failure.cause):
            return True
        return (failure.category == Category.PROTOCOL and self._facts.protocol_error is None
                and isinstance(failure.cause, MCPError) and failure.cause.code == _PARSE_ERROR)

    # --- diagnostics -----------------------------------------------------------------------------

    async def classify(self, exc: BaseException, stage: Stage) -> McpFailure:
        """Closed facts about ``exc`` at ``stage``; the raw exception and the server's words ride along."""
        exc = _leaf(exc)
        words: list[tuple[str, object]] = []
        if isinstance(exc, MCPError):
            words.append(("error", exc.error.message))
            if exc.error.data is not None:
                words.append(("data", exc.error.data))
        if self._facts.stray:  # lines skipped on the way: often the reason a server "hangs" (its answer was one)
            words.append(("stdout lines that are not JSON-RPC, skipped", self._facts.stray))
            words.append(("the first of them", self._facts.first_stray))
        if isinstance(exc, ProcessStartError):
            return McpFailure(Stage.SPAWN, Category.PROCESS_START, cause=exc)
        if isinstance(exc, MCPError) and exc.code == _CONNECTION_CLOSED:
            await self._note_exit()
        exit_status = self._exit
        if self._facts.protocol_error is not None or _sse_too_large(exc):
            category = Category.PROTOCOL
        elif isinstance(exc, TimeoutError) or (isinstance(exc, MCPError) and exc.code == _REQUEST_TIMEOUT):
            category = Category.TIMEOUT
        elif self._facts.http_status is not None:
            category = Category.HTTP
        elif exit_status is not None:
            category = Category.PROCESS_EXIT
        elif isinstance(exc, MCPError) and exc.code == _CONNECTION_CLOSED:
            category = Category.TRANSPORT
        elif isinstance(exc, MCPError) and exc.code == _PARSE_ERROR:
            category = Category.PROTOCOL  # not the tool's failure: an answer that is not JSON-RPC
        elif isinstance(exc, MCPError):
            # The server answered the request with a JSON-RPC error: at a call, the tool's own failure.
            category = Category.TOOL_ERROR if stage == Stage.CALL else Category.PROTOCOL
        elif isinstance(exc, ValidationError | ValueError | RuntimeError):
            category = Category.PROTOCOL
        elif isinstance(exc, httpx2.TransportError | OSError | anyio.BrokenResourceError | anyio.ClosedResourceError):
            category = Category.TRANSPORT
        else:
            category = Category.UNKNOWN
        return McpFailure(stage, category, exit_status=exit_status, http_status=self._facts.http_status,
                          cause=exc, words=tuple(words))

    @property
    def stderr(self) -> str:
        return self._process.stderr_lines() if self._process is not None else ""


# --- the SDK's objects as plain data (agent_loop/mcp/plain.py) ----------------------------------------


def _listed(tool: mcp_types.Tool) -> plain.ListedTool:
    hints = tool.annotations
    return plain.ListedTool(tool.name, tool.description, tool.input_schema,
                      read_only=bool(hints is not None and hints.read_only_hint))


def _block(block: object) -> plain.Block:
    if isinstance(block, mcp_types.TextContent):
        return plain.TextBlock(block.text)
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return plain.MediaBlock(block.type, block.mime_type, block.data)
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return plain.ResourceBlock(resource.uri, resource.mime_type, text=resource.text)
        return plain.ResourceBlock(resource.uri, resource.mime_type, blob=resource.blob)
    if isinstance(block, mcp_types.ResourceLink):
        return plain.LinkBlock(block.uri)
    return plain.OtherBlock(type(block).__name__)  # a block type a newer SDK knows and this client does not


class _BodyTooLarge(httpx2.StreamError):
    """A JSON answer over MAX_MESSAGE_BYTES: the SDK answers its request with a parse error (a protocol failure
    of that call; the connection carries on)."""

    def __init__(self) -> None:
        super().__init__(f"an HTTP answer of more than {MAX_MESSAGE_BYTES >> 20} MiB, not read further "
                         "(the limit of one MCP message)")


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> Any:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > MAX_MESSAGE_BYTES:
                raise _BodyTooLarge()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedBodies(httpx2.AsyncBaseTransport):
    """The HTTP transport with each JSON answer cut at MAX_MESSAGE_BYTES as it is read: the SDK reads a JSON
    answer whole. An SSE stream is bounded per event by the SDK itself (``max_sse_event_size``)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        json_body = response.headers.get("content-type", "").lower().startswith("application/json")
        if json_body and isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _CappedStream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _sse_too_large(exc: BaseException | None) -> bool:
    return (isinstance(exc, MCPError) and exc.code == _CONNECTION_CLOSED
            and exc.error.message.startswith("SSE stream failed") and _SSE_TOO_LARGE in exc.error.message)


def _leaf(exc: BaseException) -> BaseException:
    """The first meaningful exception of a (nested) group: the SDK's task groups wrap what they raise."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        if not inner:
            return exc.exceptions[0]
        exc = inner[0]
    return exc
