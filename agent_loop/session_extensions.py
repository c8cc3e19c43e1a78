"""What the user and the project add to a session from files and config: its hooks (agent_loop/hook_run.py;
docs/hooks.md) and its skills and custom commands (agent_loop/extensions.py; docs/extending.md), each found once,
at first need, behind the first prompt.

The session calls the hook points of its own life here: ``SessionStart`` before a session's first turn,
``Stop`` when a turn has ended (a hook that blocks gives the model its reason and the turn goes on, as in Claude
Code), ``PreCompact`` before ``/compact``, and ``Notification`` when dsh asks the user to approve something. The
tool points (``PreToolUse``, ``PostToolUse``) and ``UserPromptSubmit`` are the agent's (agent_loop/tool_calls.py,
agent_loop/guard.py), through the same :class:`~dsh.agent_loop.hook_run.Hooks`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.agent_loop.extensions import Extensions, discover_agents, discover_extensions
from dsh.agent_loop.hook_run import Hooks, hook_point, session_hooks
from dsh.agent_loop.reasons import Completed, EndReason

if TYPE_CHECKING:
    from dsh.agent_loop.session_config import Approver, SessionConfig
    from dsh.llm.redact import Redactor

__all__ = ["MAX_STOP_CONTINUATIONS", "SessionExtensions"]

# A Stop hook that keeps blocking gets the turn going on at most this often a prompt (it is told
# ``stop_hook_active: true`` from the second time on, as Claude Code tells it, so it can let the turn end).
MAX_STOP_CONTINUATIONS = 3


class SessionExtensions:
    """A session's hooks, skills and custom commands. ``project`` False (a child runtime) reads no files of the
    project's or the user's; ``notice`` shows a line; ``redactor`` gives the session's masker when first needed."""

    def __init__(self, config: SessionConfig, *, cwd: str, user_dir: Path | None, project: bool,
                 redactor: Callable[[], Redactor], notice: Callable[[str], None],
                 session_id: Callable[[], str | None]) -> None:
        self._config = config
        self._cwd = cwd
        self._user_dir = user_dir
        self._project = project
        self._redactor = redactor
        self._notice = notice
        self._session_id = session_id
        self._found: Extensions | None = None
        self._hooks: Hooks | None = None
        self._hooks_read = False
        self._started = False  # SessionStart ran for this session (again after /new and /resume)
        self._source = "startup"

    def found(self) -> Extensions:
        """This project's and user's skills and custom commands; each file left out is one ``[context]`` line."""
        if self._found is None:
            self._found = Extensions() if not self._project else discover_extensions(
                Path(self._cwd), self._user_dir, self._redactor())
            for notice in self._found.notices:
                self._notice(f"[context] {notice}")
        return self._found

    def agent_tables(self, configured: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """The subagents the project's and the user's agent files define, as ``[subagents.NAME]`` tables, none of
        the ``configured`` names (agent_loop/agent_files.py); each file left out or skipped is one ``[context]``
        line. Read when the subagent toolkit opens; a child runtime reads none."""
        if not self._project:
            return {}
        agents, notices = discover_agents(Path(self._cwd), self._user_dir, configured, self._redactor())
        for notice in notices:
            self._notice(f"[context] {notice}")
        return {agent.name: agent.table for agent in agents}

    @property
    def hooks(self) -> Hooks | None:
        """config.toml's hooks, then (``claude_settings``) the project's ``.claude/settings.json``'s; None when there
        are none. A settings file that cannot be read is a ``SettingsError`` here (the agent is not built)."""
        if not self._hooks_read:
            self._hooks = session_hooks(self._config.hooks, self._config.claude_settings,
                                        cwd=self._cwd, redact=self._redactor(), session_id=self._session_id)
            self._hooks_read = True
        return self._hooks

    def new_session(self, source: str) -> None:
        """The next turn is a new session's first (``clear`` after /new, ``resume`` after /resume)."""
        self._started, self._source = False, source

    async def session_start(self) -> str:
        """``SessionStart``, once a session, before its first turn: the context its hooks printed (for the first
        prompt, as Claude Code adds it), or ``""``."""
        hooks = self.hooks
        if self._started or hooks is None or not hooks.matching("SessionStart"):
            self._started = True
            return ""
        self._started = True
        outcome = await hooks.fire("SessionStart", {"source": self._source}, target="the session")
        for line in outcome.shown:
            self._notice(line)
        return f"[SessionStart hook]\n{outcome.context}" if outcome.context else ""

    async def stop(self, end: EndReason, go_on: Callable[[str], Awaitable[EndReason]]) -> EndReason:
        """``Stop`` after a completed turn: while a hook blocks, the model is given its reason and the turn goes on
        (``go_on``), at most :data:`MAX_STOP_CONTINUATIONS` times; the last end is the turn's."""
        hooks = self.hooks
        for again in range(MAX_STOP_CONTINUATIONS + 1):
            if hooks is None or not isinstance(end, Completed) or not hooks.matching("Stop"):
                return end
            outcome = await hooks.fire("Stop", {"stop_hook_active": again > 0}, target="the turn")
            for line in outcome.shown:
                self._notice(line)
            if outcome.refusal is None or again == MAX_STOP_CONTINUATIONS:
                return end
            end = await go_on(f"[Stop hook] {outcome.refusal}")
        return end

    async def pre_compact(self, focus: str, *, automatic: bool = False) -> None:
        """``PreCompact``: ``trigger`` is ``auto`` for a compaction dsh starts itself (auto_compact), as in Claude
        Code; ``manual`` for /compact."""
        await hook_point(self.hooks, "PreCompact", {"trigger": "auto" if automatic else "manual",
                                                    "custom_instructions": focus}, self._notice)

    def notifying(self, approve: Approver | None) -> Approver | None:
        """``approve``, with ``Notification`` hooks told first that dsh is asking (Claude Code's permission prompt)."""
        if approve is None:
            return None

        async def asking(request: Any) -> Any:
            if self.hooks is not None:
                await hook_point(self.hooks, "Notification", {"message": f"dsh needs your permission to use "
                                                                         f"{_asked_tool(request)}"}, self._notice)
            return await approve(request)

        return asking


def _asked_tool(request: object) -> str:
    """The tool an approval is for, in closed words (never the command or a server's tool name)."""
    if isinstance(request, str):
        return "run_shell"
    kind = type(request).__name__  # by name: the tools' request types load with the agent, not with the session
    return "edit_file" if kind == "EditRequest" else "an MCP tool" if kind == "McpCallRequest" else "a tool"

