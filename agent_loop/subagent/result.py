"""What goes into a subagent run and what comes out: request, result, and the one diagnostic choke point."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# The agent's own words live in the shared child-words module (the MCP client keeps a server's the same way);
# re-exported here for the subagent seam's users.
from dsh.agent_loop.child_words import (
    STDERR_HEAD_BYTES,
    STDERR_HEAD_LINES,
    STDERR_TAIL_BYTES,
    STDERR_TAIL_LINES,
    WORDS_LIMIT_BYTES,
    AgentWords,
    ChildFailure,
    stderr_tail,
    words_text,
)

__all__ = [
    "DIAGNOSTIC_LIMIT_BYTES",
    "FAILURE_HEADLINES",
    "STDERR_HEAD_BYTES",
    "STDERR_HEAD_LINES",
    "STDERR_TAIL_BYTES",
    "STDERR_TAIL_LINES",
    "STOP_REASONS",
    "WORDS_LIMIT_BYTES",
    "AgentWords",
    "SubagentFailure",
    "SubagentRequest",
    "SubagentResult",
    "limit_diagnostic",
    "stderr_tail",
    "words_text",
]

StopReason = Literal["completed", "aborted", "error", "max-tokens", "refusal"]
STOP_REASONS: frozenset[str] = frozenset({"completed", "aborted", "error", "max-tokens", "refusal"})

DIAGNOSTIC_LIMIT_BYTES = 4096
# What a run that did not complete is called, by stop reason (unknown stop reasons count as failure).
FAILURE_HEADLINES: dict[str, str] = {
    "error": "subagent run failed",
    "aborted": "subagent run was cancelled",
    "max-tokens": "subagent run hit its token limit before finishing",
    "refusal": "subagent declined the task",
}
_TRUNCATED_SUFFIX = "\n[diagnostic truncated]"


def limit_diagnostic(text: str | None) -> str | None:
    """Bound a diagnostic to 4096 UTF-8 bytes; cut on a code-point boundary and mark the cut."""
    if text is None:
        return None
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= DIAGNOSTIC_LIMIT_BYTES:
        return text
    room = DIAGNOSTIC_LIMIT_BYTES - len(_TRUNCATED_SUFFIX.encode("utf-8"))
    prefix = encoded[:room]
    # Drop a partial trailing code point: continuation bytes are 0b10xxxxxx.
    prefix = prefix.decode("utf-8", "ignore").encode("utf-8")
    return prefix.decode("utf-8") + _TRUNCATED_SUFFIX


class SubagentFailure(ChildFailure):
    """A subagent run that did not succeed: ``/why``'s record of it, host-side only.

    Its message is the run's diagnostic (closed facts) or its headline; ``words`` what the agent said,
    masked and bounded; the raw cause (if any) is beneath it in the chain.
    """


@dataclass(frozen=True, slots=True)
class SubagentResult:
    """What a delegated run came back with. ``diagnostic`` is fixed safe text, never child text.

    ``warning`` is one more fixed host-side line for the user (the REPL shows it, the model does not
    get it): e.g. an ACP agent that ran tool calls under ``permission = "reject"`` without asking.
    """

    output: str
    stop_reason: str
    diagnostic: str | None = None
    warning: str | None = None
    # Host-side only: a failure's record for the user's /why (a SubagentFailure: the diagnostic, the agent's
    # masked words, the raw cause beneath); never the model's.
    cause: BaseException | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "diagnostic", limit_diagnostic(self.diagnostic))

    @property
    def succeeded(self) -> bool:
        return self.stop_reason == "completed"


@dataclass(frozen=True, slots=True)
class SubagentRequest:
    description: str
    prompt: str
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
