"""Codex as a subagent: our own client of ``codex app-server`` over stdio.

Config (``[subagents.NAME]``, ``provider = "codex"``; the ``dsh-agent[codex]`` extra installs the
``openai-codex-cli-bin`` wheel with the real binary)::

    command = ["/usr/local/bin/codex"]     # optional argv prefix; default: the wheel's binary, else PATH
    model = "gpt-5-codex"                  # optional
    sandbox = "read-only"                  # read-only (default) | workspace-write
    turn_timeout = 600                     # seconds; then turn/interrupt and settle
    config = { model_reasoning_effort = "low" }   # `codex -c key=value` overrides
    env = { CODEX_HOME = "/home/me/.codex-sub" }  # explicit child environment entries
    pass_env = ["OPENAI_API_KEY"]          # parent variables passed through by name

The wire format is newline-delimited JSON-RPC *without* the ``jsonrpc`` member. One run is
``initialize`` -> ``initialized`` -> ``thread/start {cwd, ephemeral: true, approvalPolicy: "never",
sandbox}`` -> ``turn/start`` -> notifications until ``turn/completed``. Approval requests are answered
unattended (decline, no authority granted) and recorded. A turn deadline guards against Codex's own
retry loop (a refused upstream makes it retry for minutes): on expiry we send ``turn/interrupt`` and
settle.

Failures are ``Product subagent failure (product: Codex; stage: …; category: …[; HTTP status: …]
[; exit code: …][; signal: …])``: the ``codexErrorInfo`` variant name verbatim (string variants and the
known object variants; the four connection/stream variants add an integer ``httpStatusCode``), our own
closed facts (``process-exit``, ``timeout``, ``configuration``) or ``unknown`` — never the product's message text.
``contextWindowExceeded`` is the stop reason ``max-tokens``; everything else is ``error``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from dsh.agent_loop.jsonrpc import METHOD_NOT_FOUND, JsonRpcConnection, ProtocolError, TransportClosed
from dsh.agent_loop.process import ManagedProcess, ProcessStartError, Teardown
from dsh.agent_loop.subagent import ConfigTable, ParentContext, SubagentConfigError
from dsh.agent_loop.subagent._codex_protocol import (  # Category .. classify_error_info: the provider's own names
    NO_ERROR_INFO,
    OBJECT_VARIANTS,
    STATUS_VARIANTS,
    STRING_VARIANTS,
    UNATTENDED_REPLIES,
    Category,
    Stage,
    TurnState,
    classify_error_info,
    error_words,
)
from dsh.agent_loop.subagent._product import descendants, explicit_env, kill_survivors
from dsh.agent_loop.subagent.diagnostics import Failure, unattended_decision
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.run import Outcome, Provider, Run, configured
from dsh.llm._version import __version__

__all__ = [
    "APPROVAL_POLICY",
    "OBJECT_VARIANTS",
    "PRODUCT",
    "STATUS_VARIANTS",
    "STRING_VARIANTS",
    "Category",
    "CodexConfig",
    "CodexRun",
    "Stage",
    "classify_error_info",
    "from_config",
]

log = logging.getLogger(__name__)

PRODUCT = "Codex"
APPROVAL_POLICY = "never"
SANDBOXES: frozenset[str] = frozenset({"read-only", "workspace-write"})

_HANDSHAKE_STAGES = frozenset({Stage.INITIALIZE, Stage.THREAD_START})
_EXIT_WAIT = 2.0  # the wire broke: how long to wait for the app-server's exit, which then classifies it
_DRAIN_AFTER_EXIT = 0.5  # the app-server exited: how long its last frames may still trickle in
# Local cancellation (Ctrl-C): how long turn/interrupt may take to be confirmed before the teardown ladder
# runs anyway. Short, so a cancelled run settles within a second even when the backend hangs and Codex
# never confirms (docs/subagents.md, "Codex"); the turn deadline's wait is ``interrupt_grace``.
CANCEL_INTERRUPT_GRACE = 0.25
# ... and the teardown ladder's graces after it, unless the table sets them: an app-server that does not exit
# when its stdin closes (0.163 was reported not to) gets SIGTERM after 0.2 s and SIGKILL 0.3 s later, not 2 s and
# 2 s more. Codex keeps nothing of an ephemeral thread that a signal could lose. A normal end keeps 2 s and 2 s.
CANCEL_EOF_GRACE = 0.2
CANCEL_TERM_GRACE = 0.3
_EOF_GRACE = 2.0
_TERM_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class CodexConfig:
    command: tuple[str, ...] | None = None
    model: str | None = None
    sandbox: str = "read-only"
    turn_timeout: float = 600.0
    startup_timeout: float = 60.0
    overrides: tuple[tuple[str, str], ...] = ()  # (key, TOML value) for `-c key=value`
    env: dict[str, str] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    interrupt_grace: float = 5.0  # after turn/interrupt: how long the turn may take to report it
    eof_grace: float | None = None  # None: the ladder's own (2 s; after a cancel CANCEL_EOF_GRACE)
    term_grace: float | None = None  # None: 2 s; after a cancel CANCEL_TERM_GRACE
    system_prompt: str | None = None  # thread/start's developerInstructions (an agent file's body)

    @classmethod
    def from_mapping(cls, name: str, config: Mapping[str, Any]) -> CodexConfig:
        """Raises :class:`SubagentConfigError` (naming the table and key only)."""
        table = ConfigTable.checked(name, config, _CONFIG_KEYS)
        sandbox = table.choice("sandbox", "read-only", SANDBOXES)
        return cls(
            command=table.optional_command(),
            model=table.string("model"),
            sandbox=sandbox or "read-only",
            turn_timeout=table.seconds("turn_timeout", 600.0),
            startup_timeout=table.seconds("startup_timeout", 60.0),
            overrides=_overrides(name, config.get("config", {})),
            env=table.env(),
            pass_env=table.names("pass_env"),
            interrupt_grace=table.seconds("interrupt_grace", 5.0),
            eof_grace=table.number("eof_grace"),
            term_grace=table.number("term_grace"),
            system_prompt=table.string("system_prompt"),
        )


_CONFIG_KEYS = frozenset(
    {"provider", "command", "args", "model", "sandbox", "turn_timeout", "startup_timeout", "config", "env",
     "pass_env", "interrupt_grace", "eof_grace", "term_grace", "system_prompt"}
)  # fmt: skip


def _overrides(name: str, table: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(table, Mapping):
        raise SubagentConfigError(name, "config must be a table")
    pairs: list[tuple[str, str]] = []
    for key, value in table.items():
        if not isinstance(key, str) or not key or any(ch.isspace() or ch == "=" for ch in key):
            raise SubagentConfigError(name, "config keys must be non-empty names without spaces or '='")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(value)
        elif isinstance(value, str):
            text = json.dumps(value)  # a JSON string is a valid TOML basic string
        else:
            raise SubagentConfigError(name, f"config.{key} must be a string, number or boolean")
        pairs.append((key, text))
    return tuple(pairs)


def from_config(name: str, config: Mapping[str, Any], parent: ParentContext | None = None) -> Provider[CodexConfig]:
    """``[subagents.NAME]`` with ``provider = "codex"``. Nothing is inherited from ``parent``.

    Never raises: a bad table gives runs that fail with ``stage: initialize; category:
    configuration`` (the problem, which names only the table and key, goes to the host log now).
    """
    return configured(name, CodexRun, lambda: CodexConfig.from_mapping(name, config))


# -- one run --------------------------------------------------------------------------------------


class _BinaryNotFound(Exception):
    pass


class _BadResponse(Exception):
    """A response that does not have the shape the protocol promises (its content stays host-side)."""




class CodexRun(Run[CodexConfig]):
    product = PRODUCT
    configuration = Failure(Stage.INITIALIZE, Category.CONFIGURATION)

    def __init__(self, provider: Provider[CodexConfig], request: SubagentRequest) -> None:
        super().__init__(provider, request)
        self._turn = TurnState()
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._turn_start_sent = False
        self._turn_id_known = anyio.Event()  # set with _turn_id: a cancel during turn/start waits for it
        self._decision: tuple[str, str] | None = None  # latest unattended decision (request, decision)
        self._interrupt_sent = False
        self._stop_reason = "error"  # of a failed turn: contextWindowExceeded makes it max-tokens
        self.turn_started = anyio.Event()
        self.teardown: Teardown | None = None  # the ladder's rung that ended the app-server (tests read it)

    def partial_output(self) -> str:
        return self._turn.partial_output()

    async def execute(self) -> Outcome:
        try:
            argv, extra_path = self._argv()
        except _BinaryNotFound as exc:
            return self._outcome(Failure(Stage.INITIALIZE, Category.CONFIGURATION, cause=exc), None)
        self.process = ManagedProcess(argv, env=self._child_env(extra_path), cwd=self.request.cwd)
        try:
            await self.process.start()
        except ProcessStartError as exc:  # the command or the working directory does not exist
            return self._outcome(Failure(Stage.INITIALIZE, Category.CONFIGURATION, cause=exc), None)
        cancelled = False
        try:
            failure = await self._drive(self.process)
        except anyio.get_cancelled_exc_class():
            cancelled = True
            raise
        finally:
            with anyio.CancelScope(shield=True):
                teardown = await self._teardown(self.process, cancelled=cancelled)
        return self._outcome(failure, teardown)

    # -- the conversation -----------------------------------------------------------------------

    async def _drive(self, process: ManagedProcess) -> Failure | None:
        assert process.stdout is not None and process.stdin is not None
        async with JsonRpcConnection(
            process.stdout,
            process.stdin,
            on_request=self._on_request,
            on_notification=self._on_notification,
            include_jsonrpc=False,
            name="codex",
            on_frame=self.frame_tap(),
        ) as conn:
            return await self._conversation(conn, process)

    async def _conversation(self, conn: JsonRpcConnection, process: ManagedProcess) -> Failure | None:
        startup = self.settings.startup_timeout
        # initialize -> initialized
        kind, value = await self._race(
            lambda: conn.request("initialize", {"clientInfo": _client_info()}, timeout=startup), None
        )
        if kind != "done":
            return await self._stage_failure(Stage.INITIALIZE, kind, value, process)
        kind, value = await self._race(lambda: conn.notify("initialized"), None)
        if kind != "done":
            return await self._stage_failure(Stage.INITIALIZE, kind, value, process)
        # thread/start
        params: dict[str, Any] = {
            "cwd": self.request.cwd,
            "ephemeral": True,
            "approvalPolicy": APPROVAL_POLICY,
            "sandbox": self.settings.sandbox,
        }
        if self.settings.model:
            params["model"] = self.settings.model
        if self.settings.system_prompt:  # on top of Codex's own instructions, which its tools need
            params["developerInstructions"] = self.settings.system_prompt
        kind, value = await self._race(lambda: self._start_thread(conn, params, startup), None)
        if kind != "done":
            return await self._stage_failure(Stage.THREAD_START, kind, value, process)
        try:
            return await self._turn_of(conn, process)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # local cancellation: ask the turn to stop, briefly, then go
                await self._interrupt(conn, CANCEL_INTERRUPT_GRACE)
            raise

    async def _turn_of(self, conn: JsonRpcConnection, process: ManagedProcess) -> Failure | None:
        """turn/start, then the turn, both under the turn deadline."""
        deadline = anyio.current_time() + self.settings.turn_timeout
        kind, value = await self._race(lambda: self._start_turn(conn), deadline)
        if kind != "done":
            if kind == "deadline" and self._turn.completed.is_set():
                kind = "done"  # the turn ended before its own start was acknowledged: judge it
            else:
                return await self._stage_failure(Stage.TURN_START, kind, value, process)
        self.turn_started.set()
        kind, value = await self._race(lambda: self._until_turn_end(conn), deadline)
        if kind == "done":
            return self._judge_turn()
        if kind == "deadline":
            await self._interrupt(conn, self.settings.interrupt_grace)
            category, status = self._latest_error_category(default=Category.TIMEOUT)
            return Failure(Stage.TURN, category, http_status=status, cause=TimeoutError("turn deadline"),
                           words=self._turn.last_error_words)  # fmt: skip
        return await self._stage_failure(Stage.TURN, kind, value, process)

    async def _start_thread(self, conn: JsonRpcConnection, params: dict[str, Any], timeout: float) -> None:
        result = await conn.request("thread/start", params, timeout=timeout)
        thread = result.get("thread") if isinstance(result, dict) else None
        thread_id = thread.get("id") if isinstance(thread, dict) else None
        if not isinstance(thread_id, str) or not thread_id:
            raise _BadResponse("thread/start result has no thread id")
        self._thread_id = thread_id

    async def _start_turn(self, conn: JsonRpcConnection) -> None:
        params = {"threadId": self._thread_id, "input": [{"type": "text", "text": self.request.prompt}]}
        self._turn_start_sent = True
        result = await conn.request("turn/start", params)
        turn = result.get("turn") if isinstance(result, dict) else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        if not isinstance(turn_id, str) or not turn_id:
            raise _BadResponse("turn/start result has no turn id")
        self._know_turn_id(turn_id)

    def _know_turn_id(self, turn_id: str) -> None:
        if self._turn_id is None:
            self._turn_id = turn_id
            self._turn_id_known.set()

    async def _until_turn_end(self, conn: JsonRpcConnection) -> None:
        if self._turn.completed.is_set():
            return
        async with anyio.create_task_group() as tg:

            async def connection_end() -> None:
                await conn.wait_closed()
                tg.cancel_scope.cancel()

            tg.start_soon(connection_end)
            await self._turn.completed.wait()
            tg.cancel_scope.cancel()
        if not self._turn.completed.is_set():
            raise conn.failure or TransportClosed()

    async def _interrupt(self, conn: JsonRpcConnection, grace: float) -> None:
        """``turn/interrupt`` and a wait of at most ``grace`` seconds for the turn to report it, then settle.

        A cancel that lands while turn/start is in flight has no turn id yet: the app-server has (or
        soon will have) a running turn, so the id is awaited within the same grace, from the
        ``turn/started`` notification that follows the (now dropped) answer.
        """
        if self._thread_id is None or conn.closed or not (self._turn_start_sent or self._turn_id):
            return
        with anyio.move_on_after(grace):
            await self._turn_id_known.wait()
            if conn.closed:
                return
            self._interrupt_sent = True
            try:
                await conn.request("turn/interrupt", {"threadId": self._thread_id, "turnId": self._turn_id})
            except (ProtocolError, TransportClosed):
                return
            await self._until_turn_end(conn)

    async def _race(self, work: Callable[[], Awaitable[Any]], deadline: float | None) -> tuple[str, Any]:
        """Run ``work`` against the app-server's exit and an optional deadline.

        Returns ``("done", value)``, ``("error", exception)`` or ``("deadline", None)``, whichever
        came first (local cancellation simply cancels it).
        """
        outcome: list[tuple[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def run_work() -> None:
                try:
                    outcome.append(("done", await work()))
                except Exception as exc:  # classified by the caller, by type
                    outcome.append(("error", exc))
                tg.cancel_scope.cancel()

            async def run_deadline() -> None:
                assert deadline is not None
                await anyio.sleep_until(deadline)
                outcome.append(("deadline", None))
                tg.cancel_scope.cancel()

            async def run_exit() -> None:
                # The app-server's exit ends the stage even if a grandchild keeps its stdout open; what
                # it wrote just before exiting still gets a moment to arrive.
                assert self.process is not None
                await self.process.wait_exit()
                await anyio.sleep(_DRAIN_AFTER_EXIT)
                outcome.append(("error", TransportClosed("the app-server exited")))
                tg.cancel_scope.cancel()

            tg.start_soon(run_work)
            tg.start_soon(run_exit)
            if deadline is not None:
                tg.start_soon(run_deadline)
        return outcome[0]

    # -- incoming -------------------------------------------------------------------------------

    def _on_notification(self, method: str, params: Any) -> None:
        if not isinstance(params, dict):
            return
        thread_id = params.get("threadId")
        if self._thread_id is None or (thread_id is not None and thread_id != self._thread_id):
            return  # not about our thread (or before we have one)
        turn = self._turn
        if method == "item/completed":
            item = params.get("item")
            if isinstance(item, dict) and item.get("type") == "agentMessage":
                turn.record_message(item)
        elif method == "item/agentMessage/delta":
            item_id, delta = params.get("itemId"), params.get("delta")
            if isinstance(item_id, str) and isinstance(delta, str):
                turn.deltas.setdefault(item_id, []).append(delta)
        elif method == "error":
            error = params.get("error")
            if isinstance(error, dict):
                turn.last_error_info = error.get("codexErrorInfo")
                turn.last_error_words = error_words(error)
        elif method == "turn/started":
            started = params.get("turn")
            if isinstance(started, dict) and isinstance(started.get("id"), str):
                self._know_turn_id(started["id"])
        elif method == "turn/completed":
            completed = params.get("turn")
            turn.completed_turn = completed if isinstance(completed, dict) else {}
            if isinstance(turn.completed_turn.get("id"), str):
                self._know_turn_id(turn.completed_turn["id"])
            for item in turn.completed_turn.get("items") or []:
                if isinstance(item, dict) and item.get("type") == "agentMessage":
                    turn.record_message(item)
            turn.completed.set()

    async def _on_request(self, method: str, params: Any) -> Any:
        reply = UNATTENDED_REPLIES.get(method)
        if reply is None:
            raise ProtocolError("not supported by this client", rpc_code=METHOD_NOT_FOUND)
        request_kind, decision, payload = reply
        self._decision = (request_kind, decision)  # the latest decision wins
        return dict(payload)

    # -- judgement --------------------------------------------------------------------------------

    def _judge_turn(self) -> Failure | None:
        turn = self._turn.completed_turn or {}
        status = turn.get("status")
        if status == "completed":
            if self._turn.answer() is not None:
                return None
            return Failure(Stage.TURN, Category.UNKNOWN)  # completed without a final answer
        if status in ("failed", "interrupted"):
            category, http_status = self._turn_error_category(turn)
            if category is Category.contextWindowExceeded:
                self._stop_reason = "max-tokens"
            error = turn.get("error")
            words = error_words(error) if isinstance(error, dict) else self._turn.last_error_words
            return Failure(Stage.TURN, category, http_status=http_status, words=words)
        return Failure(Stage.TURN, Category.UNKNOWN)

    def _turn_error_category(self, turn: dict[str, Any]) -> tuple[Category, int | None]:
        error = turn.get("error")
        if isinstance(error, dict) and error.get("codexErrorInfo") is not None:
            return classify_error_info(error.get("codexErrorInfo"))
        return self._latest_error_category(default=Category.UNKNOWN)

    def _latest_error_category(self, *, default: Category) -> tuple[Category, int | None]:
        info = self._turn.last_error_info
        if info is NO_ERROR_INFO or info is None:
            return default, None
        return classify_error_info(info)

    async def _stage_failure(self, stage: Stage, kind: str, value: Any, process: ManagedProcess) -> Failure:
        if kind == "deadline":
            return Failure(stage, Category.TIMEOUT, cause=TimeoutError("turn deadline"))
        exc: BaseException = value
        if isinstance(exc, TransportClosed):
            # The wire broke: a dying child is classified by its observed exit.
            status = await process.wait_exit(_EXIT_WAIT)
            if status is not None:
                exit_stage = stage if stage in _HANDSHAKE_STAGES else Stage.PROCESS
                return Failure(exit_stage, Category.PROCESS_EXIT, exit_status=status, cause=exc)
            return Failure(stage, Category.UNKNOWN, cause=exc)
        if (
            isinstance(exc, ProtocolError)
            and exc.rpc_code is not None
            and isinstance(exc.data, dict)
            and "codexErrorInfo" in exc.data
        ):
            category, http_status = classify_error_info(exc.data["codexErrorInfo"])
            return Failure(stage, category, http_status=http_status, exit_status=process.exit_status, cause=exc)
        if isinstance(exc, TimeoutError):
            return Failure(stage, Category.TIMEOUT, exit_status=process.exit_status, cause=exc)
        # a bad frame, an error response without structured info, a malformed result, anything else
        return Failure(stage, Category.UNKNOWN, exit_status=process.exit_status, cause=exc)

    # -- teardown and the outcome -----------------------------------------------------------------

    async def _teardown(self, process: ManagedProcess, *, cancelled: bool) -> Failure | None:
        noted = descendants(process.pid) if process.pid is not None and not process.exited else {}
        eof, term = (CANCEL_EOF_GRACE, CANCEL_TERM_GRACE) if cancelled else (_EOF_GRACE, _TERM_GRACE)
        settings = self.settings
        teardown = await process.terminate(eof_grace=eof if settings.eof_grace is None else settings.eof_grace,
                                           term_grace=term if settings.term_grace is None else settings.term_grace)
        self.teardown = teardown
        if kill_survivors(noted):
            log.debug("codex teardown: killed helpers that left the app-server's process group")
        if teardown.tier in ("sigkill", "unreaped"):  # its stderr's last lines go to the run's record (run.py)
            return Failure(Stage.TEARDOWN, Category.UNKNOWN, exit_status=teardown.exit_status)
        return None

    def _outcome(self, failure: Failure | None, teardown: Failure | None) -> Outcome:
        turn = self._turn
        if failure is None and teardown is None:
            return Outcome("completed", turn.answer() or "")
        decision = (
            unattended_decision(PRODUCT, APPROVAL_POLICY, self._decision[0], self._decision[1])
            if self._decision is not None
            else None
        )
        stop_reason = self._stop_reason if failure is not None else "error"
        return Outcome(stop_reason, turn.partial_output(), failure, teardown, decision)

    # -- the child ------------------------------------------------------------------------------

    def _argv(self) -> tuple[list[str], str | None]:
        extra_path: str | None = None
        if self.settings.command:
            argv = list(self.settings.command)
        else:
            binary, extra_path = _find_codex()
            argv = [binary]
        for key, value in self.settings.overrides:
            argv += ["-c", f"{key}={value}"]
        return [*argv, "app-server", "--listen", "stdio://"], extra_path

    def _child_env(self, extra_path: str | None) -> dict[str, str]:
        env = explicit_env(self.settings.env, self.settings.pass_env, self.request)
        if extra_path and "PATH" not in env:
            # The wheel ships helpers (rg) beside the binary; codex looks for them on PATH.
            env["PATH"] = os.pathsep.join(p for p in (extra_path, os.environ.get("PATH", "")) if p)
        return env


def _find_codex() -> tuple[str, str | None]:
    """The ``openai-codex-cli-bin`` binary (and its helper dir), else ``codex`` on PATH."""
    try:
        import codex_cli_bin  # optional: the dsh-agent[codex] extra, only when no command is set

        binary = str(codex_cli_bin.bundled_codex_path())
        helpers = codex_cli_bin.bundled_path_dir()
        return binary, str(helpers) if helpers is not None else None
    except (ImportError, OSError):
        pass
    found = shutil.which("codex")
    if found:
        return found, None
    raise _BinaryNotFound("codex not found")



def _client_info() -> dict[str, str]:
    return {"name": "dsh", "title": "dsh", "version": __version__}
