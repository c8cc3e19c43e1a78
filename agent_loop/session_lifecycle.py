"""A session's lifecycle: its session log and the agent bound to it, from the first open to the close.

A new log is named at start and created on first need (written at its first turn); a log to resume is opened
with its conversation rebuilt and its recap gathered in the same pass. The model client and the agent over the
log are built on first need, by :mod:`dsh.agent_loop.build`, imported then: the interactive front end draws
its first prompt without the agent, its tools, the log or the HTTP client (docs/architecture.md, "Start-up and
lazy imports"). ``/resume`` closes one agent and its log and binds another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.agent_loop.events import Event
from dsh.agent_loop.plan import PLAN_KEY
from dsh.agent_loop.project import project_root
from dsh.agent_loop.session_config import EndpointClient, SessionConfig
from dsh.agent_loop.turn_memory import TurnMemory
from dsh.llm import ErrorCode, HarnessError
from dsh.llm.models import model_info

if TYPE_CHECKING:
    from dsh.agent_loop.agent import Agent
    from dsh.agent_loop.conversation import Conversation
    from dsh.agent_loop.recap import Recap
    from dsh.agent_loop.session_list import SessionInfo
    from dsh.agent_loop.session_log import SessionLog

__all__ = ["AgentFactory", "SessionLifecycle"]

# The session's agent over a log: its client, the log (None: none kept), the conversation a resume rebuilt.
AgentFactory = Callable[["EndpointClient", "SessionLog | None", "Conversation | None"], "Agent"]


class SessionLifecycle:
    """The current :attr:`log`, :attr:`agent` and :attr:`client` of a session, and the :attr:`recap` of the
    session resumed last."""

    def __init__(self, config: SessionConfig, *, env: Mapping[str, str], sessions_root: Path | None,
                 client: EndpointClient | None, cwd: str, memory: TurnMemory, new_agent: AgentFactory,
                 on_event: Callable[[Event], None]) -> None:
        """``sessions_root`` None keeps no log; ``memory`` is given a resumed session's last prompt (``/retry``);
        ``on_event`` hears every event of whichever agent is bound."""
        self._config = config
        self._env = env
        self.sessions_root = sessions_root
        self.client = client
        self._cwd = cwd
        self._memory = memory
        self._new_agent = new_agent
        self._on_event = on_event
        self.agent: Agent | None = None
        self.log: SessionLog | None = None
        self.recap: Recap | None = None  # the last turns of the session resumed last
        self._new_session_id: str | None = None  # named by name_new(), created on first need
        self._project: str | None = None
        self._resumed: Conversation | None = None  # rebuilt by open(), taken by attach()
        self._cut_notice: str | None = None  # what the resume cut to the window left out, said once
        self._unsubscribe_agent: Callable[[], None] | None = None

    @property
    def id(self) -> str | None:
        """The current session's id, also while its log is still to be created."""
        return self.log.id if self.log is not None else self._new_session_id

    @property
    def project(self) -> str:
        """This directory's project (the git work tree, else the cwd): what ``last`` and /sessions scope to."""
        if self._project is None:
            self._project = str(project_root(Path(self._cwd)))
        return self._project

    def name_new(self, session_id: str) -> None:
        """The new session is named now; its log is created on first need."""
        self._new_session_id = session_id

    def open(self, ident: str, model: str) -> SessionLog:
        """Open a log to continue, its conversation rebuilt in the same pass (cut to ``model``'s window; kept
        for :meth:`attach`).

        ``last`` is this project's latest session with turns, never the current one; the pass also
        gathers the recap (:attr:`recap`), and ``/retry`` gets the last prompt.
        """
        from dsh.agent_loop import build  # heavy: the session log's reader, behind the first prompt

        info = model_info(model, self._config.models)
        window = (info.context_window or 0) if info is not None else 0  # 0: unknown
        log, self._resumed, recap = build.open_log(ident, self._root(), project=self.project, current=self.id,
                                                   window=window, info=info)
        self.recap = recap
        if recap.last_prompt is not None:
            self._memory.last_prompt = recap.last_prompt
        dropped = self._resumed.resume_dropped
        self._cut_notice = None if not dropped else (
            f"dsh: this session is longer than twice the model's context window: the next request holds its "
            f"newest {len(self._resumed.messages)} messages; the {dropped} older ones stay in the log")
        return log

    def take_cut_notice(self) -> str | None:
        """What the last resume's cut to the window left out, once (docs/architecture.md, "The session log")."""
        notice, self._cut_notice = self._cut_notice, None
        return notice

    def saved_sessions(self, project: str | None) -> list[SessionInfo]:
        """The saved sessions of ``project`` (every project's with None), oldest first."""
        from dsh.agent_loop import build  # heavy: the session log's reader, behind the first prompt

        return build.saved_sessions(self._root(), project)

    def _root(self) -> Path:
        if self.sessions_root is None:
            raise HarnessError("this session keeps no log", ErrorCode.CONFIG)
        return self.sessions_root

    def attach(self, log: SessionLog | None) -> Agent:
        """Bind a fresh agent to ``log``, or to a new log when None (none if this session keeps none); the
        previous agent must already be closed."""
        from dsh.agent_loop import build, journal  # heavy: the HTTP client, the log, behind the first prompt

        if log is None and self.sessions_root is not None:
            log = build.create_log(self.sessions_root, cwd=self._cwd, session_id=self._new_session_id,
                                   project=self.project)
        if self.client is None:
            self.client = build.deepseek_client(self._config, self._env)
        self.log = log
        conversation, self._resumed = self._resumed, None
        agent = self._new_agent(self.client, log, conversation)
        if conversation is not None and self.recap is not None and self.recap.plan is not None:
            agent.session_state[PLAN_KEY] = self.recap.plan  # the resumed log's last plan (todo_write's)
        if self.sessions_root is not None:  # the journal's key is dsh's, wherever the log is (docs/safety.md)
            agent.journal_key = journal.journal_key_file(self.sessions_root)
        self.agent = agent
        self._unsubscribe_agent = agent.subscribe(self._on_event)
        return agent

    async def resume(self, ident: str, model: str) -> SessionLog:
        """Close the current agent and log and bind another agent to the log ``ident`` names."""
        resumed = self._resumed
        try:
            log = self.open(ident, model)  # raises before we let go of the current one
        except BaseException:
            self._resumed = resumed
            raise
        await self.detach()
        self.close_log()
        self.attach(log)
        return log

    async def detach(self) -> None:
        if self._unsubscribe_agent is not None:
            self._unsubscribe_agent()
            self._unsubscribe_agent = None
        agent, self.agent = self.agent, None
        if agent is not None:
            await agent.aclose()

    def close_log(self) -> None:
        if self.log is not None and not self.log.closed:
            self.log.close()

    async def aclose(self) -> None:
        """The agent, the log and the client closed, in that order."""
        await self.detach()
        self.close_log()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()
