"""What goes into a subagent run and what comes out: request, result, and the one diagnostic choke point."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "DIAGNOSTIC_LIMIT_BYTES",
    "STOP_REASONS",
    "SubagentRequest",
    "SubagentResult",
    "limit_diagnostic",
]

StopReason = Literal["completed", "aborted", "error", "max-tokens", "refusal"]
STOP_REASONS: frozenset[str] = frozenset({"completed", "aborted", "error", "max-tokens", "refusal"})

DIAGNOSTIC_LIMIT_BYTES = 4096
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
    # Host-side only: the raw cause of a failure, for the user's /why (redacted there); never the model's.
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
