"""One main agent and what it keeps between turns, with no I/O: the core that every front end drives.

A :class:`Session` owns the model client, the session log, the subagent toolkit and the agent built over
them; it runs turns and compactions, sums usage, and remembers what ``/why``, ``/retry`` and ``/expand``
need. It writes nothing to any screen or stream: a front end subscribes to it and renders what it hears,
the agent's events and the session's own :class:`Notice` lines (docs/architecture.md, "Front ends over
one session").

The agent, its tools, the session log and the HTTP client are imported when they are first built, not
with this module: the interactive front end draws its first prompt before it needs them.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dsh.agent_loop.events import AssistantMessage, ContextCompacted, Event, JobNotice, ToolResult, TurnEnd, TurnStart
from dsh.agent_loop.permissions import Mode, Permissions
from dsh.agent_loop.project import project_root
from dsh.agent_loop.reasons import EndReason, Failed, failure_from_exception
from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.session_config import Approver, EndpointClient, SessionConfig
from dsh.agent_loop.session_id import new_session_id
from dsh.agent_loop.usage import AUTO_COMPACT_AT, UsageTally, context_fill, estimate_tokens
from dsh.llm import ErrorCode, HarnessError, LlmError, error_chain, redact_text, redact_url
from dsh.llm.models import model_info

if TYPE_CHECKING:
    from dsh.agent_loop.agent import Agent, Conversation
    from dsh.agent_loop.context import ProjectContext
    from dsh.agent_loop.frames import FrameLog
    from dsh.agent_loop.mcp import McpManager
    from dsh.agent_loop.recap import Recap
    from dsh.agent_loop.session_log import SessionInfo, SessionLog
    from dsh.agent_loop.subagent.tool import SubagentToolkit
    from dsh.agent_loop.tools import FileAccess, Tool
    from dsh.agent_loop.update_pump import UpdatePump

_log = logging.getLogger("dsh.session")
T = TypeVar("T")

__all__ = [
    "Approver",
    "EndpointClient",
    "Notice",
    "PromptTransform",
    "RepairedTurn",
    "Session",
    "SessionConfig",
    "SessionUpdate",
    "StartupError",
    "TurnScope",
]


class StartupError(HarnessError):
    """The main agent could not be built; ``__cause__`` holds why."""

    def __init__(self, cause: BaseException) -> None:
        code = cause.code if isinstance(cause, HarnessError) else ErrorCode.STARTUP
        super().__init__(error_chain(cause), code, cause=cause)


@dataclass(frozen=True, slots=True)
class Notice:
    """A line about the session itself, not a turn's event: a subagent hint, a project-context note, a log
    that loaded with warnings, a compaction that did not happen. Plain text; the front end sanitizes it."""

    text: str


@dataclass(frozen=True, slots=True)
class RepairedTurn:
    """The session log's repair just closed turn ``turn``: the process that ran it exited before its end."""

    turn: int


SessionUpdate = Event | Notice | RepairedTurn  # what a subscriber hears
TurnScope = Callable[[], contextlib.AbstractAsyncContextManager[None]]  # wraps each turn (a live view, say)
ExtraTools = Callable[["Session"], "Sequence[Tool]"]
PromptTransform = Callable[[str], str]  # the user's prompt -> the text the model is sent


@contextlib.asynccontextmanager
async def _no_scope() -> AsyncIterator[None]:
    yield


class Session:
    """The main agent of one front end, its log, client, subagent toolkit, usage and last failure."""

    def __init__(
        self,
        config: SessionConfig,
        *,
        sessions_root: Path | None,
        env: Mapping[str, str] | None = None,
        client: EndpointClient | None = None,
        retry: RetryPolicy | None = None,
        approve: Approver | None = None,
        subagent_tables: Mapping[str, Mapping[str, Any]] | None = None,
        parent_base_url: str | None = None,
        user_dir: Path | None = None,
        extra_tools: ExtraTools | None = None,
        label: str = "main",
        cwd: str | None = None,
        project_context: bool = True,
        allow_mcp: bool = False,
        files: FileAccess | None = None,
        mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
        prompt_transform: PromptTransform | None = None,
    ) -> None:
        """``sessions_root`` None keeps no session log (the child runtime: its parent keeps the record).

        ``approve`` answers shell commands and edits; without it nobody can, and the tools say so.
        ``subagent_tables`` come before the config's ``[subagents.*]`` (the demo's own), and
        ``parent_base_url`` is the endpoint subagents are told about (the config's by default).
        ``allow_mcp`` lets MCP tools that would ask run without asking (``--allow-mcp``; docs/mcp.md).
        ``files`` is where the file tools read and write inside the tree when not the local disk (an editor's
        buffers under ``dsh acp``; agent_loop/tools/file_access.py). ``mcp_servers`` are more
        ``[mcp_servers.NAME]``-shaped tables beside the config's (an ACP client's ``mcpServers``).
        ``prompt_transform`` gives, just before each turn, the text the model is sent for the user's prompt (the
        demo sets its scenario up there); ``/retry`` sends the user's again.
        """
        self.config = config
        self.env = dict(os.environ if env is None else env)
        self.sessions_root = sessions_root
        self.client = client
        if retry is None:
            retry = RetryPolicy() if config.max_retries is None else RetryPolicy(max_retries=config.max_retries)
        self.retry = retry
        self.model = config.model
        self.cwd = cwd or os.getcwd()
        self._approve = approve
        # The permission mode, shared with the agent's tools (read at each call) and changed by the front end
        # (Shift+Tab, ACP's session/set_mode); it outlives /new and /resume. auto only with a sandbox, which
        # the front end checked works before the session was made (docs/safety.md).
        self.permissions = Permissions(Mode(config.permission_mode), auto_allowed=config.sandbox is not None)
        self._subagent_tables = {**(subagent_tables or {}), **config.subagents}
        self._parent_base_url = parent_base_url or config.base_url
        self._user_dir = user_dir
        self._extra_tools = extra_tools
        self._label = label
        self._project_context = project_context
        self._prompt_transform = prompt_transform
        self.agent: Agent | None = None
        self.log: SessionLog | None = None
        self.toolkit: SubagentToolkit | None = None
        self._toolkit_scope = contextlib.AsyncExitStack()
        # The front end's ``[mcp_servers.NAME]``-shaped tables, read beside the config's servers (read at load) when
        # the manager is opened by open_mcp().
        self._mcp_tables: dict[str, Any] = dict(mcp_servers or {})
        self._files = files
        self._allow_mcp = allow_mcp
        self.mcp: McpManager | None = None
        self._mcp_opened = False
        self._mcp_secret_values: tuple[str, ...] | None = None
        # The JSON-RPC frames of the children started for this session, as closed facts (/report reads it);
        # made when the first child can start (subagents or MCP servers configured).
        self.frames: FrameLog | None = None
        self._new_session_id: str | None = None  # named by start(defer_agent=True), created on first need
        self._subscribers: list[Callable[[SessionUpdate], None]] = []
        self._unsubscribe_agent: Callable[[], None] | None = None
        self._resumed: Conversation | None = None  # rebuilt by _open, taken by _attach
        self._cut_notice: str | None = None  # what the resume cut to the window left out, said once
        self._project: str | None = None
        self.recap: Recap | None = None  # the last turns of the session resumed last
        self.context: ProjectContext | None = None  # gathered before the first turn of each session
        self.last_prompt: str | None = None
        self.last_reason: EndReason | None = None
        self.last_failure: BaseException | None = None  # what /why shows
        # The last turn's exchanges in the client's ring: those numbered after the first and up to the
        # second (a failure capsule holds them; docs/reporting.md).
        self.turn_exchanges: tuple[int, int] = (0, 0)
        self.last_tool_result: ToolResult | None = None  # what /expand shows in full
        self.turn_usage = UsageTally()
        self.usage = UsageTally()  # since this process started (``/cost``)
        self.turn_running = False
        self._cancel_pending = False  # a cancel arrived while a turn was being set up

    # --- identity ---------------------------------------------------------------------------------

    @property
    def id(self) -> str | None:
        """The current session's id, also while its log is still to be created."""
        return self.log.id if self.log is not None else self._new_session_id

    @property
    def project(self) -> str:
        """This directory's project (the git work tree, else the cwd): what ``last`` and /sessions scope to."""
        if self._project is None:
            self._project = str(project_root(Path(self.cwd)))
        return self._project

    @property
    def endpoint(self) -> str:
        """The endpoint as the messages name it: never a credential."""
        if self.client is None:  # not built yet: what DeepSeekClient.base_url_display will say
            return redact_url(self.config.base_url.rstrip("/"))
        return self.client.base_url_display

    def subscribe(self, callback: Callable[[SessionUpdate], None]) -> Callable[[], None]:
        """Hear every event of the main agent (whichever agent that is after /new or /resume) and notice."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def pump_updates(self, pump: UpdatePump[T],
                     translate: Callable[[SessionUpdate], Iterable[T]]) -> Callable[[], None]:
        """Every update, as the items ``translate`` makes of it (none, one or more), sent into ``pump`` in order: the
        wire of ``dsh acp`` and ``dsh serve --stdio`` (agent_loop/update_pump.py). Returns the unsubscribe."""

        def feed(update: SessionUpdate) -> None:
            for item in translate(update):
                pump.send(item)

        return self.subscribe(feed)

    def _publish(self, update: SessionUpdate) -> None:
        for callback in list(self._subscribers):
            callback(update)

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self, resume: str | None = None, *, defer_agent: bool = False,
                    session_id: str | None = None) -> None:
        """Open the toolkit and a resumed or new session log; StartupError on failure.

        With ``defer_agent`` the client, the agent and a new session's log are built by
        :meth:`ensure_agent` instead, called by the first turn at the latest; the new session is named
        now (:attr:`id`): ``session_id`` when the front end already showed one. A session to resume is
        still opened (and repaired) here.
        """
        try:
            await self._open_toolkit()
            if not defer_agent:
                await self.open_mcp()
            if resume is not None:
                self.log = self._open(resume)
            elif defer_agent:
                self._new_session_id = session_id or new_session_id()
            else:
                self.log = self._create()
            if not defer_agent:
                self._attach(self.log)
        except StartupError:
            raise
        except Exception as exc:
            raise StartupError(exc)
        self._report_repair()

    async def _open_toolkit(self) -> None:
        """``[subagents.NAME]`` tables -> the subagent and job tools, held open until :meth:`aclose`."""
        if not self._subagent_tables:
            return
        from dsh.agent_loop import build  # the agent's modules: imported behind the first prompt

        self.frames = self.frames or build.FrameLog()
        toolkit = build.subagent_toolkit(self._subagent_tables, model=self.model, base_url=self._parent_base_url,
                                         api_key=self.config.api_key, cwd=self.cwd, secrets=self.config.secrets,
                                         frames=self.frames)
        self.toolkit = await self._toolkit_scope.enter_async_context(toolkit)
        for hint in toolkit.hints:
            self._publish(Notice(hint))

    async def open_mcp(self) -> None:
        """``[mcp_servers.NAME]`` tables -> the MCP manager, its servers starting in the background (a turn
        waits for them, docs/mcp.md); once per session, from the task that will close it. :meth:`start` calls
        it unless the agent is deferred: then the front end does, once the first prompt is drawn, and the first
        turn at the latest. A bad table is a StartupError naming it."""
        if self._mcp_opened or not self._has_mcp:
            return
        self._mcp_opened = True
        from dsh.agent_loop import build  # the agent's modules: imported behind the first prompt

        self.frames = self.frames or build.FrameLog()
        try:
            servers = build.mcp_servers(self.config.mcp_servers, self._mcp_tables)
            manager = build.mcp_manager(servers, env=self.env, secrets=self.config.secrets,
                                        notice=lambda text: self._publish(Notice(text)),
                                        on_failure=self._mcp_failed, allow_mcp=self._allow_mcp, frames=self.frames)
            self.mcp = await self._toolkit_scope.enter_async_context(manager)
        except Exception as exc:
            raise StartupError(exc)

    def _mcp_secrets(self) -> tuple[str, ...]:
        """The MCP tables' secrets, known before the manager opens (the agent may be built first)."""
        if self._mcp_secret_values is None:
            if not self._has_mcp:
                self._mcp_secret_values = ()
            else:
                from dsh.agent_loop import build  # the agent's modules: imported behind the first prompt

                servers = build.mcp_servers(self.config.mcp_servers, self._mcp_tables)
                self._mcp_secret_values = build.mcp_secrets(servers, self.env)
        return self._mcp_secret_values

    @property
    def _has_mcp(self) -> bool:
        return bool(self.config.mcp_servers or self._mcp_tables)

    def _mcp_failed(self, record: BaseException) -> None:
        self.last_failure = record  # /why: the server's line, its masked words, the raw cause beneath

    async def sync_mcp_tools(self) -> None:
        """Before a turn: wait for servers still starting (each at most its startup_timeout), then give the
        agent the tools of the ready ones (a failed server's are gone, a changed listing replaces the old)."""
        if self.mcp is None or self.agent is None:
            return
        await self.mcp.wait_ready()
        tools = self.agent.tools
        current = {tool.name: tool for tool in self.mcp.tools()}
        for name in tools.names:
            if name.startswith("mcp__") and name not in current:
                tools.remove(name)
        for tool in current.values():
            tools.add(tool, replace=True)

    def _open(self, ident: str) -> SessionLog:
        """Open a log to continue, its conversation rebuilt in the same pass (kept for :meth:`_attach`).

        ``last`` is this project's latest session with turns, never the current one; the pass also
        gathers the recap (:attr:`recap`), and ``/retry`` gets the last prompt.
        """
        from dsh.agent_loop import build  # the agent's modules: imported behind the first prompt

        info = model_info(self.model, self.config.models)
        window = (info.context_window or 0) if info is not None else 0  # 0: unknown
        log, self._resumed, recap = build.open_log(ident, self._root(), project=self.project, current=self.id,
                                                   window=window)
        self.recap = recap
        if recap.last_prompt is not None:
            self.last_prompt = recap.last_prompt
        dropped = self._resumed.resume_dropped
        self._cut_notice = None if not dropped else (
            f"dsh: this session is longer than twice the model's context window: the next request holds its "
            f"newest {len(self._resumed.messages)} messages; the {dropped} older ones stay in the log")
        return log

    def saved_sessions(self, project: str | None) -> list[SessionInfo]:
        """The saved sessions of ``project`` (every project's with None), oldest first."""
        from dsh.agent_loop import build  # the log's reader: imported behind the first prompt

        return build.saved_sessions(self._root(), project)

    def _root(self) -> Path:
        if self.sessions_root is None:
            raise HarnessError("this session keeps no log", ErrorCode.CONFIG)
        return self.sessions_root

    def _create(self) -> SessionLog | None:
        if self.sessions_root is None:
            return None
        from dsh.agent_loop import build  # the agent's modules: imported behind the first prompt

        return build.create_log(self.sessions_root, cwd=self.cwd, session_id=self._new_session_id,
                                project=self.project)

    def ensure_agent(self) -> Agent:
        """The main agent, built now if :meth:`start` deferred it; StartupError if it cannot be."""
        if self.agent is None:
            try:
                self._attach(self.log if self.log is not None else self._create())
            except Exception as exc:
                raise StartupError(exc)
        assert self.agent is not None
        return self.agent

    def _attach(self, log: SessionLog | None) -> None:
        """Bind a fresh agent to ``log`` (the previous agent must already be closed)."""
        from dsh.agent_loop import build  # the agent's modules: imported behind the first prompt

        if self.client is None:
            self.client = build.deepseek_client(self.config, self.env)
        self.log = log
        extra = [*(self.toolkit.tools() if self.toolkit is not None else ()),
                 *(self._extra_tools(self) if self._extra_tools is not None else ())]
        conversation, self._resumed = self._resumed, None
        agent = build.build_agent(self.config, self.client, log, conversation=conversation, model=self.model,
                                  approve=self._approve, extra_tools=extra, retry=self.retry, label=self._label,
                                  cwd=self.cwd, extra_secrets=self._mcp_secrets(), files=self._files,
                                  permissions=self.permissions)
        if self.sessions_root is not None:  # the journal's key is dsh's, wherever the log is (docs/safety.md)
            from dsh.agent_loop.journal import journal_key_file

            agent.journal_key = journal_key_file(self.sessions_root)
        self.agent = agent
        self._unsubscribe_agent = agent.subscribe(self._on_event)

    def _report_repair(self) -> None:
        """A turn the log repair just closed is reported before anything else, then load warnings.

        The warnings are one notice; each detail goes to dsh.log (docs/configuration.md).
        """
        log = self.log
        if log is None:
            return
        if log.repaired_turn is not None:
            self._publish(RepairedTurn(log.repaired_turn))
        if self._cut_notice is not None:  # docs/architecture.md, "The session log": the cut to the window
            self._publish(Notice(self._cut_notice))
            self._cut_notice = None
        if log.load_summary is not None:
            for warning in log.load_warnings:
                _log.warning("%s", warning)
            self._publish(Notice(f"dsh: warning: {log.load_summary}"))

    async def _detach(self) -> None:
        if self._unsubscribe_agent is not None:
            self._unsubscribe_agent()
            self._unsubscribe_agent = None
        agent, self.agent = self.agent, None
        if agent is not None:
            await agent.aclose()

    async def aclose(self) -> None:
        self.toolkit = None
        self.mcp = None
        with contextlib.suppress(Exception):  # background jobs and MCP servers end with the session that owns them
            await self._toolkit_scope.aclose()
        await self._detach()
        if self.log is not None and not self.log.closed:
            self.log.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()

    async def new_session(self) -> str | None:
        """``/new``: close this conversation and start an empty one in a new log."""
        agent = self.ensure_agent()
        agent.new_session()
        self.log = agent.session
        self.last_failure = None
        return self.id

    async def resume(self, ident: str) -> str:
        """``/resume ID``: continue another session (its open turn, if any, is closed and reported)."""
        resumed = self._resumed
        try:
            log = self._open(ident)  # raises before we let go of the current one
        except BaseException:
            self._resumed = resumed
            raise
        await self._detach()
        if self.log is not None and not self.log.closed:
            self.log.close()
        self._attach(log)
        self._report_repair()
        return log.id

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every value this session masks: the configuration's and its MCP servers' (a header's ``${VAR}``)."""
        return (*self.config.secrets, *self._mcp_secrets())

    def set_model(self, name: str) -> None:
        """``/model NAME``: the next request uses it."""
        self.model = name
        if self.agent is not None:
            self.agent.model = name

    # --- events -----------------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if isinstance(event, TurnStart):
            self.turn_usage = UsageTally()
            if self._cancel_pending and self.agent is not None:
                self._cancel_pending = False
                self.agent.cancel("cancelled")  # a cancel that came before the agent's turn existed
        elif isinstance(event, AssistantMessage):
            self._count_usage(event)  # without usage too: a request whose tokens are unknown
        elif isinstance(event, ToolResult):
            self.last_tool_result = event
            if event.cause is not None:  # a failed subagent run: /why shows its host-side chain
                self.last_failure = event.cause
        elif isinstance(event, JobNotice):
            event = self._settled_job(event)
        elif isinstance(event, ContextCompacted):
            self._count_compaction(event)
        self._publish(event)

    def _settled_job(self, event: JobNotice) -> JobNotice:
        """A job settled: a failure's raw cause becomes /why's, and subscribers hear the notice in the
        user's words (the model keeps the event's own text)."""
        if self.toolkit is None:
            return event
        from dsh.agent_loop import build  # loaded with the toolkit already

        notice, cause = build.settled_notice(self.toolkit, event)
        if cause is not None:
            self.last_failure = cause
        return notice

    def _count_compaction(self, event: ContextCompacted) -> None:
        """The summary request costs like any other; afterwards the window holds about the new conversation."""
        self._count_usage(event)
        if self.agent is not None and self.usage.requests:
            # Applied before subscribers hear of it: the agent's messages are the compacted ones already.
            left = estimate_tokens("".join(message.content for message in self.agent.messages))
            for tally in (self.usage, self.turn_usage):
                tally.context, tally.context_estimated = left, True

    def _count_usage(self, event: AssistantMessage | ContextCompacted) -> None:
        info = model_info(self.model, self.config.models)
        now = datetime.datetime.now(datetime.UTC)
        self.turn_usage.add(event.usage, self.model, info, now)
        self.usage.add(event.usage, self.model, info, now)

    def context_fill(self) -> float | None:
        """How full the model's window is after the latest request; None when unknown."""
        return context_fill(self.usage, self.config.models)

    def compaction_due(self) -> bool:
        """With ``auto_compact`` on, a prompt sent this close to the window's end is preceded by a compaction."""
        fill = self.context_fill()
        return self.config.auto_compact and fill is not None and fill >= AUTO_COMPACT_AT

    # --- turns ------------------------------------------------------------------------------------

    def cancel_turn(self) -> None:
        if self.agent is not None and self.turn_running and not self.agent.cancel("cancelled"):
            # The turn is being set up (a live view, the prompt guard) and the agent has no scope yet:
            # cancel it as soon as it starts instead of losing the request.
            self._cancel_pending = True

    @contextlib.asynccontextmanager
    async def _running(self, scope: TurnScope | None) -> AsyncIterator[None]:
        """While a turn or a compaction runs: cancellable (:meth:`cancel_turn`), inside the front end's scope."""
        self.turn_running = True
        self._cancel_pending = False
        try:
            async with (scope or _no_scope)():
                yield
        finally:
            self.turn_running = False
            self._cancel_pending = False

    async def ensure_context(self) -> ProjectContext | None:
        """The project context of this session, gathered once and set as the agent's system prompt."""
        agent = self.ensure_agent()
        if not self._project_context:
            return None
        if self.context is None:
            from dsh.agent_loop.context import gather_project_context  # ~10 ms: not before the first prompt

            self.context = await gather_project_context(
                Path(self.cwd), env=self.env, user_dir=self._user_dir, replace=self.config.system_prompt,
                append=self.config.system_prompt_append, redactor=agent.redactor,
            )
            for notice in self.context.notices:
                self._publish(Notice(f"[context] {notice}"))
        if agent.system_prompt is None:
            agent.set_system_prompt(self.context.system_prompt())
        return self.context

    async def run_turn(self, prompt: str, *, scope: TurnScope | None = None,
                       compact_scope: TurnScope | None = None) -> EndReason:
        """The whole turn of ``prompt``, every front end's one call: a compaction first (inside ``compact_scope``)
        when the window is nearly full (:meth:`compaction_due`; a failure is a :class:`Notice`, the turn runs
        anyway), the prompt transform, then the turn inside ``scope``; how it ended."""
        if self.compaction_due():
            await self.compact("", scope=compact_scope)
        sent = prompt if self._prompt_transform is None else self._prompt_transform(prompt)
        agent = self.ensure_agent()
        await self.ensure_context()
        await self.open_mcp()
        await self.sync_mcp_tools()
        self.last_prompt = prompt
        # Undos the model has not heard of (since the last turn, or before a resume): a note before the prompt,
        # in the log with it. Told once a prompt carrying it stays in the conversation (a turn that failed
        # before any answer withdraws its prompt: the next one carries the note again).
        journal = agent.journal
        note, undos = journal.untold() if journal is not None else (None, 0)
        if note is not None:
            sent = f"{note}\n\n{sent}"
        first = self._exchanges_so_far()
        async with self._running(scope):
            try:
                end = await agent.run_turn(sent)
            except Exception as exc:  # the loop promises not to raise; if it does, still say why
                end = failure_from_exception(exc, 0, self.secrets)
                self.last_failure = exc
                self._publish(TurnEnd(agent.turn_number, end))
            else:
                self._note_failure(end, agent)
            finally:
                self.turn_exchanges = (first, self._exchanges_so_far())
        if journal is not None and note is not None and any(
                message.role == "user" and message.content.startswith(note) for message in agent.messages):
            journal.told(undos)
        self.last_reason = end
        return end

    async def undo(self, turns: int) -> list[str]:
        """``/undo`` (1) and ``/rewind N``: revert the files of the last ``turns`` turns that changed files,
        newest first; the lines that say what happened (agent_loop/journal.py, docs/safety.md)."""
        if self.turn_running:
            raise HarnessError("cannot undo while a turn is running", ErrorCode.TURN_BUSY)
        import anyio.to_thread  # with the agent's modules, behind the first prompt

        from dsh.agent_loop.undo import undo_turn

        agent = self.ensure_agent()
        journal = agent.journal
        if journal is None:
            return ["nothing to undo: this session keeps no log, so no journal of its edits"]
        available = await anyio.to_thread.run_sync(journal.undoable_turns)
        dropped = journal.dropped_turns()
        untrusted = journal.untrusted_entries
        past_cap = (f"; turn{'s' if len(dropped) != 1 else ''} {_turn_list(dropped)} changed files but "
                    f"{'are' if len(dropped) != 1 else 'is'} past the journal's cap, so "
                    f"{'their' if len(dropped) != 1 else 'its'} changes cannot be undone") if dropped else ""
        if not available and untrusted:
            return [f"nothing to undo: this session's undo journal was not written by this dsh ({_unsigned(untrusted)}"
                    f": copied from elsewhere, or written by a dsh before journals were signed); nothing reverted"]
        if not available:
            return [f"nothing to undo: no turn of this session has file changes left to undo{past_cap}"]
        lines: list[str] = []
        chosen = available[:turns]
        for turn in chosen:
            report = await undo_turn(journal, turn, self._files, anyio.to_thread.run_sync)
            lines.append(f"undo turn {turn}:")
            lines += [f"  {line}" for line in report.lines]
        if len(chosen) < turns:
            lines.append(f"only {len(chosen)} turn{'s' if len(chosen) != 1 else ''} had file changes left to undo"
                         + past_cap)
        if untrusted:
            lines.append(f"the undo journal also holds {_unsigned(untrusted)}, not written by this dsh: ignored")
        return lines

    def _exchanges_so_far(self) -> int:
        """The number of the client's latest exchange its ring holds (0 with no ring: dsh.llm.exchange_ring)."""
        ring = self.client.ring if self.client is not None else None  # no client yet: no exchange
        return ring.last if ring is not None else 0

    def _note_failure(self, end: EndReason, agent: Agent) -> None:
        if isinstance(end, Failed):
            self.last_failure = agent.last_failure or _reason_error(end)

    async def compact(self, focus: str, *, scope: TurnScope | None = None) -> None:
        """``/compact [focus]``: the summary replaces the conversation, or a :class:`Notice` says why it did not."""
        agent = self.ensure_agent()
        await self.ensure_context()
        self.turn_usage = UsageTally()
        async with self._running(scope):  # cancellable as a turn is
            try:
                await agent.compact(focus or None)
            except HarnessError as exc:
                self.last_failure = exc
                self._publish(Notice(self._compact_failure(exc)))

    def _compact_failure(self, exc: HarnessError) -> str:
        if exc.code == ErrorCode.ABORTED:
            return "[compact cancelled] the conversation is unchanged"
        if exc.code == ErrorCode.COMPACT and str(exc) == "nothing to compact yet":
            return "nothing to compact yet"
        message = redact_text(error_chain(exc), self.secrets).replace("\n", " ")
        return f"[compact failed {exc.code}] {message}; the conversation is unchanged"

    async def deliver_notices(self, *, scope: TurnScope | None = None) -> EndReason | None:
        """Run a turn for background-job notices the model has not seen (an idle owner is woken)."""
        agent = self.agent
        if agent is None or self.turn_running or not agent.pending_notices:
            return None
        async with self._running(scope):
            end = await agent.deliver_notices()
        if end is not None:
            self._note_failure(end, agent)
            self.last_reason = end
        return end


def _unsigned(entries: int) -> str:
    return f"{entries} entr{'ies' if entries != 1 else 'y'} without a valid signature"


def _turn_list(turns: list[int]) -> str:
    """``3``, ``1-4``, ``1, 3``: the turns as a short phrase."""
    if len(turns) > 1 and turns == list(range(turns[0], turns[-1] + 1)):
        return f"{turns[0]}-{turns[-1]}"
    return ", ".join(map(str, turns))


def _reason_error(reason: Failed) -> BaseException:
    """A stand-in for /why when the loop kept no exception (e.g. a failure read back from a log)."""
    return LlmError(reason.message or "turn failed", reason.code or ErrorCode.UNKNOWN)
