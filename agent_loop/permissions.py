"""Permission modes: what a tool call that changes something may do without asking (docs/safety.md).

The mode is one of four (``--permission-mode``, ``permission_mode`` in config.toml, Shift+Tab in the REPL).
:func:`decide` is the one place that says, for a mode and what a call would do (an :class:`Action`), whether
it runs, goes through today's approval flow (``ask``: the question, an earlier "always", or the unattended
rules of ``-p``), or is refused with a line the model gets as the tool's result. The approval flow
(``dsh.agent_loop.tools.registry.ask_approval``) consults it before anything else, so no earlier "always"
and no ``--allow-edits`` outranks a refusal.

``auto`` runs commands unasked only because they run in the sandbox: a front end lets it be chosen only
when a sandbox is configured (and dsh does not start with a configured sandbox that does not work).

Imported by the front ends before the first prompt is drawn: nothing heavy here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AUTO_NEEDS_SANDBOX",
    "CYCLE",
    "PLAN_REFUSAL",
    "Action",
    "Decision",
    "Mode",
    "Permissions",
    "Refuse",
    "decide",
    "parse_mode",
]


class Mode(enum.StrEnum):
    DEFAULT = "default"
    PLAN = "plan"
    ACCEPT_EDITS = "accept-edits"
    AUTO = "auto"


class Action(enum.Enum):
    """What a tool call would do, as far as the mode cares."""

    SHELL = "a shell command"
    EDIT = "an edit inside the tree"
    EDIT_OUTSIDE = "an edit outside the tree"
    EDIT_GIT = "an edit in a git directory"
    MCP = "an MCP tool that may write"
    # An MCP tool that may write, on a server the user trusts (approve = "auto", or --allow-mcp): it runs
    # without asking in every mode but plan.
    MCP_TRUSTED = "an MCP tool that may write, trusted"
    # A delegation to a subagent (an ACP agent, a child dsh, Claude Code, Codex): it may edit and run commands
    # outside the sandbox under its own ``permission`` setting. Only plan refuses it; no mode loosens it.
    SUBAGENT = "a delegation to a subagent"


@dataclass(frozen=True, slots=True)
class Refuse:
    line: str  # what the model gets as the tool's result (and the user sees in it)


Decision = Literal["run", "ask"] | Refuse

PLAN_REFUSAL = ("Error: plan mode is on: edits, writes, shell commands, subagents and MCP tools that may write are "
                "refused (Shift+Tab or --permission-mode changes the mode)")
AUTO_NEEDS_SANDBOX = 'auto needs a sandbox: set sandbox = "bwrap" in config.toml (docs/safety.md)'

# Shift+Tab's order; auto only when a sandbox is configured (Permissions.cycle skips it otherwise).
CYCLE = (Mode.DEFAULT, Mode.ACCEPT_EDITS, Mode.PLAN, Mode.AUTO)

# A subagent never asks here: its own ``permission`` setting decides what it may do (docs/subagents.md), the
# same in every mode but plan.
_RUN_UNASKED: dict[Mode, frozenset[Action]] = {
    Mode.DEFAULT: frozenset({Action.MCP_TRUSTED, Action.SUBAGENT}),
    Mode.ACCEPT_EDITS: frozenset({Action.EDIT, Action.MCP_TRUSTED, Action.SUBAGENT}),
    # Only the sandboxed shell and edits inside the tree: MCP servers and subagents are not sandboxed, so auto
    # gives them nothing the default mode does not.
    Mode.AUTO: frozenset({Action.SHELL, Action.EDIT, Action.MCP_TRUSTED, Action.SUBAGENT}),
    Mode.PLAN: frozenset(),
}


def decide(mode: Mode, action: Action) -> Decision:
    """Whether ``action`` runs, asks (today's approval flow) or is refused in ``mode``; the table is in
    docs/safety.md ("Permission modes")."""
    if mode is Mode.PLAN:
        return Refuse(PLAN_REFUSAL)
    return "run" if action in _RUN_UNASKED[mode] else "ask"


def parse_mode(value: object) -> Mode | None:
    """The mode a config value or flag names, or None."""
    try:
        return Mode(value) if isinstance(value, str) else None
    except ValueError:
        return None


class Permissions:
    """The session's current mode, shared by the front end (which changes it) and the tools (which read it at
    each call, so a change during a turn applies to the next call)."""

    def __init__(self, mode: Mode = Mode.DEFAULT, *, auto_allowed: bool = False) -> None:
        if mode is Mode.AUTO and not auto_allowed:
            raise ValueError(AUTO_NEEDS_SANDBOX)
        self.mode = mode
        self.auto_allowed = auto_allowed  # a sandbox is configured (and was checked at start-up)

    def decide(self, action: Action) -> Decision:
        return decide(self.mode, action)

    def cycle(self) -> Mode:
        """Shift+Tab: the next mode of :data:`CYCLE`, auto skipped without a sandbox."""
        choices = [mode for mode in CYCLE if mode is not Mode.AUTO or self.auto_allowed]
        self.mode = choices[(choices.index(self.mode) + 1) % len(choices)]
        return self.mode

    def set(self, mode: Mode) -> str | None:
        """Switch to ``mode``; the line that says why not (auto without a sandbox), else None."""
        if mode is Mode.AUTO and not self.auto_allowed:
            return AUTO_NEEDS_SANDBOX
        self.mode = mode
        return None
