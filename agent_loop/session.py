"""One main agent and what it keeps between turns, with no I/O: the core that every front end drives.

A :class:`Session` owns the model client, the session log, the subagent toolkit and the agent built over
them; it runs turns and compactions, sums usage, and remembers what ``/why``, ``/retry`` and ``/expand``
need. It writes nothing to any screen or stream: a front end subscribes to it and renders what it hears,
the agent's events and the session's own :class:`Notice` lines (docs/architecture.md, "Front ends over
one session").

Its state lives in parts, each with one job: the log and the agent bound to it
(:mod:`~dsh.agent_loop.session_lifecycle`), the subagent toolkit and the MCP servers
(:mod:`~dsh.agent_loop.session_children`), the usage (:mod:`~dsh.agent_loop.session_usage`) and what the last
turn leaves for the commands that look back (:mod:`~dsh.agent_loop.turn_memory`). The agent, its tools, the
session log and the HTTP client are imported when they are first built, not with this module: the interactive
front end draws its first prompt before it needs them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from dsh.agent_loop.cache_watch import PrefixTracker
from dsh.agent_loop.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    JobNotice,
    LlmContinue,
    ModelSet,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from dsh.agent_loop.extensions import Extensions
from dsh.agent_loop.image_input import prompt_images
from dsh.agent_loop.mentions import expand_mentions
from dsh.agent_loop.model_check import ModelCheck
from dsh.agent_loop.permissions import Mode, Permissions
from dsh.agent_loop.reasons import EndReason, Rejected, failure_from_exception
from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.session_children import SessionChildren
from dsh.agent_loop.session_config import Approver, EndpointClient, SessionConfig
from dsh.agent_loop.session_extensions import SessionExtensions
from dsh.agent_loop.session_id import new_session_id
from dsh.agent_loop.session_lifecycle import SessionLifecycle
from dsh.agent_loop.session_types import (
    Notice,
    PromptTransform,
    RepairedTurn,
    SessionUpdate,
    StartupError,
    TurnScope,
    no_scope,
)
from dsh.agent_loop.session_usage import SessionUsage
from dsh.agent_loop.turn_memory import TurnMemory, exchanges_so_far
from dsh.agent_loop.usage import UsageTally
from dsh.llm import ErrorCode, HarnessError, Image, redact_url
from dsh.llm.redact import Redactor, environment_secrets
from dsh.llm.request_gate import shared_gate

if TYPE_CHECKING:
    from dsh.agent_loop.agent import Agent
    from dsh.agent_loop.context import ProjectContext
    from dsh.agent_loop.conversation import Conversation
    from dsh.agent_loop.frames import FrameLog
    from dsh.agent_loop.mcp import McpManager
    from dsh.agent_loop.recap import Recap
    from dsh.agent_loop.session_list import SessionInfo
    from dsh.agent_loop.session_log import SessionLog
    from dsh.agent_loop.subagent.tool import SubagentToolkit
    from dsh.agent_loop.tools import FileAccess, Tool
    from dsh.agent_loop.update_pump import UpdatePump

_log = logging.getLogger("dsh.session")
T = TypeVar("T")

ExtraTools = Callable[["Session"], "Sequence[Tool]"]  # more tools for the session's agent (the demo's, say)

__all__ = [
    "Approver",
    "EndpointClient",
    "ExtraTools",
    "Notice",
    "PromptTransform",
    "RepairedTurn",
    "Session",
    "SessionConfig",
    "SessionUpdate",
    "StartupError",
    "TurnScope",
]


class Session:
    """The main agent of one front end, its log, client, subagent toolkit, usage and last failure: the one façade
    over the parts that hold them."""

    def __init__(
        self, config: SessionConfig, *, sessions_root: Path | None, env: Mapping[str, str] | None = None,
        client: EndpointClient | None = None, retry: RetryPolicy | None = None, approve: Approver | None = None,
        subagent_tables: Mapping[str, Mapping[str, Any]] | None = None, parent_base_url: str | None = None,
        user_dir: Path | None = None, extra_tools: ExtraTools | None = None, label: str = "main",
        cwd: str | None = None, project_context: bool = True, allow_mcp: bool = False, files: FileAccess | None = None,
        mcp_servers: Mapping[str, Mapping[str, Any]] | None = None, prompt_transform: PromptTransform | None = None,
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
        self.cwd = cwd or os.getcwd()
        self.model = config.model
        if retry is None:
            retry = RetryPolicy() if config.max_retries is None else RetryPolicy(max_retries=config.max_retries)
        self.retry = retry
        # The permission mode, shared with the agent's tools (read at each call) and changed by the front end
        # (Shift+Tab, ACP's session/set_mode); it outlives /new and /resume. auto only with a sandbox, which
        # the front end checked works before the session was made (docs/safety.md).
        self.permissions = Permissions(Mode(config.permission_mode), auto_allowed=config.sandbox is not None)
        self._approve = approve
        self._files = files
        self._label = label
        self._extra_tools = extra_tools
        self._user_dir = user_dir
        self._project_context = project_context
        self._prompt_transform = prompt_transform
        self._subscribers: list[Callable[[SessionUpdate], None]] = []
        self._memory = TurnMemory()
        self._usage = SessionUsage(config)
        self._children = SessionChildren(
            config, env=self.env, subagent_tables=subagent_tables, parent_base_url=parent_base_url,
            mcp_tables=mcp_servers, allow_mcp=allow_mcp, notice=self._notice, on_failure=self._mcp_failed,
            agent_files=lambda configured: self.extras.agent_tables(configured))  # extras: made just below
        self._life = SessionLifecycle(config, env=self.env, sessions_root=sessions_root, client=client, cwd=self.cwd,
                                      memory=self._memory, new_agent=self._new_agent, on_event=self._on_event)
        self.context: ProjectContext | None = None  # gathered before the first turn of each session
        self.turn_running = False
        self._cancel_pending = False  # a cancel arrived while a turn was being set up
        self.command_scope: anyio.CancelScope | None = None  # a running `!command` (agent_loop/prompt_shell.py)
        self._model_check = ModelCheck()  # the first turn's GET /models (agent_loop/model_check.py)
        # Hooks, skills and custom commands (agent_loop/session_extensions.py), each found at first need.
        self.extras = SessionExtensions(config, cwd=self.cwd, user_dir=user_dir, project=project_context,
                                        redactor=lambda: Redactor((*self.secrets, *environment_secrets(self.env))),
                                        notice=self._notice, session_id=lambda: self.id)

    # --- identity and the parts' state, read through the session ----------------------------------

    @property
    def id(self) -> str | None:
        """The current session's id, also while its log is still to be created."""
        return self._life.id

    @property
    def project(self) -> str:
        """This directory's project (the git work tree, else the cwd): what ``last`` and /sessions scope to."""
        return self._life.project

    @property
    def endpoint(self) -> str:
        """The endpoint as the messages name it: never a credential."""
        if self.client is None:  # not built yet: what DeepSeekClient.base_url_display will say
            return redact_url(self.config.base_url.rstrip("/"))
        return self.client.base_url_display

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every value this session masks: the configuration's and its MCP servers' (a header's ``${VAR}``)."""
        return (*self.config.secrets, *self._children.mcp_secrets())

    @property
    def sessions_root(self) -> Path | None:
        return self._life.sessions_root

    @property
    def client(self) -> EndpointClient | None:
        return self._life.client

    @property
    def agent(self) -> Agent | None:
        return self._life.agent

    @property
    def log(self) -> SessionLog | None:
        return self._life.log

    @property
    def recap(self) -> Recap | None:
        """The last turns of the session resumed last."""
        return self._life.recap

    @property
    def toolkit(self) -> SubagentToolkit | None:
        return self._children.toolkit

    @property
    def mcp(self) -> McpManager | None:
        return self._children.mcp

    @property
    def frames(self) -> FrameLog | None:
        """The JSON-RPC frames of the children started for this session, as closed facts (/report reads it)."""
        return self._children.frames

    @property
    def usage(self) -> UsageTally:
        """Since this process started (``/cost``)."""
        return self._usage.total

    @property
    def turn_usage(self) -> UsageTally:
        return self._usage.turn

    @property
    def spent(self) -> tuple[float, float] | None:
        """The cost so far against ``max_cost`` (a resumed session's included) and the cap; None with no cap."""
        budget = self._usage.budget
        return None if budget is None else (budget.spent(self._usage.total), budget.max_cost)

    @property
    def last_prompt(self) -> str | None:
        return self._memory.last_prompt

    @property
    def last_reason(self) -> EndReason | None:
        return self._memory.last_reason

    @property
    def last_failure(self) -> BaseException | None:
        """What /why shows."""
        return self._memory.last_failure

    @property
    def turn_exchanges(self) -> tuple[int, int]:
        """The last turn's exchanges in the client's ring: those numbered after the first and up to the second."""
        return self._memory.turn_exchanges

    @property
    def last_tool_result(self) -> ToolResult | None:
        """What /expand shows in full."""
        return self._memory.last_tool_result

    # --- updates ----------------------------------------------------------------------------------

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

    def _notice(self, text: str) -> None:
        self._publish(Notice(text))

    def extensions(self) -> Extensions:
        """This project's and user's skills and custom commands (docs/extending.md)."""
        return self.extras.found()

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
            await self._children.open_toolkit(model=self.model, cwd=self.cwd,
                                              request_gate=lambda: shared_gate(self.client))
            if not defer_agent:
                await self.open_mcp()
            if resume is not None:
                self._life.log = self._life.open(resume, self.model)
                self.extras.new_session("resume")
                self._resumed_usage()
            elif defer_agent:
                self._life.name_new(session_id or new_session_id())
            if not defer_agent:
                self._life.attach(self.log)  # a new log when none was opened
        except StartupError:
            raise
        except Exception as exc:
            raise StartupError(exc)
        self._report_repair()

    async def open_mcp(self) -> None:
        """``[mcp_servers.NAME]`` tables -> the MCP manager, its servers starting in the background (a turn
        waits for them, docs/mcp.md); once per session, from the task that will close it. :meth:`start` calls
        it unless the agent is deferred: then the front end does, once the first prompt is drawn, and the first
        turn at the latest. A bad table is a StartupError naming it."""
        try:
            await self._children.open_mcp()
        except Exception as exc:
            raise StartupError(exc)

    def _mcp_failed(self, record: BaseException) -> None:
        self._memory.last_failure = record  # /why: the server's line, its masked words, the raw cause beneath

    def saved_sessions(self, project: str | None) -> list[SessionInfo]:
        """The saved sessions of ``project`` (every project's with None), oldest first."""
        return self._life.saved_sessions(project)

    def ensure_agent(self) -> Agent:
        """The main agent, built now if :meth:`start` deferred it; StartupError if it cannot be."""
        agent = self.agent
        if agent is None:
            try:
                agent = self._life.attach(self.log)  # a new log when none was opened
            except Exception as exc:
                raise StartupError(exc)
        return agent

    def _new_agent(self, client: EndpointClient, log: SessionLog | None, conversation: Conversation | None) -> Agent:
        """An agent over ``log`` with this session's tools, approver and secrets (the lifecycle binds it)."""
        from dsh.agent_loop import build  # heavy: the agent and its tools, behind the first prompt

        extra = [*(self.toolkit.tools() if self.toolkit is not None else ()),
                 *(self._extra_tools(self) if self._extra_tools is not None else ()),
                 *build.skill_tools(self.extensions().skills)]
        agent = build.build_agent(self.config, client, log, conversation=conversation, model=self.model,
                                  approve=self.extras.notifying(self._approve), extra_tools=extra, retry=self.retry,
                                  label=self._label, cwd=self.cwd, extra_secrets=self._children.mcp_secrets(),
                                  files=self._files, permissions=self.permissions, hooks=self.extras.hooks)
        agent.before_request = lambda: self._usage.budget_stop(agent.model)  # max_cost, before each request
        agent.before_compact = lambda: self.extras.pre_compact("", automatic=True)  # a refused request's compaction
        return agent

    def _report_repair(self) -> None:
        """A turn the log repair just closed is reported before anything else, then load warnings.

        The warnings are one notice; each detail goes to dsh.log (docs/configuration.md).
        """
        log = self.log
        if log is None:
            return
        if log.repaired_turn is not None:
            self._publish(RepairedTurn(log.repaired_turn))
        cut = self._life.take_cut_notice()
        if cut is not None:  # docs/architecture.md, "The session log": the cut to the window
            self._notice(cut)
        if log.load_summary is not None:
            for warning in log.load_warnings:
                _log.warning("%s", warning)
            self._notice(f"dsh: warning: {log.load_summary}")

    async def aclose(self) -> None:
        await self._children.aclose()
        await self._life.aclose()

    async def new_session(self) -> str | None:
        """``/new``: close this conversation and start an empty one in a new log."""
        agent = self.ensure_agent()
        agent.new_session()
        agent.prefix, self._usage.previous_cache_rate = PrefixTracker(), None  # a new conversation: no drop to name
        self._life.log = agent.session
        self._memory.last_failure = None
        self.extras.new_session("clear")  # its first turn is a session start, as Claude Code's /clear is
        return self.id

    async def resume(self, ident: str) -> str:
        """``/resume ID``: continue another session (its open turn, if any, is closed and reported)."""
        log = await self._life.resume(ident, self.model)
        self.extras.new_session("resume")
        self._resumed_usage()
        self._report_repair()
        return log.id

    def _resumed_usage(self) -> None:
        """The resumed session's last cache rate (the next turn's drop line compares with it) and its spend (the
        cap counts it)."""
        recap = self._life.recap
        self._usage.previous_cache_rate = recap.cache_rate if recap else None
        self._usage.carry(recap.spent if recap else 0.0)
        if recap is not None and recap.model is not None:  # the log's last /model or /profile (a model/set record)
            if not self.config.sources.get("model", "").endswith("(flag)"):
                self.set_model(recap.model)
            elif recap.model != self.model and self.log is not None:  # --model on this run wins, and is logged
                self.log.append(ModelSet(self.model))

    def set_cap(self, max_cost: float) -> None:
        self._usage.set_cap(max_cost)  # /profile NAME's max_cost, from the next request (agent_loop/budget.py)

    def set_model(self, name: str) -> None:
        """``/model NAME``: the next request uses it."""
        self.model = name
        if self.agent is not None:
            self.agent.model = name

    # --- events -----------------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if isinstance(event, TurnStart):
            self._usage.new_turn()
            if self._cancel_pending and self.agent is not None:
                self._cancel_pending = False
                self.agent.cancel("cancelled")  # a cancel that came before the agent's turn existed
        elif isinstance(event, AssistantMessage):
            self._usage.count(event, self.model)  # without usage too: a request whose tokens are unknown
        elif isinstance(event, LlmContinue):
            self._usage.count(event, self.model)  # the request it continues (a cut one's tokens are unknown)
            if event.cause is not None:  # the turn may still complete: /why shows the cut's chain
                self._memory.last_failure = event.cause
        elif isinstance(event, ToolResult):
            self._memory.last_tool_result = self._usage.count_web(event)  # a DeepSeek web call's cost joins /cost
            if event.cause is not None:  # a failed subagent run: /why shows its host-side chain
                self._memory.last_failure = event.cause
        elif isinstance(event, JobNotice):
            event, cause = self._children.settled(event)  # subscribers hear it in the user's words
            if cause is not None:
                self._memory.last_failure = cause
        elif isinstance(event, ContextCompacted):
            # Applied before subscribers hear of it: the agent's messages are the compacted ones already.
            self._usage.count_compaction(event, self.model, self.agent.messages if self.agent is not None else None)
            if self.agent is not None:
                self.agent.prefix.compacted(automatic=event.turn is not None)
        self._publish(event)
        if isinstance(event, AssistantMessage | ContextCompacted) and (line := self._usage.budget_warning()):
            self._notice(line)  # once, after the request's own event (agent_loop/budget.py)

    def context_fill(self) -> float | None:
        """How full the model's window is after the latest request; None when unknown."""
        return self._usage.context_fill()

    def compaction_due(self) -> bool:
        """With ``auto_compact`` on, a prompt sent this close to the window's end is preceded by a compaction."""
        return self._usage.compaction_due()

    # --- turns ------------------------------------------------------------------------------------

    def cancel_turn(self) -> None:
        if self.command_scope is not None:  # a `!command` runs, not a turn: it is what Ctrl-C stops
            return self.command_scope.cancel()
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
            async with (scope or no_scope)():
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
                skills=self.extensions().prompt_block,
            )
            for notice in self.context.notices:
                self._notice(f"[context] {notice}")
        if agent.system_prompt is None:
            agent.set_system_prompt(self.context.system_prompt())
        return self.context

    async def run_turn(self, prompt: str, *, scope: TurnScope | None = None, compact_scope: TurnScope | None = None,
                       attached: str = "", images: Sequence[Path | Image] = ()) -> EndReason:
        """The whole turn of ``prompt``, every front end's one call: a compaction first (inside ``compact_scope``)
        when the window is nearly full (:meth:`compaction_due`; a failure is a :class:`Notice`, the turn runs
        anyway), the prompt transform, then the turn inside ``scope``; how it ended. ``images``: files the user
        named to send with it, or images an editor sent (agent_loop/image_input.py)."""
        if self.compaction_due():
            await self.compact("", scope=compact_scope, automatic=True)
        sent = prompt if self._prompt_transform is None else self._prompt_transform(prompt)
        agent = self.ensure_agent()
        # Each @path mention's file or listing joins the user message, here where every front end passes
        # (agent_loop/mentions.py; docs/prompt.md); what was cut, masked or left out is one line each.
        rules = agent.image_rules
        mentioned = expand_mentions(sent, cwd=Path(self.cwd), root=Path(self.project), redactor=agent.redactor,
                                    keep_images=rules.keep)
        sending, refusal = prompt_images(images, mentioned.images, rules, agent.model, mentioned.notices)
        for line in mentioned.notices if refusal is None else [*mentioned.notices, refusal]:
            self._notice(line)
        if refusal is not None:  # nothing is sent: the image was the point of the prompt
            return Rejected(refusal)
        sent = mentioned.text + attached  # after the mentions: a `!` command's output (agent_loop/prompt_shell.py)
        await self.ensure_context()
        await self.open_mcp()
        await self._children.sync_mcp_tools(agent.tools)
        started = await self.extras.session_start()  # before the first turn of each session (docs/hooks.md)
        self._memory.last_prompt = prompt
        # Undos the model has not heard of (since the last turn, or before a resume): a note before the prompt,
        # in the log with it. Told once a prompt carrying it stays in the conversation (a turn that failed
        # before any answer withdraws its prompt: the next one carries the note again).
        journal = agent.journal
        note, undos = journal.untold() if journal is not None else (None, 0)
        if note is not None:
            sent = f"{note}\n\n{sent}"
        if started:  # what the SessionStart hooks printed, with the session's first prompt
            sent = f"{started}\n\n{sent}"
        first = exchanges_so_far(self.client)
        async with self._running(scope):
            try:
                # The first turn's GET /models check runs beside it (agent_loop/model_check.py).
                end = await self._model_check.beside(
                    self.client, self.model, self._notice, lambda: agent.run_turn(sent, images=sending),
                    lambda found: self._usage.saw_context(found, agent.system_prompt or "", agent.tools.specs()))
                # A Stop hook that blocks gives the model its reason, and the turn goes on (docs/hooks.md).
                end = await self.extras.stop(end, lambda reason: agent.run_turn(reason, by_hook=True))
            except Exception as exc:  # the loop promises not to raise; if it does, still say why
                end = failure_from_exception(exc, 0, self.secrets)
                self._memory.last_failure = exc
                self._publish(TurnEnd(agent.turn_number, end))
            else:
                self._memory.note_failure(end, agent.last_failure)
            finally:
                self._memory.turn_exchanges = (first, exchanges_so_far(self.client))
        if journal is not None and note is not None and any(
                message.role == "user" and message.content.startswith(note) for message in agent.messages):
            journal.told(undos)
        self._memory.last_reason = end
        self._cache_drop(agent)
        return end

    def _cache_drop(self, agent: Agent) -> None:
        """After a turn, a prompt's or the job notices': the line naming what changed when its cache hit rate fell
        (after the usage line; docs/contracts.md, "The prompt cache"), logged where it happened."""
        if line := self._usage.cache_drop(agent.turn_number, agent.prefix.take_change(), self.log):
            self._notice(line)

    async def undo(self, turns: int) -> list[str]:
        """``/undo`` (1) and ``/rewind N``: revert the files of the last ``turns`` turns that changed files,
        newest first; the lines that say what happened (agent_loop/undo_lines.py, docs/safety.md)."""
        if self.turn_running:
            raise HarnessError("cannot undo while a turn is running", ErrorCode.TURN_BUSY)
        from dsh.agent_loop.undo_lines import undo_lines  # only /undo and /rewind: not before the first prompt

        return await undo_lines(self.ensure_agent().journal, turns, self._files)

    async def compact(self, focus: str, *, scope: TurnScope | None = None, automatic: bool = False) -> None:
        """``/compact [focus]`` (``automatic``: dsh's own, the window nearly full): the summary replaces the
        conversation, or a :class:`Notice` says why it did not."""
        agent = self.ensure_agent()
        await self.ensure_context()
        self._usage.new_turn()
        async with self._running(scope):  # cancellable as a turn is
            try:
                if (refusal := self._usage.budget_refusal(agent.model)) is not None:  # the summary costs too
                    raise HarnessError(refusal, ErrorCode.COMPACT)
                await self.extras.pre_compact(focus, automatic=automatic)  # docs/hooks.md
                await agent.compact(focus or None)
            except HarnessError as exc:
                self._notice(self._memory.compact_failed(exc, self.secrets))

    async def deliver_notices(self, *, scope: TurnScope | None = None) -> EndReason | None:
        """Run a turn for background-job notices the model has not seen (an idle owner is woken)."""
        agent = self.agent
        if agent is None or self.turn_running or not agent.pending_notices:
            return None
        async with self._running(scope):
            end = await agent.deliver_notices()
        if end is not None:
            self._memory.note_failure(end, agent.last_failure)
            self._memory.last_reason = end
            self._cache_drop(agent)  # its rate is the next turn's previous, and it may drop too
        return end
