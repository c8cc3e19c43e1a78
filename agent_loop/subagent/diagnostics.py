"""The one failure record of every subagent run, and the fixed, safe lines built from it.

A provider declares where its runs can fail and how as two enums, subclasses of :class:`Stage` and
:class:`Category` (``class Stage(diagnostics.Stage): INITIALIZE = "initialize"``); a :class:`Failure`
holds one member of each plus the closed facts (the child's protocol stop reason, an HTTP status, the
observed exit). :func:`failure_line` renders it:

* ``Subagent failure (provider: <name>; stage: …; category: …; error code: …; stop reason: …; exit code: …;
  signal: …)``
  for the out-of-process providers (ACP, child dsh), ``provider`` being the configured name;
* ``Product subagent failure (product: <Claude Code|Codex>; endpoint: …; stage: …; category: …; HTTP status: …;
  exit code: …; signal: …)`` for the products (``endpoint`` when the product was sent to one by name).

Only enum members pass as stage and category, every other field is checked against a closed
vocabulary or the safe pattern ``[A-Za-z0-9_.-]+``; anything else becomes ``unknown`` (or, for an
optional fact, is omitted), so child-controlled text — exception messages, stderr, task text, tool
input, payload values — can never pass through. The raw cause rides along in :attr:`Failure.cause`
for the host log only. The result is display text: consumers show it, they never parse it. The
4096-byte bound is applied by ``SubagentResult`` (``limit_diagnostic``), not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

__all__ = [
    "ACP_STOP_REASONS",
    "ACP_TOOL_KINDS",
    "DEEPSEEK_ANTHROPIC",
    "ERROR_CODE_NAMES",
    "PERMISSION_DECISIONS",
    "PERMISSION_POLICIES",
    "PRODUCTS",
    "PRODUCT_ENDPOINTS",
    "SUBAGENT_STOP_REASONS",
    "UNATTENDED_DECISIONS",
    "UNATTENDED_REQUESTS",
    "UNKNOWN",
    "Category",
    "Failure",
    "Stage",
    "error_code_text",
    "failure_line",
    "join_lines",
    "mode_warning",
    "permission_line",
    "safe_token",
    "unattended_decision",
]

UNKNOWN = "unknown"
_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SIGNAL_NAME = re.compile(r"SIG[A-Z0-9]{1,12}")


class Stage(StrEnum):
    """Where a run failed. Each provider subclasses it with its closed stages."""


class Category(StrEnum):
    """How a run failed. Each provider subclasses it with its closed categories."""


class _ExitFacts(Protocol):
    @property
    def exit_code(self) -> int | None: ...

    @property
    def signal(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Failure:
    """Where and how a run failed: closed facts for the line, the raw cause for the host log.

    ``stop_reason`` is the child's own closed protocol value (the generic line shows it);
    ``http_status`` an upstream status a product reported (the product line shows it); ``error_code``
    the integer code of an agent's JSON-RPC error answer (the generic line shows it). A ``None``
    stage or category (a provider that broke its contract) renders as ``unknown``.
    """

    stage: Stage | None
    category: Category | None
    stop_reason: str | None = None
    http_status: int | None = None
    error_code: int | None = None
    exit_status: _ExitFacts | None = None
    cause: BaseException | None = field(default=None, compare=False, repr=False)
    # Host-side only: what the agent said, as ``(label, raw value)`` (Codex's error message, its
    # codexErrorInfo); the run masks and bounds it for dsh.log and /why. Never part of the line.
    words: tuple[tuple[str, object], ...] = field(default=(), compare=False, repr=False)


ACP_STOP_REASONS: frozenset[str] = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})
# The child dsh ``turn/end`` kinds (agent_loop reasons, and ``blocked``).
_DSH_TURN_END_KINDS: frozenset[str] = frozenset(
    {"completed", "error", "aborted", "rejected", "max-tokens", "interrupted", "disposed", "blocked"}
)
SUBAGENT_STOP_REASONS: frozenset[str] = ACP_STOP_REASONS | _DSH_TURN_END_KINDS

ACP_TOOL_KINDS: frozenset[str] = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}
)
PERMISSION_POLICIES: frozenset[str] = frozenset({"allow", "reject"})
PERMISSION_DECISIONS: frozenset[str] = frozenset({"allowed", "rejected", "cancelled"})

PRODUCTS: frozenset[str] = frozenset({"Claude Code", "Codex"})
# Where a product child was sent by its table (``endpoint = "deepseek"``): the names its line may give.
DEEPSEEK_ANTHROPIC = "DeepSeek (Anthropic format)"
PRODUCT_ENDPOINTS: frozenset[str] = frozenset({DEEPSEEK_ANTHROPIC})

# The error codes ACP and JSON-RPC 2.0 define, with their fixed names (docs/contracts.md); others stay bare integers.
ERROR_CODE_NAMES: dict[int, str] = {
    -32000: "authentication required",
    -32002: "resource not found",
    -32600: "invalid request",
    -32601: "method not found",
    -32602: "invalid params",
    -32603: "internal error",
    -32700: "parse error",
}

def error_code_text(code: int) -> str:
    """``error code: -32603 (internal error)``: a JSON-RPC error's code, with its fixed name when it has one."""
    name = ERROR_CODE_NAMES.get(code)
    return f"error code: {code} ({name})" if name else f"error code: {code}"


UNATTENDED_REQUESTS: frozenset[str] = frozenset(
    {
        "tool permission", "command execution", "file change", "permissions", "user input",
        "elicitation", "dynamic tool call",
    }
)  # fmt: skip
UNATTENDED_DECISIONS: frozenset[str] = frozenset({"allowed", "denied", "approved", "declined", "cancelled", "rejected"})
_UNATTENDED_SUFFIX = "the provider does not request human approval"


def safe_token(value: object) -> str:
    """``value`` if it is a short ``[A-Za-z0-9_.-]+`` string, else ``unknown``."""
    if isinstance(value, str) and _SAFE_TOKEN.fullmatch(value):
        return value
    return UNKNOWN


def _closed(value: object, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else UNKNOWN


def _member(value: object, kind: type[StrEnum]) -> str:
    return value.value if isinstance(value, kind) else UNKNOWN


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


def failure_line(failure: Failure, *, provider: str, product: str | None = None, endpoint: str | None = None) -> str:
    """The line for ``failure``: the product line when ``product`` is given, else the generic one.

    Generic: ``stop reason`` only when it is a known closed protocol value. Product: ``endpoint`` only when
    it is a known name. Both: exit code and signal only when given (i.e. the managed child's exit was observed).
    """
    stage, category = _member(failure.stage, Stage), _member(failure.category, Category)
    if product is not None:
        fields = [f"product: {_closed(product, PRODUCTS)}"]
        if endpoint in PRODUCT_ENDPOINTS:
            fields.append(f"endpoint: {endpoint}")
        fields += [f"stage: {stage}", f"category: {category}"]
        status = failure.http_status
        if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
            fields.append(f"HTTP status: {status}")
        fields += _exit_fields(failure.exit_status)
        return f"Product subagent failure ({'; '.join(fields)})"
    fields = [f"provider: {safe_token(provider)}", f"stage: {stage}", f"category: {category}"]
    code = failure.error_code
    if isinstance(code, int) and not isinstance(code, bool) and -(2**31) <= code < 2**31:
        fields.append(error_code_text(code))
    reason = failure.stop_reason
    if isinstance(reason, str) and reason in SUBAGENT_STOP_REASONS:
        fields.append(f"stop reason: {reason}")
    fields += _exit_fields(failure.exit_status)
    return f"Subagent failure ({'; '.join(fields)})"


def permission_line(policy: str, request_kind: str | None, decision: str) -> str:
    """``Subagent permission decision (policy: <allow|reject>; request: <ACP tool kind>; decision: …)``."""
    return (
        "Subagent permission decision ("
        f"policy: {_closed(policy, PERMISSION_POLICIES)}; "
        f"request: {_closed(request_kind, ACP_TOOL_KINDS)}; "
        f"decision: {_closed(decision, PERMISSION_DECISIONS)})"
    )


def unattended_decision(product: str, mode: str, request: str, decision: str) -> str:
    """``<product> unattended decision (mode: …; request: …; decision: …): <fixed suffix>``."""
    name = product if product in PRODUCTS else "Product subagent"
    return (
        f"{name} unattended decision ("
        f"mode: {safe_token(mode)}; "
        f"request: {_closed(request, UNATTENDED_REQUESTS)}; "
        f"decision: {_closed(decision, UNATTENDED_DECISIONS)}): {_UNATTENDED_SUFFIX}"
    )


def mode_warning(provider: str, mode: str | None) -> str:
    """The host-side line for tool calls an agent ran under ``reject`` without asking (docs/subagents.md)."""
    return (
        f"Subagent permission warning (provider: {safe_token(provider)}; mode: {safe_token(mode)}): "
        "tool calls ran without a permission request under policy reject"
    )


def join_lines(*lines: str | None) -> str | None:
    """The diagnostic made of the given lines in order (``None`` entries skipped); ``None`` if empty."""
    present = [line for line in lines if line]
    return "\n".join(present) if present else None
