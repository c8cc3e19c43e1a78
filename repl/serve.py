"""``dsh serve --stdio``: the child dsh runtime — one session served over JSON-RPC on stdin/stdout.

A front end like the REPL's modes, over the same :class:`~dsh.agent_loop.session.Session`; it sends the
session's events as frames instead of rendering them. The child keeps no session log (its parent keeps
the record) and gathers no project context.

Newline-delimited JSON-RPC 2.0 (see :mod:`dsh.agent_loop.jsonrpc`). Requests from the parent:

``initialize {model?, base_url?, max_tokens?, cwd, permission?, auto_compact?, dialect?, max_parallel?, request_gate?,
system_prompt?}``
    Build the session. The API key comes from ``$DEEPSEEK_API_KEY`` (the parent passes it explicitly;
    it is never a parameter). ``base_url`` defaults to ``$DEEPSEEK_BASE_URL``, then the DeepSeek default.
    ``permission`` ``allow`` approves the child's shell commands and file edits; ``reject`` (default)
    denies them. ``auto_compact`` (default false) is config.toml's: compact before a prompt sent with the
    window 90 % full, and on ``CONTEXT_WINDOW_EXCEEDED`` (docs/compaction.md). ``dialect`` (``deepseek`` or
    ``openai``; default by the host) and ``max_parallel`` (model requests at once; 0, the default: no bound) are
    the parent's (docs/endpoints.md, "Dialects"). ``request_gate`` is the parent's shared request gate: the
    absolute path of a directory owned by this user with mode 0700 (anything else is ``-32602``), whose slots the
    child's requests take beside the parent's and its other children's, so ``max_parallel`` bounds them all and a
    concurrency-cap 429 counts them all (dsh.llm.request_gate; docs/endpoints.md, "The concurrency cap").
    ``system_prompt`` is the child's whole system prompt (an agent file's body, docs/extending.md); without it the
    child has none.
    Answers ``{protocolVersion: 1, serverInfo: {name, version}, session: {id}}``.
``session/prompt {prompt}``
    Run one turn, as every front end does (``Session.run_turn``: a compaction first when due). Every
    session event is sent first as a ``session/event {event: {type, data}}`` notification (the same
    vocabulary as the session log, ``turn/end`` included); the response ``{reason}`` comes after the last
    of them, when the turn has ended.
``session/cancel``
    Cancel the running turn (it ends ``aborted``). A request or a notification.
``shutdown``
    Cancel any turn, answer ``{}``, and exit 0.

Errors: ``-32002`` not initialized / a turn is already running / already initialized, ``-32602``
invalid params, ``-32601`` unknown method, ``-32700``/``-32600`` for bad frames (the server carries on).
End of stdin disposes the session and exits 0. Nothing but JSON-RPC is written to stdout: the real
stdout is kept for frames and fd 1 is pointed at stderr, so a stray ``print`` cannot corrupt the stream.
Logs go to stderr, with the API key masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from dsh.agent_loop.events import Event, to_wire
from dsh.agent_loop.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcConnection, ProtocolError, TransportClosed
from dsh.agent_loop.session import Session, SessionUpdate
from dsh.agent_loop.tools import Approval
from dsh.agent_loop.update_pump import UpdatePump
from dsh.llm import DEFAULT_BASE_URL, DEFAULT_MODEL, RedactingFilter, __version__
from dsh.llm.client_settings import ClientSettings
from dsh.llm.deepseek import open_client
from dsh.llm.endpoint import DIALECTS, default_dialect
from dsh.llm.request_gate import gate_directory_problem
from dsh.repl.config import Config
from dsh.repl.endpoint import configured_endpoint

__all__ = ["PROTOCOL_VERSION", "ChildSession", "main", "serve_stdio", "serve_streams"]

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
SERVER_STATE_ERROR = -32002
_SHUTDOWN_DRAIN = 5.0  # how long a shutdown waits for the running turn to answer


class ChildSession:
    """The state behind one ``serve`` connection: a session, once initialized."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.conn: JsonRpcConnection | None = None
        self.session: Session | None = None
        self.done = anyio.Event()
        self._events: UpdatePump[Event] = UpdatePump()
        self._turn_running = False

    # -- dispatch --------------------------------------------------------------------------------

    async def on_request(self, method: str, params: Any) -> Any:
        if method == "initialize":
            return self._initialize(params)
        if method == "session/prompt":
            return await self._prompt(params)
        if method == "session/cancel":
            return self._cancel()
        if method == "shutdown":
            return self._shutdown()
        raise ProtocolError("Method not found", rpc_code=METHOD_NOT_FOUND)

    def on_notification(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            self._cancel()
        elif method in ("shutdown", "exit"):
            self._shutdown()

    # -- methods ---------------------------------------------------------------------------------

    def _initialize(self, params: Any) -> dict[str, Any]:
        if self.session is not None:
            raise ProtocolError("already initialized", rpc_code=SERVER_STATE_ERROR)
        if not isinstance(params, Mapping):
            raise ProtocolError("initialize params must be an object", rpc_code=INVALID_PARAMS)
        model = params.get("model", DEFAULT_MODEL)
        base_url = params.get("base_url") or self._env.get("DEEPSEEK_BASE_URL") or DEFAULT_BASE_URL
        max_tokens = params.get("max_tokens")
        cwd = params.get("cwd")
        permission = params.get("permission", "reject")
        auto_compact = params.get("auto_compact", False)
        if not isinstance(model, str) or not model:
            raise ProtocolError("initialize: model must be a non-empty string", rpc_code=INVALID_PARAMS)
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ProtocolError("initialize: base_url must be an http(s) URL", rpc_code=INVALID_PARAMS)
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ProtocolError("initialize: max_tokens must be a positive integer", rpc_code=INVALID_PARAMS)
        if not isinstance(cwd, str) or not os.path.isdir(cwd):
            raise ProtocolError("initialize: cwd must be an existing directory", rpc_code=INVALID_PARAMS)
        if permission not in ("allow", "reject"):
            raise ProtocolError('initialize: permission must be "allow" or "reject"', rpc_code=INVALID_PARAMS)
        if not isinstance(auto_compact, bool):
            raise ProtocolError("initialize: auto_compact must be true or false", rpc_code=INVALID_PARAMS)
        api_key = self._env.get("DEEPSEEK_API_KEY") or None
        dialect, max_parallel, request_gate = _request_bounds(params, base_url)
        config = Config(api_key=api_key, base_url=base_url, model=model, max_tokens=max_tokens,
                        auto_compact=auto_compact, dialect=dialect, max_parallel=max_parallel)
        # The parent's endpoint, its proxy from the environment the parent handed down (trust_env).
        endpoint = configured_endpoint(config, open_client(ClientSettings(
            base_url=base_url, api_key=api_key, dialect=dialect, max_parallel=max_parallel,
            request_gate=request_gate)))
        self.session = endpoint.session(config, self._env, approve=_allow_all if permission == "allow" else None,
                                        child=True, cwd=cwd)
        system_prompt = params.get("system_prompt")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ProtocolError("initialize: system_prompt must be a string", rpc_code=INVALID_PARAMS)
        agent = self.session.ensure_agent()
        if system_prompt:
            agent.set_system_prompt(system_prompt)  # a child gathers no context: this is its whole system prompt
        self.session.pump_updates(self._events, _events_only)
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "serverInfo": {"name": "dsh", "version": __version__},
            "session": {"id": f"child-{os.getpid()}"},
        }

    async def _prompt(self, params: Any) -> dict[str, Any]:
        session = self.session
        if session is None:
            raise ProtocolError("not initialized", rpc_code=SERVER_STATE_ERROR)
        if self._turn_running or self.done.is_set():
            raise ProtocolError("a turn is already running", rpc_code=SERVER_STATE_ERROR)
        prompt = params.get("prompt") if isinstance(params, Mapping) else None
        if not isinstance(prompt, str):
            raise ProtocolError("session/prompt: prompt must be a string", rpc_code=INVALID_PARAMS)
        self._turn_running = True
        try:
            reason = await session.run_turn(prompt)
        finally:
            self._turn_running = False
        await self.flushed()  # every event of the turn is on the wire before the response
        return {"reason": reason.to_dict()}

    def _cancel(self) -> dict[str, Any]:
        if self.session is not None:
            self.session.cancel_turn()
        return {}

    def _shutdown(self) -> dict[str, Any]:
        self._cancel()
        self.done.set()
        return {}

    # -- event pump ------------------------------------------------------------------------------

    async def pump_events(self) -> None:
        """Send the session's events as ``session/event`` notifications, in order, until cancelled."""
        await self._events.run(self._send_events)

    async def flushed(self) -> None:
        """Every event so far is on the wire (or the parent is gone)."""
        await self._events.flushed()

    async def _send_events(self, events: Sequence[Event]) -> None:
        for event in events:
            try:
                if self.conn is not None and not self.conn.closed:
                    await self.conn.notify("session/event", {"event": to_wire(event)})
            except TransportClosed:
                pass  # the parent is gone; the run loop notices and ends the session
            except Exception:
                log.exception("could not send a %s event", event.type)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.session is not None:
                await self.session.aclose()  # a running turn ends ``disposed``
        self._events.close()  # what the session said last is sent or dropped: the pump's task is cancelled next


def _request_bounds(params: Mapping[str, Any], base_url: str) -> tuple[str, int, str | None]:
    """``initialize``'s ``dialect`` (default: by the host), ``max_parallel`` (default 0: no bound) and
    ``request_gate`` (default: none, the child's requests bounded and counted by itself)."""
    dialect = params.get("dialect") or default_dialect(base_url)
    max_parallel = params.get("max_parallel", 0)
    if dialect not in DIALECTS:
        raise ProtocolError(f"initialize: dialect must be one of {', '.join(DIALECTS)}", rpc_code=INVALID_PARAMS)
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 0:
        raise ProtocolError("initialize: max_parallel must be an integer of 0 or more", rpc_code=INVALID_PARAMS)
    request_gate = params.get("request_gate")
    problem = None if request_gate is None else gate_directory_problem(request_gate)
    if problem is not None:  # the path itself is not repeated: it is the parent's, and may be anything
        raise ProtocolError(f"initialize: request_gate {problem}", rpc_code=INVALID_PARAMS)
    return dialect, max_parallel, request_gate


async def _allow_all(request: object) -> Approval:
    return "yes"


def _events_only(update: SessionUpdate) -> Iterable[Event]:
    """The session's own notices are not part of the protocol."""
    return (update,) if isinstance(update, Event) else ()


async def serve_streams(reader: Any, writer: Any, env: Mapping[str, str] | None = None) -> int:
    """Serve one session over the given byte streams until ``shutdown`` or the end of input."""
    session = ChildSession(os.environ if env is None else env)
    async with (
        JsonRpcConnection(
            reader,
            writer,
            on_request=session.on_request,
            on_notification=session.on_notification,
            strict=False,
            name="dsh serve",
        ) as conn,
        anyio.create_task_group() as tg,
    ):
        session.conn = conn
        tg.start_soon(session.pump_events)

        async def until_input_ends() -> None:
            await conn.wait_closed()
            session.done.set()

        tg.start_soon(until_input_ends)
        await session.done.wait()
        if not conn.closed:
            # shutdown: let the running turn answer (it was cancelled) and the shutdown reply go out
            with anyio.move_on_after(_SHUTDOWN_DRAIN):
                await conn.wait_requests_answered()
                await session.flushed()
        await session.aclose()
        tg.cancel_scope.cancel()
    return 0


class _ThreadReader:
    """Blocking reads in a worker thread, for a stdin that asyncio cannot watch (a regular file)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def read(self, n: int = -1) -> bytes:
        return await anyio.to_thread.run_sync(os.read, self._fd, n if n > 0 else 65536, abandon_on_cancel=True)


class _BlockingWriter:
    """Synchronous writes, for a stdout that asyncio cannot watch (a regular file)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._closed = False

    def write(self, data: bytes) -> None:
        self._buffer += data

    async def drain(self) -> None:
        while self._buffer:
            written = os.write(self._fd, self._buffer)
            del self._buffer[:written]

    def is_closing(self) -> bool:
        return self._closed


async def _stdio_streams(out_fd: int) -> tuple[Any, Any]:
    loop = asyncio.get_running_loop()
    reader: Any
    writer: Any
    try:
        stream_reader = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream_reader), sys.stdin.buffer)
        reader = stream_reader
    except (ValueError, OSError):
        reader = _ThreadReader(sys.stdin.fileno())
    out = os.fdopen(out_fd, "wb", buffering=0)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
    except (ValueError, OSError):
        writer = _BlockingWriter(out.fileno())
    return reader, writer


def _configure_logging() -> None:
    secrets = tuple(s for s in (os.environ.get("DEEPSEEK_API_KEY"),) if s)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter(secrets))
    handler.setFormatter(logging.Formatter("dsh serve: %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if os.environ.get("DSH_DEBUG", "") not in ("", "0") else logging.WARNING)


async def serve_stdio() -> int:
    """Serve one session on this process's stdin/stdout (the ``dsh serve --stdio`` entry)."""
    # Frames go to the real stdout; fd 1 (and with it sys.stdout) now points at stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    reader, writer = await _stdio_streams(out_fd)
    try:
        return await serve_streams(reader, writer)
    finally:
        with contextlib.suppress(Exception):
            writer.close()


_USAGE = "usage: dsh serve --stdio\n"
_HELP = ("\nThe child dsh runtime: one session served as newline-delimited JSON-RPC 2.0 on stdin/stdout, for a\n"
         "parent dsh's dsh-sdk subagent provider (docs/subagents.md). Editors use `dsh acp` instead.\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``dsh serve`` arguments (without ``serve``). Exit 0 after a clean shutdown, 2 for bad usage."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["--help"]):
        sys.stdout.write(_USAGE + _HELP)
        return 0
    if args != ["--stdio"]:
        sys.stderr.write(_USAGE)
        return 2
    _configure_logging()
    try:
        return anyio.run(serve_stdio)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
