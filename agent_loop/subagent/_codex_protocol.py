"""What ``codex app-server`` says, as typed values: its error variants, our stages, the unattended replies.

The vocabulary of agent_loop/subagent/codex.py (which drives the conversation): the ``codexErrorInfo``
variants a failure line names verbatim, the stages it names, the replies that grant nothing to the
app-server's approval requests, and the turn's notifications gathered as they arrive (docs/subagents.md, "Codex").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anyio

from dsh.agent_loop.subagent import diagnostics

__all__ = [
    "NO_ERROR_INFO",
    "OBJECT_VARIANTS",
    "STATUS_VARIANTS",
    "STRING_VARIANTS",
    "UNATTENDED_REPLIES",
    "Category",
    "Stage",
    "TurnState",
    "classify_error_info",
    "error_words",
]


# codexErrorInfo of app-server 0.163.0 (v2 schema): unit variants are bare strings, struct variants
# single-key objects. The category names them verbatim, then our own facts.
class Category(diagnostics.Category):
    contextWindowExceeded = "contextWindowExceeded"
    sessionBudgetExceeded = "sessionBudgetExceeded"
    usageLimitExceeded = "usageLimitExceeded"
    rateLimitExceeded = "rateLimitExceeded"
    flexUnavailable = "flexUnavailable"
    serverOverloaded = "serverOverloaded"
    cyberPolicy = "cyberPolicy"
    misalignmentPolicyViolation = "misalignmentPolicyViolation"
    tooManyDenials = "tooManyDenials"
    internalServerError = "internalServerError"
    unauthorized = "unauthorized"
    badRequest = "badRequest"
    threadRollbackFailed = "threadRollbackFailed"
    sandboxError = "sandboxError"
    other = "other"
    httpConnectionFailed = "httpConnectionFailed"
    responseStreamConnectionFailed = "responseStreamConnectionFailed"
    responseStreamDisconnected = "responseStreamDisconnected"
    responseTooManyFailedAttempts = "responseTooManyFailedAttempts"
    activeTurnNotSteerable = "activeTurnNotSteerable"
    PROCESS_EXIT = "process-exit"
    TIMEOUT = "timeout"
    CONFIGURATION = "configuration"
    UNKNOWN = "unknown"


STRING_VARIANTS: frozenset[str] = frozenset(
    {
        Category.contextWindowExceeded,
        Category.sessionBudgetExceeded,
        Category.usageLimitExceeded,
        Category.rateLimitExceeded,
        Category.flexUnavailable,
        Category.serverOverloaded,
        Category.cyberPolicy,
        Category.misalignmentPolicyViolation,
        Category.tooManyDenials,
        Category.internalServerError,
        Category.unauthorized,
        Category.badRequest,
        Category.threadRollbackFailed,
        Category.sandboxError,
        Category.other,
    }
)
STATUS_VARIANTS: frozenset[str] = frozenset(
    {
        Category.httpConnectionFailed,
        Category.responseStreamConnectionFailed,
        Category.responseStreamDisconnected,
        Category.responseTooManyFailedAttempts,
    }
)
OBJECT_VARIANTS: frozenset[str] = STATUS_VARIANTS | {Category.activeTurnNotSteerable}


class Stage(diagnostics.Stage):
    INITIALIZE = "initialize"
    THREAD_START = "thread-start"
    TURN_START = "turn-start"
    TURN = "turn"
    PROCESS = "process"
    TEARDOWN = "teardown"



# Server -> client requests answered unattended: (request kind, decision, reply granting nothing).
UNATTENDED_REPLIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "item/commandExecution/requestApproval": ("command execution", "declined", {"decision": "decline"}),
    "item/fileChange/requestApproval": ("file change", "declined", {"decision": "decline"}),
    "item/permissions/requestApproval": ("permissions", "declined", {"permissions": {}, "scope": "turn"}),
    "item/tool/requestUserInput": ("user input", "declined", {"answers": {}}),
    "mcpServer/elicitation/request": ("elicitation", "declined", {"action": "decline"}),
    "item/tool/call": ("dynamic tool call", "declined", {"contentItems": [], "success": False}),
    # v1 names, still in the 0.163.0 schema
    "execCommandApproval": ("command execution", "denied", {"decision": "denied"}),
    "applyPatchApproval": ("file change", "denied", {"decision": "denied"}),
}


def classify_error_info(info: object) -> tuple[Category, int | None]:
    """A ``codexErrorInfo`` value -> (category, HTTP status). Only declared variants pass; else unknown."""
    if isinstance(info, str):
        return (Category(info), None) if info in STRING_VARIANTS else (Category.UNKNOWN, None)
    if not isinstance(info, dict) or len(info) != 1:
        return Category.UNKNOWN, None  # malformed, or an object naming more than one variant
    ((name, body),) = info.items()
    if name not in OBJECT_VARIANTS or not isinstance(body, dict):
        return Category.UNKNOWN, None
    if name in STATUS_VARIANTS:
        status = body.get("httpStatusCode")
        if isinstance(status, int) and not isinstance(status, bool):
            return Category(name), status
        return Category(name), None
    return Category(name), None  # activeTurnNotSteerable: its turn kind is not exposed



NO_ERROR_INFO = object()


@dataclass(slots=True)
class _AgentMessage:
    item_id: str
    text: str
    phase: str | None


@dataclass(slots=True)
class TurnState:
    """What the notifications told us, as typed values."""

    messages: list[_AgentMessage] = field(default_factory=list)
    deltas: dict[str, list[str]] = field(default_factory=dict)
    last_error_info: object = NO_ERROR_INFO
    last_error_words: tuple[tuple[str, object], ...] = ()  # the latest error's own words, host-side only
    completed_turn: dict[str, Any] | None = None
    completed: anyio.Event = field(default_factory=anyio.Event)

    def record_message(self, item: dict[str, Any]) -> None:
        item_id, text, phase = item.get("id"), item.get("text"), item.get("phase")
        if not isinstance(item_id, str) or not isinstance(text, str):
            return
        if any(m.item_id == item_id for m in self.messages):
            return
        self.messages.append(_AgentMessage(item_id, text, phase if isinstance(phase, str) else None))

    def answer(self) -> str | None:
        """The latest final-answer agent message (phase ``final_answer``; a message without a phase is
        a legacy final answer; a ``partial_answer`` is the last resort; commentary never is)."""
        for wanted in ("final_answer", None, "partial_answer"):
            for message in reversed(self.messages):
                if message.phase == wanted and message.text.strip():
                    return message.text
        return None

    def partial_output(self) -> str:
        answer = self.answer()
        if answer is not None:
            return answer
        for message in reversed(self.messages):
            if message.text.strip():
                return message.text
        for pieces in reversed(list(self.deltas.values())):
            text = "".join(pieces)
            if text.strip():
                return text
        return ""


def error_words(error: dict[str, Any]) -> tuple[tuple[str, object], ...]:
    """A Codex error's own words (its message, ``codexErrorInfo`` and details) for the host side: never a line."""
    message, info, details = error.get("message"), error.get("codexErrorInfo"), error.get("additionalDetails")
    words: list[tuple[str, object]] = [] if message is None else [("error message", message)]
    if info is not None:  # raw JSON, a bare string variant too: it is the protocol's value as sent
        words.append(("codexErrorInfo", json.dumps(info, ensure_ascii=False, separators=(",", ":"))))
    return (*words, ("additionalDetails", details)) if details is not None else tuple(words)

