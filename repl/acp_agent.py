"""``dsh acp``: dsh as an ACP agent on stdio (the Agent Client Protocol's JSON-RPC, spoken by repl/acp_wire.py).

A front end over the same :class:`~dsh.agent_loop.session.Session` as the REPL, for editors (Zed, JetBrains,
neovim) and headless clients (docs/editors.md). The endpoint is resolved exactly as the REPL resolves it
(``--model``, ``--base-url``, config.toml, ``DEEPSEEK_API_KEY``; ``--demo`` for the keyless scripted one).
Nothing but frames is written to stdout: the real stdout is kept for frames and fd 1 points at stderr, so a
stray ``print`` cannot corrupt the stream; logs go to dsh.log, masked, as the REPL's. Frames in are read by
:class:`~dsh.repl.acp_wire.ClientFrames`: a line that is no JSON-RPC message is answered ``-32700`` / ``-32600``
and skipped. The params are the client's: what the schema requires and is missing or of another type is
``-32602``; a method dsh does not serve is ``-32601``.

Methods (the mapping of each turn: docs/editors.md, "How dsh acp maps turns"):

``initialize``
    Protocol version 1, ``agentInfo`` {name "dsh", title, version}, ``loadSession``, prompt capabilities
    (text, resource links, embedded text resources) and HTTP MCP servers; no auth methods (the key comes
    from the environment or config.toml).
``session/new {cwd, mcpServers}``
    A dsh session rooted at cwd, its log kept as the REPL's, the client's stdio and HTTP MCP servers
    connected with dsh's MCP client; answers the dsh session id. A missing key fails it with the REPL's
    line; a cwd that would put every file of the user's, or dsh's own, inside the tree is ``-32602``
    (:func:`tree_refusal`).
``session/load {sessionId, cwd, mcpServers}``
    dsh's own saved session, its history replayed as updates before the answer; an unknown id is
    ``-32002`` (resource not found); its cwd is checked as session/new's.
``session/prompt``
    One turn; its stop reason, or, for a failed turn, JSON-RPC error ``-32603`` whose message is the
    turn-end line and whose data is ``{code, fix, chain}``.
``session/cancel``
    Ends the running turn ``cancelled`` (``Session.cancel_turn``, as Ctrl-C).
``session/set_mode {sessionId, modeId}``
    The permission mode (docs/safety.md): session/new and session/load answer the modes (``default``,
    ``accept-edits``, ``plan``, and ``auto`` only with a sandbox configured) and the current one, from
    ``--permission-mode`` or config.toml; the next tool call gets the new mode.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from dsh.agent_loop.permissions import CYCLE, Mode, Permissions, parse_mode
from dsh.agent_loop.session import StartupError
from dsh.agent_loop.session_files import SAFE_ID, SUFFIX
from dsh.llm import ErrorCode, HarnessError, Redactor, error_chain
from dsh.repl import __version__
from dsh.repl.acp_session import AcpSession, ClientFiles
from dsh.repl.acp_updates import TURN_FAILED, clean
from dsh.repl.acp_wire import (
    PROTOCOL_VERSION,
    RESOURCE_NOT_FOUND,
    AgentConnection,
    ClientFrames,
    WireError,
    read_bool,
    read_list,
    read_str,
    stdio_streams,
)
from dsh.repl.config import (
    PERMISSION_MODES,
    Config,
    ConfigError,
    add_endpoint_flags,
    check_sandbox,
    config_file_path,
    load_config,
    state_dir,
)
from dsh.repl.endpoint import Endpoint, open_endpoint
from dsh.repl.options import LaunchOptions, check_endpoint
from dsh.repl.trust import gate as trust_gate

__all__ = ["ClientFrames", "DshAgent", "main", "mcp_tables", "tree_refusal"]  # ClientFrames: acp_wire's

log = logging.getLogger(__name__)

NOT_FOUND = RESOURCE_NOT_FOUND  # ACP's "resource not found": an unknown session id
_NAME = re.compile(r"[^A-Za-z0-9_-]")
SetupLogging = Callable[[dict[str, str], tuple[str, ...]], None]


def mcp_tables(servers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The client's ``mcpServers`` as ``[mcp_servers.NAME]`` tables (agent_loop/mcp/config.py): stdio and HTTP.

    A name is made fit for tool names (``mcp__<name>__<tool>``). The client's values are its own: a header
    value naming ``${VAR}`` would be filled from dsh's environment (config.toml's convenience), so it is refused
    rather than handing dsh's secrets to a server the client picked.
    """
    tables: dict[str, dict[str, Any]] = {}
    for server in servers:
        raw_name = server.get("name") if isinstance(server, Mapping) else None
        if not isinstance(server, Mapping) or not isinstance(raw_name, str):
            raise WireError.invalid_params({"mcpServers": "each server is an object with a name"})
        name = _NAME.sub("_", raw_name)[:28] or "server"
        while name in tables:
            name += "_"
        kind = server.get("type")
        if kind in (None, "stdio") and isinstance(server.get("command"), str):  # the schema's stdio has no type
            tables[name] = {"command": server["command"], "args": _strings(server, "args", name),
                            "env": _pairs(server, "env", name)}
        elif kind == "http" and isinstance(server.get("url"), str):
            headers = _pairs(server, "headers", name)
            if any("${" in value for value in headers.values()):
                raise WireError.invalid_params(
                    {"mcpServers": f"{name}: a header value may not name ${{VAR}}; give the value itself"})
            tables[name] = {"url": server["url"], "headers": headers}
        else:
            what = kind if kind in ("sse", "acp") else "this kind"
            raise WireError.invalid_params(
                {"mcpServers": f"{name}: dsh connects stdio and http MCP servers, not {what}"})
    return tables


def _strings(server: Mapping[str, Any], key: str, name: str) -> list[str]:
    values = server.get(key)
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise WireError.invalid_params({"mcpServers": f"{name}: {key} is a list of strings"})
    return list(values)


def _pairs(server: Mapping[str, Any], key: str, name: str) -> dict[str, str]:
    """A server's ``env`` or ``headers``: a list of ``{name, value}`` strings, as a dict."""
    pairs = server.get(key)
    if not isinstance(pairs, list) or not all(
            isinstance(pair, Mapping) and isinstance(pair.get("name"), str) and isinstance(pair.get("value"), str)
            for pair in pairs):
        raise WireError.invalid_params({"mcpServers": f"{name}: {key} is a list of {{name, value}} strings"})
    return {pair["name"]: pair["value"] for pair in pairs}


def tree_refusal(cwd: str, env: Mapping[str, str]) -> str | None:
    """Why ``cwd`` cannot root a session, or None.

    The session's cwd is its working tree: what accept-edits and auto write without asking, and what the sandbox
    makes writable (docs/safety.md). The client picks it, so a folder that holds every file of the user's (``/``,
    the home directory, a parent of it), or one inside dsh's own configuration or state (an edit there changes what
    dsh runs or trusts), is refused rather than trusted. Symlinks are resolved; the client's text is never quoted
    back."""
    if not os.path.isabs(cwd):
        return "not an absolute path"
    if not os.path.isdir(cwd):
        return "not an existing directory"
    tree = Path(os.path.realpath(cwd))
    if tree == Path(tree.anchor):
        return "the file system root is no project folder: every path would be inside it"
    home = Path(os.path.realpath(env["HOME"])) if os.path.isabs(env.get("HOME", "")) else None
    if home is not None and home == tree:
        return "the home directory is no project folder: every file of yours would be inside it"
    if home is not None and home.is_relative_to(tree):
        return "a folder holding the home directory is no project folder: every file of yours would be inside it"
    for own, why in ((config_file_path(env).parent, "configuration is no project folder: an edit there changes "
                                                      "what dsh runs"),
                     (state_dir(env), "state is no project folder: an edit there changes what dsh trusts")):
        if tree.is_relative_to(os.path.realpath(own)):
            return f"dsh's own {why}"
    return None


class DshAgent:
    """The ACP ``Agent`` side: sessions by id, each an :class:`AcpSession` over a dsh session."""

    def __init__(self, config: Config, env: dict[str, str], *, endpoint: Endpoint, conn: AgentConnection,
                 missing_key: str | None = None, tasks: anyio.abc.TaskGroup) -> None:
        self.config = config
        self.env = env
        self.endpoint = endpoint
        self.missing_key = missing_key  # the REPL's start-up line for a missing key, or None
        self.sessions: dict[str, AcpSession] = {}
        self.conn = conn
        self._tasks = tasks
        self._client_files = False  # the client serves fs/read_text_file and fs/write_text_file
        self._requests: dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]] = {
            "initialize": self.initialize, "authenticate": self.authenticate, "session/new": self.new_session,
            "session/load": self.load_session, "session/set_mode": self.set_session_mode,
            "session/prompt": self.prompt,
        }

    async def handle(self, method: str, params: Any, notification: bool) -> Any:
        """One message from the client: a request's result (or :class:`WireError`), a notification's effect."""
        if notification:
            if method == "session/cancel" and isinstance(params, Mapping) and isinstance(params.get("sessionId"), str):
                self.cancel(params["sessionId"])
            return None  # a notification dsh does not know: nothing to answer
        serve = self._requests.get(method)
        if serve is None:
            raise WireError.method_not_found(method)
        if not isinstance(params, Mapping):
            raise WireError.invalid_params({"params": "an object is required"})
        return await serve(params)

    async def initialize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(params.get("protocolVersion"), bool) or not isinstance(params.get("protocolVersion"), int):
            raise WireError.invalid_params({"protocolVersion": "an integer is required"})
        capabilities = params.get("clientCapabilities")
        fs = capabilities.get("fs") if isinstance(capabilities, Mapping) else None
        self._client_files = read_bool(fs, "readTextFile") and read_bool(fs, "writeTextFile")
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": True},
            },
            "agentInfo": {"name": "dsh", "title": "dsh", "version": __version__},
            "authMethods": [],
        }

    async def authenticate(self, params: Mapping[str, Any]) -> Any:
        raise WireError.invalid_params(
            {"methodId": "dsh has no auth methods: the key comes from DEEPSEEK_API_KEY or config.toml"})

    def _refuse_without_key(self) -> None:
        if self.missing_key is not None:
            raise WireError(TURN_FAILED, self.missing_key)

    async def _open(self, cwd: str, mcp_servers: list[Any], resume: str | None) -> AcpSession:
        self._refuse_without_key()
        refusal = tree_refusal(cwd, self.env)
        if refusal is not None:
            raise WireError.invalid_params({"cwd": refusal})
        tables = mcp_tables(mcp_servers)
        owner = AcpSession(self.conn, cwd, sources=self.endpoint.sources)  # the fix lines' words, as the REPL's
        files = ClientFiles(self.conn, "") if self._client_files else None  # both, or dsh's own (acp_session.py)
        session = self.endpoint.session(self.config, self.env, approve=owner.frontend.ask_approval, cwd=cwd,
                                        files=files, mcp_servers=tables)
        owner.attach(session)
        try:
            await self._tasks.start(owner.run, session, resume)
        except StartupError as exc:
            cause = exc.__cause__ or exc
            line = clean(f"dsh: failed to start: {error_chain(cause)}", Redactor(session.secrets))
            if isinstance(cause, HarnessError) and cause.code == ErrorCode.SESSION_NOT_FOUND:
                raise WireError(NOT_FOUND, line, {"sessionId": clean(resume or "")}) from None
            raise WireError(TURN_FAILED, line) from None
        if files is not None:
            files.session_id = owner.id
        self.sessions[owner.id] = owner
        return owner

    async def new_session(self, params: Mapping[str, Any]) -> dict[str, Any]:
        owner = await self._open(read_str(params, "cwd"), read_list(params, "mcpServers"), None)
        return {"sessionId": owner.id, "modes": _modes(owner)}

    async def load_session(self, params: Mapping[str, Any]) -> dict[str, Any]:
        cwd, session_id = read_str(params, "cwd"), read_str(params, "sessionId")
        servers = read_list(params, "mcpServers")
        if not SAFE_ID.match(session_id) or session_id.endswith(SUFFIX) or session_id == "last":
            # The CLI's --resume also takes a path or "last"; a client names a session dsh answered it.
            raise WireError(NOT_FOUND, "dsh: failed to start: session/load takes a dsh session id, not a path",
                            {"sessionId": clean(session_id)})
        if session_id in self.sessions:
            raise WireError(NOT_FOUND, "this session is already open on this connection")
        owner = await self._open(cwd, servers, session_id)
        await owner.replay()
        return {"modes": _modes(owner)}

    async def set_session_mode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The permission mode of the session; its next tool call gets it (docs/safety.md)."""
        permissions = _permissions(self._session(read_str(params, "sessionId")))
        mode = parse_mode(read_str(params, "modeId"))
        if mode is None:
            raise WireError.invalid_params({"modeId": f"not a mode (modes: {', '.join(PERMISSION_MODES)})"})
        refusal = permissions.set(mode)
        if refusal is not None:
            raise WireError.invalid_params({"modeId": refusal})
        return {}

    def _session(self, session_id: str) -> AcpSession:
        owner = self.sessions.get(session_id)
        if owner is None:
            raise WireError(NOT_FOUND, "no such session on this connection", {"sessionId": clean(session_id)})
        return owner

    async def prompt(self, params: Mapping[str, Any]) -> dict[str, Any]:
        owner = self._session(read_str(params, "sessionId"))
        return await owner.prompt(read_list(params, "prompt"))

    def cancel(self, session_id: str) -> None:
        owner = self.sessions.get(session_id)
        if owner is not None:
            owner.cancel()

    async def aclose(self) -> None:
        for owner in list(self.sessions.values()):
            with contextlib.suppress(Exception):
                await owner.aclose()


_MODE_NAMES = {
    Mode.DEFAULT: ("Default", "Ask before each shell command and edit"),
    Mode.ACCEPT_EDITS: ("Accept edits", "Edits inside the project apply without asking; shell commands still ask"),
    Mode.PLAN: ("Plan", "Read-only: edits, writes, shell commands, subagents and MCP tools that may write are refused"),
    Mode.AUTO: ("Auto", "Shell commands (sandboxed) and edits inside the project run without asking"),
}


def _permissions(owner: AcpSession) -> Permissions:
    assert owner.session is not None  # attached before the session is answered
    return owner.session.permissions


def _modes(owner: AcpSession) -> dict[str, Any]:
    """The modes a client may pick (auto only with a sandbox, as Shift+Tab offers them) and the current one."""
    permissions = _permissions(owner)
    available = [{"id": str(mode), "name": _MODE_NAMES[mode][0], "description": _MODE_NAMES[mode][1]}
                 for mode in CYCLE if mode is not Mode.AUTO or permissions.auto_allowed]
    return {"currentModeId": str(permissions.mode), "availableModes": available}


async def serve(config: Config, env: dict[str, str], options: LaunchOptions, missing_key: str | None) -> int:
    # Frames go to the real stdout; fd 1 (and with it sys.stdout) now points at stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    writer, reader = await stdio_streams(out_fd)
    # The endpoint (the demo's embedded server runs a task group of its own) opens before the turns' group and
    # closes after it: a scope entered inside that group and left after it would not nest.
    async with contextlib.AsyncExitStack() as stack:
        endpoint = await open_endpoint(stack, options, config)
        async with anyio.create_task_group() as tasks:
            conn = AgentConnection(ClientFrames(reader, writer), tasks, Redactor(config.secrets))
            agent = DshAgent(config, env, endpoint=endpoint, conn=conn, missing_key=missing_key, tasks=tasks)
            # Until the client closes stdin, or SIGTERM / SIGHUP (a client's shutdown ladder: ACP clients close stdin,
            # wait, then send SIGTERM). Either way the sessions close below, their turns end and their children
            # (MCP servers, subagents) go through their own ladders; the receiver stays open meanwhile, so a SIGTERM
            # that arrives during that does not cut it short and orphan them.
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as received:
                try:
                    async with anyio.create_task_group() as until:
                        async def listen() -> None:
                            await conn.listen(agent.handle)
                            until.cancel_scope.cancel()

                        async def signals() -> None:
                            async for _ in received:
                                until.cancel_scope.cancel()

                        until.start_soon(listen)
                        until.start_soon(signals)
                finally:
                    await agent.aclose()
                    conn.close()
                    tasks.cancel_scope.cancel()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh acp",
        description="dsh as an ACP agent on stdio, for editors and ACP clients (docs/editors.md).",
        epilog="The endpoint is the REPL's: flags, then DEEPSEEK_API_KEY / DEEPSEEK_BASE_URL / DSH_MODEL, then "
        "config.toml. Logs go to dsh.log.",
    )
    parser.add_argument("--demo", action="store_true", help="no key, no network: the embedded scripted endpoint")
    parser.add_argument("--scenario", metavar="NAME", help="demo scenario (implies --demo)")
    add_endpoint_flags(parser)
    parser.add_argument("--permission-mode", dest="permission_mode", choices=PERMISSION_MODES,
                        help="the sessions' permission mode (docs/safety.md); the client may change it")
    return parser


def _load(args: argparse.Namespace, env: Mapping[str, str], keyless: bool) -> tuple[Config, str | None]:
    """The config, and the REPL's start-up line when no key is set (session/new answers with it) and the endpoint
    needs one (``keyless``: an endpoint of dsh's own)."""
    flags = {"model": args.model, "base_url": args.base_url, "proxy": args.proxy, "max_tokens": args.max_tokens,
             "thinking": args.thinking, "reasoning_effort": args.reasoning_effort, "dialect": args.dialect,
             "permission_mode": args.permission_mode, "profile": args.profile}
    path = Path(args.config) if args.config else None
    config = load_config(flags, env, require_key=False, config_path=path)
    if config.sandbox is not None:
        check_sandbox(config)  # as the REPL: a configured sandbox works, or dsh does not start (docs/safety.md)
    if keyless:
        return config, None
    try:
        load_config(flags, env, require_key=True, config_path=path)
    except ConfigError as exc:
        return config, f"dsh: failed to start: {exc}"
    return config, None


def main(argv: list[str], env: dict[str, str], *, setup_logging: SetupLogging,
         stderr: Callable[[str], None]) -> int:
    """``dsh acp [flags]`` (without ``acp``): serve until stdin ends; 2 for bad usage or config."""
    args = _parser().parse_args(argv)
    options = LaunchOptions(demo=args.demo or bool(args.scenario), scenario=args.scenario)
    env_secrets = tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s)
    try:
        config, missing_key = _load(args, env, options.own_endpoint)
        options, config = check_endpoint(options, config)
        config, untrusted = trust_gate(config, env, None)  # never asks: an untrusted project's hooks do not run
        for line in untrusted:
            stderr(f"dsh: warning: {line}")
    except ConfigError as exc:
        stderr(f"dsh: failed to start: {Redactor(env_secrets)(error_chain(exc))}")
        return 2
    setup_logging(env, (*config.secrets, *env_secrets))
    for warning in config.warnings:
        log.warning("%s", warning)
    try:
        return asyncio.run(serve(config, env, options, missing_key))
    except KeyboardInterrupt:
        return 130
