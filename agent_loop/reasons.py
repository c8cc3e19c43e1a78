"""Turn-end reasons: every turn ends with exactly one of these.

Each reason is a small frozen dataclass with ``kind``, ``exit_code`` (what ``dsh -p`` exits with after such a
turn; docs/scripting.md), ``to_dict()`` and ``EndReason.from_dict()``; the
``turn/end`` event (:class:`dsh.agent_loop.events.TurnEnd`) carries one. A kind this version does not
know (read from a newer log or child) becomes :class:`OtherEnd` and is treated as an ordinary end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsh.llm import ErrorCode, HarnessError, LlmError, error_chain, redact_text
from dsh.llm.network import FailureDetail

__all__ = [
    "Aborted",
    "BudgetStop",
    "Completed",
    "Disposed",
    "EndReason",
    "Failed",
    "Interrupted",
    "MaxTokens",
    "OtherEnd",
    "Rejected",
    "failure_from_exception",
    "nothing_to_compact",
]


@dataclass(frozen=True, slots=True)
class EndReason:
    kind: ClassVar[str] = ""
    exit_code: ClassVar[int] = 0  # an ordinary end

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> EndReason:
        kind = data.get("kind")
        if kind == "completed":
            return Completed()
        if kind == "max-tokens":
            return MaxTokens()
        if kind == "interrupted":
            return Interrupted()
        if kind == "disposed":
            return Disposed()
        if kind == "aborted":
            reason = data.get("reason")
            return Aborted(reason if isinstance(reason, str) else None)
        if kind == "rejected":
            reason = data.get("reason")
            return Rejected(reason if isinstance(reason, str) else "")
        if kind == "budget":
            return BudgetStop(_money(data.get("spent")), _money(data.get("max_cost")))
        if kind == "error":
            status, request_id, step = data.get("status"), data.get("request_id"), data.get("step")
            return Failed(
                code=str(data.get("code") or ""),
                message=str(data.get("message") or ""),
                step=step if isinstance(step, int) else 0,
                status=status if isinstance(status, int) else None,
                request_id=request_id if isinstance(request_id, str) else None,
                detail=data["detail"] if isinstance(data.get("detail"), str) else None,
                endpoint=data["endpoint"] if isinstance(data.get("endpoint"), str) else None,
                endpoint_name=data["endpoint_name"] if isinstance(data.get("endpoint_name"), str) else None,
            )
        return OtherEnd(kind if isinstance(kind, str) else "", dict(data))


@dataclass(frozen=True, slots=True)
class Completed(EndReason):
    kind: ClassVar[str] = "completed"


@dataclass(frozen=True, slots=True)
class MaxTokens(EndReason):
    kind: ClassVar[str] = "max-tokens"
    exit_code: ClassVar[int] = 4


@dataclass(frozen=True, slots=True)
class Interrupted(EndReason):
    """Written only by log repair: the process that ran the turn exited before ending it."""

    kind: ClassVar[str] = "interrupted"
    exit_code: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class Disposed(EndReason):
    """The agent was closed while the turn ran."""

    kind: ClassVar[str] = "disposed"
    exit_code: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class Aborted(EndReason):
    kind: ClassVar[str] = "aborted"
    exit_code: ClassVar[int] = 130
    reason: str | None = "cancelled"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason} if self.reason else {"kind": self.kind}


@dataclass(frozen=True, slots=True)
class Rejected(EndReason):
    kind: ClassVar[str] = "rejected"
    exit_code: ClassVar[int] = 3
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class BudgetStop(EndReason):
    """The cost so far had reached the cap (``max_cost``, US dollars) before a request: it was not sent."""

    kind: ClassVar[str] = "budget"
    exit_code: ClassVar[int] = 5
    spent: float = 0.0
    max_cost: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "spent": round(self.spent, 6), "max_cost": self.max_cost}


def _money(value: object) -> float:
    """An amount as logged; anything else (a string, a negative, nan) reads 0."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9
    return float(value) if ok else 0.0  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Failed(EndReason):
    """``error {code, message, step, status?, request_id?}``; ``message`` is the rendered cause chain."""

    kind: ClassVar[str] = "error"
    exit_code: ClassVar[int] = 1
    code: str = ErrorCode.UNKNOWN
    message: str = ""
    step: int = 0
    status: int | None = None
    request_id: str | None = None
    detail: str | None = None  # dsh.llm.network.FailureDetail: what the fix line routes on
    endpoint: str | None = None  # the redacted URL that failed (the base URL, or the proxy's)
    endpoint_name: str | None = None  # who answered there ("DeepSeek", "LiteLLM"; dsh.llm.endpoint), None: unnamed

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "code": self.code, "message": self.message, "step": self.step}
        if self.status is not None:
            data["status"] = self.status
        if self.request_id is not None:
            data["request_id"] = self.request_id
        if self.detail is not None:
            data["detail"] = self.detail
        if self.endpoint is not None:
            data["endpoint"] = self.endpoint
        if self.endpoint_name is not None:
            data["endpoint_name"] = self.endpoint_name
        return data


@dataclass(frozen=True, slots=True)
class OtherEnd(EndReason):
    """A kind this version does not know; an ordinary end. ``data`` is the dict as read."""

    name: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.name

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data) or ({"kind": self.name} if self.name else {})


def nothing_to_compact(reason: EndReason, turn_alone: bool) -> EndReason:
    """``reason``, marked ``nothing-to-compact`` when it is a context overflow of a turn with nothing before it (its
    fix line then says what can help: /compact and /new cannot)."""
    if turn_alone and isinstance(reason, Failed) and reason.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED:
        return dataclasses.replace(reason, detail=FailureDetail.NOTHING_TO_COMPACT)
    return reason


def failure_from_exception(exc: BaseException, step: int, secrets: tuple[str, ...] = ()) -> Failed:
    """The ``error`` reason for a failure: the code routes, the message is the full chain."""
    code = exc.code if isinstance(exc, HarnessError) else ErrorCode.UNKNOWN
    status = exc.status if isinstance(exc, LlmError) else None
    request_id = exc.request_id if isinstance(exc, LlmError) else None
    detail = exc.detail if isinstance(exc, LlmError) else None
    endpoint = exc.endpoint if isinstance(exc, LlmError) else None
    endpoint_name = exc.endpoint_name if isinstance(exc, LlmError) else None
    return Failed(
        code=code,
        message=redact_text(error_chain(exc), secrets),
        step=step,
        status=status,
        request_id=request_id,
        detail=detail,
        endpoint=redact_text(endpoint, secrets) if isinstance(endpoint, str) else None,
        endpoint_name=redact_text(endpoint_name, secrets) if isinstance(endpoint_name, str) else None,
    )
