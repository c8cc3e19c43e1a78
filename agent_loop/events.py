"""The agent's event vocabulary: published live, appended to the session log, rendered by the REPL.

Every event is a frozen dataclass that knows its wire ``type`` and whether it is ``durable``: durable
events are appended to the session log and make up the conversation; live-only ones (deltas,
keep-alives) are not. Events become dicts only at the two boundaries, through :func:`to_wire` and
:func:`from_wire`: the session log (written, loaded, resumed) and the ``session/event`` notifications
of ``dsh serve``. The wire form is ``{"type": ..., "data": {...}}`` (the log adds ``seq`` and
``time``); :func:`from_wire` accepts whatever an older log or another process wrote, defaulting a
missing or mistyped field, and keeps a type it does not know as an :class:`UnknownEvent`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from dsh.agent_loop.reasons import EndReason
from dsh.llm import ToolCall, Usage

__all__ = [
    "AssistantMessage",
    "ContextCompacted",
    "Event",
    "JobNotice",
    "LlmRetry",
    "ReasoningDelta",
    "StepStart",
    "StreamKeepAlive",
    "TextDelta",
    "ToolCallStart",
    "ToolResult",
    "TurnEnd",
    "TurnStart",
    "UnknownEvent",
    "from_wire",
    "to_wire",
]


@dataclass(frozen=True, slots=True)
class TurnStart:
    type: ClassVar[str] = "turn/start"
    durable: ClassVar[bool] = True

    turn: int
    prompt: str
    source: str | None = None  # "notice": a turn started to deliver background-job notices


@dataclass(frozen=True, slots=True)
class StepStart:
    type: ClassVar[str] = "step/start"
    durable: ClassVar[bool] = True

    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class TextDelta:
    type: ClassVar[str] = "text/delta"
    durable: ClassVar[bool] = False

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    type: ClassVar[str] = "reasoning/delta"
    durable: ClassVar[bool] = False

    text: str


@dataclass(frozen=True, slots=True)
class StreamKeepAlive:
    """The model's stream sent a keep-alive: the connection is alive, nothing arrived."""

    type: ClassVar[str] = "stream/keepalive"
    durable: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """One step's reply. ``interrupted``: the prefix streamed before the turn was cut short."""

    type: ClassVar[str] = "assistant/message"
    durable: ClassVar[bool] = True

    turn: int
    step: int
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    interrupted: bool = False
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call is about to run (published before its :class:`ToolResult`)."""

    type: ClassVar[str] = "tool/call"
    durable: ClassVar[bool] = True

    turn: int
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it


@dataclass(frozen=True, slots=True)
class ToolResult:
    type: ClassVar[str] = "tool/result"
    durable: ClassVar[bool] = True

    turn: int
    id: str
    name: str
    output: str
    is_error: bool = False
    diagnostic: str | None = None  # the closed failure line of a subagent run, shown to the user
    # Live only, never in the log or a request: the raw cause of a subagent failure, for /why.
    cause: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class LlmRetry:
    """A failed model request will be sent again after ``delay_s`` seconds."""

    type: ClassVar[str] = "llm/retry"
    durable: ClassVar[bool] = True

    turn: int
    step: int
    attempt: int
    max_attempts: int
    delay_s: float
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class TurnEnd:
    type: ClassVar[str] = "turn/end"
    durable: ClassVar[bool] = True

    turn: int
    reason: EndReason


@dataclass(frozen=True, slots=True)
class JobNotice:
    """A background job settled; ``text`` is what the model is told."""

    type: ClassVar[str] = "job/notice"
    durable: ClassVar[bool] = True

    job_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ContextCompacted:
    """The conversation so far was replaced by a summary the model wrote (``/compact``, or automatically).

    Durable, so a resumed session rebuilds the compacted conversation, not the long one. ``replaced``
    counts the messages the summary stands for; ``usage`` is the summary request's. ``turn`` is set when
    an automatic compaction happened inside a turn (a request was too long), else None.
    """

    type: ClassVar[str] = "context/compact"
    durable: ClassVar[bool] = True

    summary: str
    focus: str | None = None
    replaced: int = 0
    usage: Usage | None = None
    turn: int | None = None


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """A type this version does not know, kept as it was read (never written to this session's log)."""

    durable: ClassVar[bool] = False

    type: str
    data: dict[str, Any]


Event = (
    TurnStart
    | StepStart
    | TextDelta
    | ReasoningDelta
    | StreamKeepAlive
    | AssistantMessage
    | ToolCallStart
    | ToolResult
    | LlmRetry
    | TurnEnd
    | JobNotice
    | ContextCompacted
    | UnknownEvent
)


# --- to the wire ---------------------------------------------------------------------------------


def _data(event: Event) -> dict[str, Any]:
    match event:
        case TextDelta(text=text) | ReasoningDelta(text=text):
            return {"text": text}
        case StreamKeepAlive():
            return {}
        case TurnStart(turn=turn, prompt=prompt, source=source):
            data: dict[str, Any] = {"turn": turn, "prompt": prompt}
            if source is not None:
                data["source"] = source
            return data
        case StepStart(turn=turn, step=step):
            return {"turn": turn, "step": step}
        case AssistantMessage():
            return {
                "turn": event.turn,
                "step": event.step,
                "content": event.content,
                "reasoning_content": event.reasoning_content,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in event.tool_calls],
                "finish_reason": event.finish_reason,
                "interrupted": event.interrupted,
                "usage": asdict(event.usage) if event.usage is not None else None,
            }
        case ToolCallStart(turn=turn, id=call_id, name=name, arguments=arguments):
            return {"turn": turn, "id": call_id, "name": name, "arguments": arguments}
        case ToolResult():
            return {
                "turn": event.turn,
                "id": event.id,
                "name": event.name,
                "output": event.output,
                "is_error": event.is_error,
                "diagnostic": event.diagnostic,
            }
        case LlmRetry():
            return {
                "turn": event.turn,
                "step": event.step,
                "attempt": event.attempt,
                "max_attempts": event.max_attempts,
                "delay_s": event.delay_s,
                "code": str(event.code),
                "message": event.message,
            }
        case TurnEnd(turn=turn, reason=reason):
            return {"turn": turn, "reason": reason.to_dict()}
        case JobNotice(job_id=job_id, text=text):
            return {"job_id": job_id, "text": text}
        case ContextCompacted():
            compacted: dict[str, Any] = {"turn": event.turn} if event.turn is not None else {}
            compacted.update(summary=event.summary, focus=event.focus, replaced=event.replaced,
                             usage=asdict(event.usage) if event.usage is not None else None)
            return compacted
        case UnknownEvent(data=data):
            return dict(data)
    raise TypeError(f"not a dsh event: {event!r}")


def to_wire(event: Event) -> dict[str, Any]:
    """``{"type", "data"}`` for the session log and ``session/event`` notifications."""
    return {"type": event.type, "data": _data(event)}


# --- from the wire -------------------------------------------------------------------------------
# Lenient on purpose: a field of the wrong type reads as its default instead of failing the load.
# Resuming decodes every record of a log (100 000s), so the decoders avoid per-field calls.


def _int(value: Any) -> int:
    return value if type(value) is int else 0


def _str(value: Any) -> str:
    return value if type(value) is str else ""


def _opt_str(value: Any) -> str | None:
    return value if type(value) is str else None


def _float(value: Any) -> float:
    return float(value) if type(value) is float or type(value) is int else 0.0


def _tool_calls(value: Any) -> tuple[ToolCall, ...]:
    if not value or type(value) is not list:
        return ()
    calls = []
    for call in value:
        if type(call) is dict and type(call_id := call.get("id")) is str:
            calls.append(ToolCall(call_id, _str(call.get("name")), _str(call.get("arguments"))))
    return tuple(calls)


_USAGE_FIELDS = tuple(Usage.__dataclass_fields__)


def _usage(value: Any) -> Usage | None:
    if type(value) is not dict:
        return None
    get = value.get
    return Usage(*[_int(get(key)) for key in _USAGE_FIELDS])


def _turn_start(data: dict[str, Any]) -> TurnStart:
    get = data.get
    return TurnStart(_int(get("turn")), _str(get("prompt")), _opt_str(get("source")))


def _step_start(data: dict[str, Any]) -> StepStart:
    get = data.get
    return StepStart(_int(get("turn")), _int(get("step")))


def _assistant_message(data: dict[str, Any]) -> AssistantMessage:
    get = data.get
    return AssistantMessage(
        _int(get("turn")),
        _int(get("step")),
        _str(get("content")),
        _opt_str(get("reasoning_content")),
        _tool_calls(get("tool_calls")),
        _opt_str(get("finish_reason")),
        get("interrupted") is True,
        _usage(get("usage")),
    )


def _tool_call_start(data: dict[str, Any]) -> ToolCallStart:
    get = data.get
    return ToolCallStart(_int(get("turn")), _str(get("id")), _str(get("name")), _str(get("arguments")))


def _tool_result(data: dict[str, Any]) -> ToolResult:
    get = data.get
    return ToolResult(
        _int(get("turn")),
        _str(get("id")),
        _str(get("name")),
        _str(get("output")),
        get("is_error") is True,
        _opt_str(get("diagnostic")),
    )


def _llm_retry(data: dict[str, Any]) -> LlmRetry:
    get = data.get
    return LlmRetry(
        _int(get("turn")),
        _int(get("step")),
        _int(get("attempt")),
        _int(get("max_attempts")),
        _float(get("delay_s")),
        _str(get("code")),
        _str(get("message")),
    )


def _turn_end(data: dict[str, Any]) -> TurnEnd:
    reason = data.get("reason")
    return TurnEnd(_int(data.get("turn")), EndReason.from_dict(reason if type(reason) is dict else {}))


def _job_notice(data: dict[str, Any]) -> JobNotice:
    return JobNotice(_str(data.get("job_id")), _str(data.get("text")))


def _context_compacted(data: dict[str, Any]) -> ContextCompacted:
    get = data.get
    turn = get("turn")
    return ContextCompacted(_str(get("summary")), _opt_str(get("focus")), _int(get("replaced")), _usage(get("usage")),
                            turn if type(turn) is int else None)


_DECODERS: dict[str, Callable[[dict[str, Any]], Event]] = {
    TextDelta.type: lambda data: TextDelta(_str(data.get("text"))),
    ReasoningDelta.type: lambda data: ReasoningDelta(_str(data.get("text"))),
    StreamKeepAlive.type: lambda data: StreamKeepAlive(),
    TurnStart.type: _turn_start,
    StepStart.type: _step_start,
    AssistantMessage.type: _assistant_message,
    ToolCallStart.type: _tool_call_start,
    ToolResult.type: _tool_result,
    LlmRetry.type: _llm_retry,
    TurnEnd.type: _turn_end,
    JobNotice.type: _job_notice,
    ContextCompacted.type: _context_compacted,
}


def from_wire(record: Mapping[str, Any]) -> Event:
    """The event of a ``{"type", "data"}`` mapping (a session-log record or a notification's event)."""
    kind = record.get("type")
    data = record.get("data")
    if type(data) is not dict:
        data = dict(data) if isinstance(data, Mapping) else {}
    decode = _DECODERS.get(kind) if type(kind) is str else None
    if decode is None:
        return UnknownEvent(kind if type(kind) is str else "", dict(data))
    return decode(data)
