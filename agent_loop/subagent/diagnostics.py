"""Builders for the fixed, safe diagnostic lines of out-of-process subagents (DESIGN §7, seed 002).

Every field is checked against a closed vocabulary or the safe pattern ``[A-Za-z0-9_.-]+``;
anything else becomes ``unknown`` (or, for an optional fact, is omitted), so child-controlled text —
exception messages, stderr, task text, tool input, payload values — can never pass through. The
result is display text: consumers show it, they never parse it. The 4096-byte bound is applied by
``SubagentResult`` (``limit_diagnostic``), not here.
"""

from __future__ import annotations

import re
from typing import Protocol

__all__ = [
    "ACP_STOP_REASONS",
    "ACP_TOOL_KINDS",
    "PERMISSION_DECISIONS",
    "PERMISSION_POLICIES",
    "PRODUCTS",
    "PRODUCT_CATEGORIES",
    "PRODUCT_STAGES",
    "SUBAGENT_CATEGORIES",
    "SUBAGENT_STAGES",
    "SUBAGENT_STOP_REASONS",
    "UNATTENDED_DECISIONS",
    "UNATTENDED_REQUESTS",
    "UNKNOWN",
    "join_lines",
    "permission_line",
    "product_failure",
    "safe_token",
    "subagent_failure",
    "unattended_decision",
]

UNKNOWN = "unknown"
_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SIGNAL_NAME = re.compile(r"SIG[A-Z0-9]{1,12}")

# -- out-of-process subagents (ACP, child dsh) ----------------------------------------------------

SUBAGENT_STAGES: frozenset[str] = frozenset(
    {
        # ACP
        "initialize", "new-session", "prompt", "process", "teardown",
        # child dsh (dsh-sdk)
        "session-run", "shutdown",
    }
)  # fmt: skip

SUBAGENT_CATEGORIES: frozenset[str] = frozenset(
    {
        "configuration", "transport", "protocol", "process-start", "process-exit",
        "remote-limit", "timeout", "unknown",
        # teardown facts (the ladder tier that a cleanup failure reached)
        "process-terminated", "process-killed", "process-unreaped",
        # child dsh
        "child-error", "child-disposed", "child-unknown", "missing-terminal",
    }
)  # fmt: skip

ACP_STOP_REASONS: frozenset[str] = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})
# The child dsh ``turn/end`` kinds (agent_loop reasons) and seed 002's ``blocked``.
_DSH_TURN_END_KINDS: frozenset[str] = frozenset(
    {"completed", "error", "aborted", "rejected", "max-tokens", "interrupted", "disposed", "blocked"}
)
SUBAGENT_STOP_REASONS: frozenset[str] = ACP_STOP_REASONS | _DSH_TURN_END_KINDS

ACP_TOOL_KINDS: frozenset[str] = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}
)
PERMISSION_POLICIES: frozenset[str] = frozenset({"allow", "reject"})
PERMISSION_DECISIONS: frozenset[str] = frozenset({"allowed", "rejected", "cancelled"})

# -- product subagents (Claude Code, Codex) -------------------------------------------------------

PRODUCTS: frozenset[str] = frozenset({"Claude Code", "Codex"})

PRODUCT_STAGES: frozenset[str] = frozenset(
    {
        # Claude Code
        "query-start", "query-run", "process", "teardown",
        # Codex
        "initialize", "thread-start", "turn-start", "turn",
    }
)  # fmt: skip

PRODUCT_CATEGORIES: frozenset[str] = frozenset(
    {
        # Claude Code result subtypes (verbatim) and our own facts
        "error_during_execution", "error_max_turns", "error_max_budget_usd",
        "error_max_structured_output_retries", "invalid-success", "missing-result",
        # Codex codexErrorInfo names (verbatim, 0.163.0), string and object variants
        "contextWindowExceeded", "sessionBudgetExceeded", "usageLimitExceeded", "rateLimitExceeded",
        "flexUnavailable", "serverOverloaded", "cyberPolicy", "misalignmentPolicyViolation",
        "tooManyDenials", "internalServerError", "unauthorized", "badRequest", "threadRollbackFailed",
        "sandboxError", "other", "httpConnectionFailed", "responseStreamConnectionFailed",
        "responseStreamDisconnected", "responseTooManyFailedAttempts", "activeTurnNotSteerable",
        "modelCap",
        # shared process / protocol facts
        "process-start", "process-exit", "protocol", "transport", "timeout", "configuration",
        "process-terminated", "process-killed", "process-unreaped", "unknown",
    }
)  # fmt: skip

UNATTENDED_REQUESTS: frozenset[str] = frozenset(
    {
        "tool permission", "command execution", "file change", "permissions", "user input",
        "elicitation", "dynamic tool call",
    }
)  # fmt: skip
UNATTENDED_DECISIONS: frozenset[str] = frozenset({"allowed", "denied", "approved", "declined", "cancelled", "rejected"})
_UNATTENDED_SUFFIX = "the provider does not request human approval"


class _ExitFacts(Protocol):
    @property
    def exit_code(self) -> int | None: ...

    @property
    def signal(self) -> str | None: ...


def safe_token(value: object) -> str:
    """``value`` if it is a short ``[A-Za-z0-9_.-]+`` string, else ``unknown``."""
    if isinstance(value, str) and _SAFE_TOKEN.fullmatch(value):
        return value
    return UNKNOWN


def _closed(value: object, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else UNKNOWN


def _exit_fields(exit_status: _ExitFacts | None) -> list[str]:
    if exit_status is None:
        return []
    fields: list[str] = []
    code = exit_status.exit_code
    if isinstance(code, int) and not isinstance(code, bool):
        fields.append(f"exit code: {code}")
    sig = exit_status.signal
    if isinstance(sig, str) and _SIGNAL_NAME.fullmatch(sig):
        fields.append(f"signal: {sig}")
    return fields


def subagent_failure(
    provider: str,
    stage: str,
    category: str,
    stop_reason: str | None = None,
    exit_status: _ExitFacts | None = None,
) -> str:
    """``Subagent failure (provider: …; stage: …; category: …; stop reason: …; exit code: …; signal: …)``.

    ``stop_reason`` is shown only when it is a known closed protocol value; exit code and signal only
    when given (i.e. the managed child's exit was observed).
    """
    fields = [
        f"provider: {safe_token(provider)}",
        f"stage: {_closed(stage, SUBAGENT_STAGES)}",
        f"category: {_closed(category, SUBAGENT_CATEGORIES)}",
    ]
    if isinstance(stop_reason, str) and stop_reason in SUBAGENT_STOP_REASONS:
        fields.append(f"stop reason: {stop_reason}")
    fields += _exit_fields(exit_status)
    return f"Subagent failure ({'; '.join(fields)})"


def permission_line(policy: str, request_kind: str | None, decision: str) -> str:
    """``Subagent permission decision (policy: <allow|reject>; request: <ACP tool kind>; decision: …)``."""
    return (
        "Subagent permission decision ("
        f"policy: {_closed(policy, PERMISSION_POLICIES)}; "
        f"request: {_closed(request_kind, ACP_TOOL_KINDS)}; "
        f"decision: {_closed(decision, PERMISSION_DECISIONS)})"
    )


def product_failure(
    product: str,
    stage: str,
    category: str,
    http_status: int | None = None,
    exit_status: _ExitFacts | None = None,
) -> str:
    """``Product subagent failure (product: …; stage: …; category: …; HTTP status: …; exit code: …; signal: …)``."""
    fields = [
        f"product: {_closed(product, PRODUCTS)}",
        f"stage: {_closed(stage, PRODUCT_STAGES)}",
        f"category: {_closed(category, PRODUCT_CATEGORIES)}",
    ]
    if isinstance(http_status, int) and not isinstance(http_status, bool) and 100 <= http_status <= 599:
        fields.append(f"HTTP status: {http_status}")
    fields += _exit_fields(exit_status)
    return f"Product subagent failure ({'; '.join(fields)})"


def unattended_decision(product: str, mode: str, request: str, decision: str) -> str:
    """``<product> unattended decision (mode: …; request: …; decision: …): <fixed suffix>``."""
    name = product if product in PRODUCTS else "Product subagent"
    return (
        f"{name} unattended decision ("
        f"mode: {safe_token(mode)}; "
        f"request: {_closed(request, UNATTENDED_REQUESTS)}; "
        f"decision: {_closed(decision, UNATTENDED_DECISIONS)}): {_UNATTENDED_SUFFIX}"
    )


def join_lines(*lines: str | None) -> str | None:
    """The diagnostic made of the given lines in order (``None`` entries skipped); ``None`` if empty."""
    present = [line for line in lines if line]
    return "\n".join(present) if present else None
