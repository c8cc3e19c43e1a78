"""The mode-independent core of the front end: one main agent, its renderer, turns and commands.

The interactive app, piped stdin and ``-p`` all drive a :class:`Shell`; they differ only in the
``sink`` that receives rendered text, the ``turn_scope`` wrapped around each turn (the interactive
one shows the toolbar and binds Ctrl-C) and the ``ask_approval`` callback for shell commands.

The agent, its tools, the model client and the session log are imported when they are built, not
with this module: the interactive front end draws its first prompt before it needs them (see
:meth:`Shell.start`).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dsh.agent_loop.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    JobNotice,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.session_id import new_session_id
from dsh.llm import ErrorCode, HarnessError, LlmError, error_chain, redact_text, redact_url
from dsh.repl import commands
from dsh.repl.config import Config, state_dir
from dsh.repl.render import ANSWER, AnswerSplit, Renderer, TurnActivity, sanitize
from dsh.repl.usage import (
    AUTO_COMPACT_AT,
    CONTEXT_WARNING_AT,
    UsageTally,
    context_fill,
    context_warning,
    usage_line,
)

if TYPE_CHECKING:
    from dsh.agent_loop.agent import Agent, Conversation
    from dsh.agent_loop.context import ProjectContext
    from dsh.agent_loop.reasons import EndReason, Failed
    from dsh.agent_loop.recap import Recap
    from dsh.agent_loop.session_log import SessionLog
    from dsh.agent_loop.tools import Tool
    from dsh.agent_loop.tools.registry import Approval
    from dsh.llm.events import ModelClient
    from dsh.repl.demo.catalogue import Demo

__all__ = [
    "EXIT_CODES",
    "Shell",
    "Sink",
    "StartupError",
    "exit_code_for",
    "register_jobs_lister",
    "register_tool_factory",
    "sessions_root",
]

# -p exit codes by turn-end kind (docs/architecture.md); usage/config errors are 2, set by the CLI.
EXIT_CODES: dict[str, int] = {
    "completed": 0,
    "error": 1,
    "rejected": 3,
    "max-tokens": 4,
    "aborted": 130,
    "interrupted": 1,
    "disposed": 1,
}


def exit_code_for(reason: Mapping[str, Any] | None) -> int:
    """Unknown kinds are ordinary ends (0); no turn at all is a failure (1)."""
    if reason is None:
        return 1
    return EXIT_CODES.get(str(reason.get("kind")), 0)


class StartupError(HarnessError):
    """The main agent could not be built; ``__cause__`` holds why."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(error_chain(cause), getattr(cause, "code", ErrorCode.STARTUP), cause=cause)


class Sink(Protocol):
    def write(self, text: str) -> None: ...


AskApproval = Callable[[Any], Awaitable["Approval | None"]]  # a command (str) or an EditRequest; None: denied
TurnScope = Callable[[], contextlib.AbstractAsyncContextManager[None]]

# --- extension seams for other packages (subagents, jobs) ------------------------------------------

ToolFactory = Callable[[Config, "Shell"], "Sequence[Tool]"]
JobsLister = Callable[["Shell"], Sequence[str] | Awaitable[Sequence[str]]]
_tool_factories: list[ToolFactory] = []
_jobs_lister: list[JobsLister] = []


def register_tool_factory(factory: ToolFactory) -> None:
    """Add tools to every main agent (e.g. the ``subagent`` and job tools). Called per agent built."""
    if factory not in _tool_factories:
        _tool_factories.append(factory)


def register_jobs_lister(lister: JobsLister | None) -> None:
    """What ``/jobs`` prints: a function of the shell returning lines. ``None`` restores the default."""
    _jobs_lister.clear()
    if lister is not None:
        _jobs_lister.append(lister)


def sessions_root(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "sessions"


@contextlib.asynccontextmanager
async def _no_scope() -> AsyncIterator[None]:
    yield


class Shell:
    """One main agent and everything the front end keeps about it."""

    def __init__(
        self,
        config: Config,
        sink: Sink,
        *,
        color: bool,
        env: Mapping[str, str] | None = None,
        client: ModelClient | None = None,
        demo: Demo | None = None,
        retry: RetryPolicy | None = None,
        approvals: bool = False,
        show_usage: bool = False,
        answer: Sink | None = None,
    ) -> None:
        self.config = config
        self._sink = sink
        self.env = dict(os.environ if env is None else env)
        self.demo = demo
        if retry is None:
            retry = RetryPolicy() if config.max_retries is None else RetryPolicy(max_retries=config.max_retries)
        self.retry = retry
        self.client = client
        # In the demo the scenario picks the endpoint and the proxy, so fix lines point there.
        sources = {"base_url": "the demo scenario", "proxy": "the demo scenario"} if demo else config.sources
        # Markdown needs colour (NO_COLOR and pipes get the text verbatim); a sink that keeps the
        # unfinished line aside lets it stream raw and be rewritten, any other gets whole lines.
        markdown = ("live" if getattr(sink, "rewrites_partial", False) else "lines") if color and config.markdown \
            else None
        self.renderer = Renderer(color=color, secrets=config.secrets, sources=sources, markdown=markdown)
        self.activity = TurnActivity()
        # -p: the answer text goes to ``answer`` (stdout), everything else to ``sink`` (stderr).
        self.answer = answer
        self.split = AnswerSplit(self.renderer) if answer is not None else None
        self._last_target: Sink | None = None  # where the split wrote last
        self.last_tool_result: ToolResult | None = None  # what /expand shows in full
        self.turn_scope: TurnScope = _no_scope
        self.ask_approval: AskApproval | None = None
        self.approvals = approvals  # someone can answer (y / n / a): the interactive front end
        self.agent: Agent | None = None
        self.session: SessionLog | None = None
        self._new_session_id: str | None = None  # named by start(defer_agent=True), created on first need
        self.model = config.model
        self.last_prompt: str | None = None
        self.last_reason: dict[str, Any] | None = None
        self.last_failure: BaseException | None = None
        self.exit_code: int | None = None  # set by /exit
        self.prefill = ""  # text handed back to the next prompt (an unknown command, say)
        self.turn_running = False
        self._cancel_pending = False  # Ctrl-C arrived while a turn was being set up
        self.toolkit: Any = None  # dsh.agent_loop.subagent.tool.SubagentToolkit, when subagents are configured
        self._toolkit_scope = contextlib.AsyncExitStack()
        # Called when a background job settles while no turn runs (the front end wakes the owner).
        self.on_idle_notice: Callable[[], None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.show_usage = show_usage  # the dim usage line after each turn (interactive only)
        self.turn_usage = UsageTally()
        self.session_usage = UsageTally()  # since this process started (``/cost``)
        self.context: ProjectContext | None = None  # gathered before the first turn of each session
        self._context_warned = False  # the 80% line was shown and the fill has not dropped below since
        self._resumed: Conversation | None = None  # rebuilt by _open_session, taken by _attach
        self.recap: Recap | None = None  # the last turns of the session resumed last (_open_session)
        self._project: str | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def sink(self) -> Sink:
        return self._sink

    @sink.setter
    def sink(self, sink: Sink) -> None:
        """The interactive app swaps in its own sink, which lets an unfinished answer line stream raw."""
        self._sink = sink
        self.renderer.markdown_live = bool(getattr(sink, "rewrites_partial", False))

    @property
    def root(self) -> Path:
        return sessions_root(self.env)

    @property
    def endpoint(self) -> str:
        if self.client is None:  # not built yet: what DeepSeekClient.base_url_display will say
            return redact_url(self.config.base_url.rstrip("/"))
        display = getattr(self.client, "base_url_display", None)
        return display if isinstance(display, str) else redact_text(self.config.base_url)

    async def start(self, resume: str | None = None, *, defer_agent: bool = False) -> None:
        """Build the client, open or create the session log and the agent; StartupError on failure.

        With ``defer_agent`` the client, the agent and a new session's log are built by
        :meth:`ensure_agent` instead, called by the first turn at the latest; the new session is
        named now (:attr:`session_id`). A session to resume is still opened (and repaired) here.
        """
        try:
            self.toolkit = self._build_toolkit()
            if self.toolkit is not None:  # its block holds the background jobs until aclose()
                await self._toolkit_scope.enter_async_context(self.toolkit)
                for hint in self.toolkit.hints:
                    self.sink.write(self.renderer.line(hint))
            if resume is not None:
                self.session = self._open_session(resume)
            elif defer_agent:
                self._new_session_id = new_session_id()
            else:
                self.session = self._create_session()
            if not defer_agent and self.session is not None:  # always set here: resumed or created
                self._attach(self.session)
        except Exception as exc:
            raise StartupError(exc)
        self.report_repair()

    @property
    def session_id(self) -> str | None:
        """The current session's id, also while its log is still to be created."""
        return self.session.id if self.session is not None else self._new_session_id

    @property
    def project(self) -> str:
        """This directory's project (the git work tree, else the cwd): what ``last`` and /sessions scope to."""
        if self._project is None:
            from dsh.repl.sessions import current_project

            self._project = current_project()
        return self._project

    def _open_session(self, ident: str) -> SessionLog:
        """Open a log to continue, its conversation rebuilt in the same pass (kept for :meth:`_attach`).

        ``last`` is this project's latest session with turns, never the current one; the pass also
        gathers the recap (:attr:`recap`), and ``/retry`` gets the last prompt.
        """
        from dsh.agent_loop.agent import open_session
        from dsh.agent_loop.recap import Recap
        from dsh.agent_loop.session_log import resolve_session

        target: str | Path = ident
        if ident == "last":
            target = resolve_session("last", self.root, project=self.project, exclude=self.session_id)
        recap = Recap()
        session, self._resumed = open_session(target, root=self.root, on_record=recap)
        self.recap = recap
        if recap.last_prompt is not None:
            self.last_prompt = recap.last_prompt
        return session

    def _create_session(self) -> SessionLog:
        from dsh.agent_loop.session_log import SessionLog

        # Written at the first turn: a launch that runs none leaves no empty session behind.
        return SessionLog.create(root=self.root, cwd=os.getcwd(), session_id=self._new_session_id,
                                 project=self.project, lazy=True)

    def _build_client(self) -> None:
        if self.client is None:
            from dsh.llm.deepseek import DeepSeekClient

            self.client = DeepSeekClient(
                base_url=self.config.base_url,
                api_key=self.config.api_key,
                stream_idle_timeout=self.config.stream_idle_timeout,
                first_token_timeout=self.config.first_token_timeout,
                proxy=self.config.proxy,
                trust_env=False,  # the config already read the proxy variables (and names them)
                env=self.env,
                record=self.config.record,
            )

    def ensure_agent(self) -> Agent:
        """The main agent, built now if :meth:`start` deferred it; StartupError if it cannot be."""
        if self.agent is None:
            assert self.session is not None or self._new_session_id is not None, "start() first"
            try:
                self._attach(self.session if self.session is not None else self._create_session())
            except Exception as exc:
                raise StartupError(exc)
        assert self.agent is not None
        return self.agent

    def _build_toolkit(self) -> Any:
        """``[subagents.NAME]`` tables (plus the demo's own) -> the subagent and job tools, or None."""
        tables: dict[str, dict[str, Any]] = {}
        if self.demo is not None:
            tables.update(self.demo.subagent_tables())
        tables.update(self.config.subagents)
        if not tables:
            return None
        from dsh.agent_loop.subagent import ParentContext
        from dsh.agent_loop.subagent.tool import SubagentToolkit

        base_url = self.demo.client.urls["server"] if self.demo is not None else self.config.base_url
        parent = ParentContext(
            model=self.model,
            base_url=base_url,
            api_key=self.config.api_key,
            cwd=os.getcwd(),
            secrets=self.config.secrets,
        )
        return SubagentToolkit.from_config(tables, parent=parent)

    def _attach(self, session: SessionLog) -> None:
        """Bind a fresh agent to ``session`` (the previous agent must already be closed)."""
        from dsh.agent_loop.agent import Agent
        from dsh.agent_loop.guard import PromptGuard
        from dsh.agent_loop.tools import default_tools
        from dsh.llm import Redactor

        self._build_client()
        self.session = session
        # Without a terminal nobody can approve: the shell tool then says so instead of "denied".
        # Edits then follow allow_edits (--allow-edits or the config key).
        tools = default_tools(self._approve if self.approvals else None, allow_edits=self.config.allow_edits)
        if self.toolkit is not None:
            for tool in self.toolkit.tools():
                tools.add(tool, replace=True)
        for factory in _tool_factories:
            for tool in factory(self.config, self):
                tools.add(tool, replace=True)
        conversation, self._resumed = self._resumed, None
        try:
            agent = Agent(
                self.client,
                conversation=conversation,
                model=self.model,
                tools=tools,
                session=session,
                label="main",
                retry=self.retry,
                guard=PromptGuard(hook_command=self.config.prompt_hook, api_key=self.config.api_key),
                redactor=Redactor((*self.config.secrets, *getattr(self.client, "secrets", ()))),
                max_tokens=self.config.max_tokens,
                thinking=self.config.thinking,
                reasoning_effort=self.config.reasoning_effort,
                auto_compact=self.config.auto_compact,
            )
        except BaseException:
            session.close()
            raise
        self.agent = agent
        self._unsubscribe = agent.subscribe(self._on_event)

    def report_repair(self) -> None:
        """A turn the log repair just closed is reported before anything else, then load warnings.

        The warnings are one line on screen; each detail goes to dsh.log (docs/configuration.md).
        """
        session = self.session
        if session is None:
            return
        if session.repaired_turn is not None:
            self.sink.write(self.renderer.resume_notice(session.repaired_turn))
        if session.load_summary is not None:
            import logging

            log = logging.getLogger("dsh.session")
            for warning in session.load_warnings:
                log.warning("%s", warning)
            self.sink.write(self.renderer.line(sanitize(f"dsh: warning: {session.load_summary}")))

    def report_resumed(self) -> None:
        """``resumed session <id> (N turns)`` and a short recap of its last turns (sanitized by the sink)."""
        from dsh.repl.sessions import recap_lines

        session = self.session
        if session is None:
            return
        for line in recap_lines(session.id, session.last_turn, self.recap, repaired_turn=session.repaired_turn,
                                secrets=self.config.secrets):
            self.sink.write(self.renderer.line(line))

    async def _detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        agent, self.agent = self.agent, None
        if agent is not None:
            await agent.aclose()

    async def aclose(self) -> None:
        self.toolkit = None
        with contextlib.suppress(Exception):  # background jobs end with the session that owns them
            await self._toolkit_scope.aclose()
        await self._detach()
        if self.session is not None and not self.session.closed:
            self.session.close()
        client = self.client
        if client is not None and hasattr(client, "aclose"):
            with contextlib.suppress(Exception):
                await client.aclose()

    async def new_session(self) -> str:
        """``/new``: close this conversation and start an empty one in a new log."""
        agent = self.ensure_agent()
        agent.new_session()
        self.session = agent.session
        self.last_failure = None
        assert self.session is not None
        return self.session.id

    async def resume(self, ident: str) -> str:
        """``/resume ID``: continue another session (its open turn, if any, is closed and reported)."""
        resumed = self._resumed
        try:
            session = self._open_session(ident)  # raises before we let go of the current one
        except BaseException:
            self._resumed = resumed
            raise
        await self._detach()
        if self.session is not None and not self.session.closed:
            self.session.close()
        self._attach(session)
        self.report_repair()
        return session.id

    # --- events and output ----------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if isinstance(event, TurnStart) and self._cancel_pending and self.agent is not None:
            self._cancel_pending = False
            self.agent.cancel("cancelled")  # a Ctrl-C that came before the agent's turn existed
        self.activity.on_event(event, time.monotonic())
        if isinstance(event, TurnStart):
            self.turn_usage = UsageTally()
        elif isinstance(event, AssistantMessage) and event.usage is not None:
            self._count_usage(event)
        elif isinstance(event, ToolResult):
            self.last_tool_result = event
            if event.cause is not None:  # a failed subagent run: /why shows its host-side chain
                self.last_failure = event.cause
        elif isinstance(event, JobNotice):
            event = self._settled_job(event)
        elif isinstance(event, ContextCompacted):
            self._count_compaction(event)
        if self.split is not None:
            assert self.answer is not None
            for stream, chunk in self.split.render(event):
                target = self.answer if stream == ANSWER else self.sink
                if target is not self._last_target:  # keep the order across stdout and stderr (2>&1)
                    _flush_sink(self._last_target)
                    self._last_target = target
                target.write(chunk)
        else:
            text = self.renderer.render(event)
            if text:
                self.sink.write(text)
        if isinstance(event, JobNotice) and not self.turn_running and self.on_idle_notice is not None:
            self.on_idle_notice()

    def _settled_job(self, event: JobNotice) -> JobNotice:
        """A job settled: a failure's raw cause becomes /why's, and the on-screen notice is written for the
        user (the model keeps the event's own text)."""
        job = self.toolkit.jobs.get(event.job_id) if self.toolkit is not None else None
        if job is None:
            return event
        if job.result is not None and job.result.cause is not None:
            self.last_failure = job.result.cause
        from dsh.agent_loop.subagent.jobs import user_notice

        return JobNotice(event.job_id, user_notice(job))

    def _count_compaction(self, event: ContextCompacted) -> None:
        """The summary request costs like any other; afterwards the window holds about the new conversation."""
        if event.usage is not None:
            self._count_usage(event)
        if self.agent is not None and self.session_usage.requests:
            from dsh.agent_loop.context import estimate_tokens

            # Applied before subscribers hear of it: the agent's messages are the compacted ones already.
            left = estimate_tokens("".join(message.content for message in self.agent.messages))
            for tally in (self.session_usage, self.turn_usage):
                tally.context, tally.context_estimated = left, True

    def _warn_context(self) -> None:
        """One line when the window crosses 80% (again only after it dropped below, e.g. by /compact)."""
        fill = context_fill(self.session_usage, self.config.models)
        if fill is None or fill < CONTEXT_WARNING_AT:
            self._context_warned = False
        elif not self._context_warned:
            self._context_warned = True
            self.sink.write(self.renderer.line(context_warning(fill)))

    def _count_usage(self, event: AssistantMessage | ContextCompacted) -> None:
        import datetime

        from dsh.llm.models import model_info

        assert event.usage is not None
        info = model_info(self.model, self.config.models)
        now = datetime.datetime.now(datetime.UTC)
        self.turn_usage.add(event.usage, self.model, info, now)
        self.session_usage.add(event.usage, self.model, info, now)

    def say(self, text: str) -> None:
        """Command output: whole lines, each on its own line."""
        for line in text.split("\n"):
            self.sink.write(self.renderer.line(line))

    async def _approve(self, request: Any) -> Approval | None:
        """A shell command (str) or an edit (``EditRequest``) to the front end's question."""
        ask = self.ask_approval
        if ask is None:
            return None
        return await ask(request)

    # --- turns -----------------------------------------------------------------------------------

    def cancel_turn(self) -> None:
        if self.agent is not None and self.turn_running and not self.agent.cancel("cancelled"):
            # The turn is being set up (live view, prompt guard) and the agent has no scope yet:
            # cancel it as soon as it starts instead of losing the keypress.
            self._cancel_pending = True

    async def ensure_context(self) -> ProjectContext:
        """The project context of this session, gathered once and set as the agent's system prompt."""
        agent = self.ensure_agent()
        if self.context is None:
            from dsh.agent_loop.context import gather_project_context
            from dsh.repl.config import config_file_path

            self.context = await gather_project_context(
                Path.cwd(), env=self.env, user_dir=config_file_path(self.env).parent,
                replace=self.config.system_prompt, append=self.config.system_prompt_append, redactor=agent.redactor,
            )
            for notice in self.context.notices:
                self.sink.write(self.renderer.line(f"[context] {notice}"))
        if agent.system_prompt is None:
            agent.set_system_prompt(self.context.system_prompt())
        return self.context

    async def run_turn(self, prompt: str) -> dict[str, Any]:
        """One turn, rendered as it streams. Returns the turn-end reason as a dict."""
        agent = self.ensure_agent()
        await self.ensure_context()
        if self.config.auto_compact:
            fill = context_fill(self.session_usage, self.config.models)
            if fill is not None and fill >= AUTO_COMPACT_AT:
                await self.compact("")  # near the limit: compact first (a failure is one line, the turn runs)
        sent = self.demo.before_turn(prompt) if self.demo is not None else prompt
        self.last_prompt = prompt
        self.turn_running = True
        self._cancel_pending = False
        try:
            async with self.turn_scope():
                try:
                    end: EndReason = await agent.run_turn(sent)
                except Exception as exc:  # the loop promises not to raise; if it does, still say why
                    from dsh.agent_loop.reasons import failure_from_exception

                    end = failure_from_exception(exc, 0, self.config.secrets)
                    self.last_failure = exc
                    self._on_event(TurnEnd(agent.turn_number, end))
                else:
                    from dsh.agent_loop.reasons import Failed  # loaded with the agent already

                    if isinstance(end, Failed):
                        self.last_failure = agent.last_failure or _reason_error(end)
                self.sink.write(self.renderer.end_line())
                if self.split is not None:
                    assert self.answer is not None
                    self.answer.write(self.split.end())
                self._show_usage()
        finally:
            self.turn_running = False
            self._cancel_pending = False
        reason = end.to_dict()
        self.last_reason = reason
        return reason

    def _show_usage(self) -> None:
        """The dim usage line after a turn or a compaction, then the context warning (interactive only)."""
        if self.show_usage and self.turn_usage.requests:
            self.sink.write(self.renderer.dim_line(usage_line(self.turn_usage, self.config.models)))
        if self.show_usage:
            self._warn_context()

    async def compact(self, focus: str) -> None:
        """``/compact [focus]``: the summary replaces the conversation, or one line says why it did not."""
        agent = self.ensure_agent()
        await self.ensure_context()
        self.turn_usage = UsageTally()
        self.turn_running = True  # Ctrl-C cancels it as it would a turn
        self._cancel_pending = False
        try:
            async with self.turn_scope():
                try:
                    await agent.compact(focus or None)
                except HarnessError as exc:
                    self.last_failure = exc
                    self.sink.write(self.renderer.line(self._compact_failure(exc)))
                self._show_usage()
        finally:
            self.turn_running = False
            self._cancel_pending = False

    def _compact_failure(self, exc: HarnessError) -> str:
        if exc.code == ErrorCode.ABORTED:
            return "[compact cancelled] the conversation is unchanged"
        if exc.code == ErrorCode.COMPACT and str(exc) == "nothing to compact yet":
            return "nothing to compact yet"
        message = redact_text(error_chain(exc), self.config.secrets).replace("\n", " ")
        return f"[compact failed {exc.code}] {message}; the conversation is unchanged"

    async def deliver_notices(self) -> dict[str, Any] | None:
        """Run a turn for background-job notices the model has not seen (an idle owner is woken)."""
        agent = self.agent
        if agent is None or self.turn_running or not agent.pending_notices:
            return None
        self.turn_running = True
        try:
            async with self.turn_scope():
                result = await agent.deliver_notices()
                self.sink.write(self.renderer.end_line())
        finally:
            self.turn_running = False
        if result is None:
            return None
        from dsh.agent_loop.reasons import Failed  # loaded with the agent already

        if isinstance(result, Failed):
            self.last_failure = agent.last_failure or _reason_error(result)
        reason = result.to_dict()
        self.last_reason = reason
        return reason

    async def handle_line(self, line: str) -> dict[str, Any] | None:
        """A slash command or a prompt. Returns the turn's reason, or None when no turn ran."""
        text = line.strip()
        if not text:
            return None
        if text.startswith("//"):  # an escaped slash: send "/..." as a prompt
            return await self.run_turn(line.lstrip()[1:])
        if text.startswith("/"):
            return await commands.dispatch(self, text)
        return await self.run_turn(line)

    def _job_lines(self) -> list[str]:
        """``/jobs``: id, status, age and subagent of each job, then how to drive them."""
        jobs = self.toolkit.jobs.jobs if self.toolkit is not None else []
        if not jobs:
            return []
        return [*(_job_row(job) for job in jobs), "/job ID shows a job's output · /kill ID stops a running one"]

    async def list_jobs(self) -> list[str]:
        if not _jobs_lister:
            return self._job_lines()
        lines = _jobs_lister[0](self)
        if inspect.isawaitable(lines):
            lines = await lines
        return [str(line) for line in lines]


def _flush_sink(sink: Sink | None) -> None:
    flush = getattr(sink, "flush", None)
    if flush is not None:
        flush()


def _job_row(job: Any) -> str:
    from dsh.agent_loop.subagent.jobs import age_text

    return f"{job.id:<12} {job.status:<9} {age_text(job.age()):>6}  {job.label}"


def _reason_error(reason: Failed) -> BaseException:
    """A stand-in for /why when the loop kept no exception (e.g. a failure read back from a log)."""
    return LlmError(reason.message or "turn failed", reason.code or ErrorCode.UNKNOWN)
