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

import base64
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any, ClassVar, get_args

from dsh.agent_loop.plan import PlanItem, items_from_wire, items_to_wire
from dsh.agent_loop.reasons import EndReason
from dsh.llm import Image, ToolCall, Usage

__all__ = [
    "AssistantMessage",
    "CacheDrop",
    "ContextCompacted",
    "Event",
    "HookContext",
    "HookRan",
    "JobNotice",
    "LlmContinue",
    "LlmRetry",
    "ModelSet",
    "PlanUpdate",
    "ReasoningDelta",
    "ShellRun",
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
    "wire_reader",
]

# How a field is on the wire, when not simply always (field metadata; the codec below reads it).
_LIVE = {"wire": "live"}  # never: live only
_IF_SET = {"wire": "if-set"}  # only when not None (a field added after logs without it existed)
_LEADS = {"wire": "leads"}  # only when not None, and first (where the version that added it wrote it)


class _Known:
    """What each event of this vocabulary says about itself: its wire ``type``, and whether it is ``durable``."""

    __slots__ = ()
    type: ClassVar[str]
    durable: ClassVar[bool] = True  # the live-only events (deltas, keep-alives) say False


@dataclass(frozen=True, slots=True)
class TurnStart(_Known):
    type: ClassVar[str] = "turn/start"

    turn: int
    prompt: str
    source: str | None = field(default=None, metadata=_IF_SET)  # "notice": a turn that delivers job notices
    # The permission mode the turn started in, when not "default" (docs/safety.md); a change during the turn
    # applies to its next tool call and is not recorded.
    mode: str | None = field(default=None, metadata=_IF_SET)
    # The images the prompt sends (docs/prompt.md, "Images"): their bytes only with keep_images.
    images: tuple[Image, ...] | None = field(default=None, metadata=_IF_SET)


@dataclass(frozen=True, slots=True)
class StepStart(_Known):
    type: ClassVar[str] = "step/start"

    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class TextDelta(_Known):
    type: ClassVar[str] = "text/delta"
    durable: ClassVar[bool] = False

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta(_Known):
    type: ClassVar[str] = "reasoning/delta"
    durable: ClassVar[bool] = False

    text: str


@dataclass(frozen=True, slots=True)
class StreamKeepAlive(_Known):
    """The model's stream sent a keep-alive: the connection is alive, nothing arrived."""

    type: ClassVar[str] = "stream/keepalive"
    durable: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class AssistantMessage(_Known):
    """One step's reply. ``interrupted``: the prefix streamed before the turn was cut short."""

    type: ClassVar[str] = "assistant/message"

    turn: int
    step: int
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    interrupted: bool = False
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class ToolCallStart(_Known):
    """A tool call is about to run (published before its :class:`ToolResult`)."""

    type: ClassVar[str] = "tool/call"

    turn: int
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it


@dataclass(frozen=True, slots=True)
class ToolResult(_Known):
    type: ClassVar[str] = "tool/result"

    turn: int
    id: str
    name: str
    output: str
    is_error: bool = False
    diagnostic: str | None = None  # the closed failure line of a subagent run, shown to the user
    images: tuple[Image, ...] | None = field(default=None, metadata=_IF_SET)  # an image read_file read
    # Live only, never in the log or a request: the raw cause of a subagent failure, for /why.
    cause: BaseException | None = field(default=None, compare=False, repr=False, metadata=_LIVE)


@dataclass(frozen=True, slots=True)
class LlmRetry(_Known):
    """A failed model request will be sent again after ``delay_s`` seconds."""

    type: ClassVar[str] = "llm/retry"

    turn: int
    step: int
    attempt: int
    max_attempts: int
    delay_s: float
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class LlmContinue(_Known):
    """A step's reply is continued by prefix completion (agent_loop/continuation.py): its stream was cut (``code``
    the failure's, ``message`` its masked cause chain) or it stopped at the output-token limit (``code``
    ``"length"``, ``usage`` that request's); ``kept_chars`` of its text are the prefix."""

    type: ClassVar[str] = "llm/continue"

    turn: int
    step: int
    attempt: int
    max_attempts: int
    code: str
    kept_chars: int
    message: str = ""
    usage: Usage | None = None
    # Live only: the cut's raw failure, for /why (the turn may still complete).
    cause: BaseException | None = field(default=None, compare=False, repr=False, metadata=_LIVE)


@dataclass(frozen=True, slots=True)
class TurnEnd(_Known):
    type: ClassVar[str] = "turn/end"

    turn: int
    reason: EndReason


@dataclass(frozen=True, slots=True)
class JobNotice(_Known):
    """A background job settled; ``text`` is what the model is told."""

    type: ClassVar[str] = "job/notice"

    job_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ContextCompacted(_Known):
    """The conversation so far was replaced by a summary the model wrote (``/compact``, or automatically).

    Durable, so a resumed session rebuilds the compacted conversation, not the long one. ``replaced``
    counts the messages the summary stands for; ``usage`` is the summary request's. ``turn`` is set when
    an automatic compaction happened inside a turn (a request was too long), else None.
    """

    type: ClassVar[str] = "context/compact"

    summary: str
    focus: str | None = None
    replaced: int = 0
    usage: Usage | None = None
    turn: int | None = field(default=None, metadata=_LEADS)


@dataclass(frozen=True, slots=True)
class CacheDrop(_Known):
    """After turn ``turn`` the session saw its prompt-cache hit rate (``rate``, 0 to 1) fall well below the previous
    turn's (``previous``); ``change`` names what changed in the request prefix (agent_loop/cache_watch.py). Written by
    the session, after the turn's end: an older dsh reads it as an unknown record and ignores it."""

    type: ClassVar[str] = "cache/drop"

    turn: int
    rate: float
    previous: float
    change: str


@dataclass(frozen=True, slots=True)
class ModelSet(_Known):
    """``/model NAME`` or ``/profile NAME`` set the model of the next requests; a resume restores the last one. Written
    by the front end between turns: an older dsh reads it as an unknown record and ignores it."""

    type: ClassVar[str] = "model/set"

    model: str


@dataclass(frozen=True, slots=True)
class PlanUpdate(_Known):
    """The model sent its whole plan with ``todo_write`` (agent_loop/tools/plan.py): the current plan is the last
    one; a resume restores it. An older dsh reads it as an unknown record and ignores it."""

    type: ClassVar[str] = "plan/update"

    turn: int
    items: tuple[PlanItem, ...] = ()


@dataclass(frozen=True, slots=True)
class HookContext(_Known):
    """What a ``UserPromptSubmit`` hook printed for the model (docs/hooks.md): it joins the turn's prompt, under
    ``[UserPromptSubmit hook]``; masked and bounded as a hook's reason is."""

    type: ClassVar[str] = "hook/context"

    turn: int
    event: str
    text: str


@dataclass(frozen=True, slots=True)
class HookRan(_Known):
    """A hook ran (docs/hooks.md): closed facts only, never what it printed. ``outcome`` is go | block | ask |
    refused | error; ``category`` (timeout | not-found | exit | crash) when it failed."""

    type: ClassVar[str] = "hook/run"

    event: str
    hook: str
    outcome: str
    category: str | None = None
    exit_code: int | None = None
    duration_s: float = 0.0
    tool: str | None = None


@dataclass(frozen=True, slots=True)
class ShellRun(_Known):
    """The user ran ``!command`` at the prompt (docs/prompt.md): closed facts, never the output (the model sees it
    only when a prompt attaches it, and then the user message holds it). ``command`` is masked and cut."""

    type: ClassVar[str] = "shell/run"

    command: str
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    output_bytes: int = 0
    sandboxed: bool = False


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """A type this version does not know, kept as it was read (never written to this session's log)."""

    durable: ClassVar[bool] = False

    type: str
    data: dict[str, Any]


_KnownEvent = (
    TurnStart
    | StepStart
    | TextDelta
    | ReasoningDelta
    | StreamKeepAlive
    | AssistantMessage
    | ToolCallStart
    | ToolResult
    | LlmRetry
    | LlmContinue
    | TurnEnd
    | JobNotice
    | ContextCompacted
    | CacheDrop
    | HookRan
    | HookContext
    | ShellRun
    | ModelSet
    | PlanUpdate
)
Event = _KnownEvent | UnknownEvent


# --- the wire form, derived from the fields -------------------------------------------------------
# Each field's annotation names how it reads and writes. Reading is lenient on purpose: a field of the
# wrong type reads as its default instead of failing the load. Resuming decodes every record of a log
# (100 000s), so the converters are plain functions on the value, without isinstance chains.


def _int(value: Any) -> int:
    return value if type(value) is int else 0


def _opt_int(value: Any) -> int | None:
    return value if type(value) is int else None


def _str(value: Any) -> str:
    return value if type(value) is str else ""


def _opt_str(value: Any) -> str | None:
    return value if type(value) is str else None


def _true(value: Any) -> bool:
    return value is True


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


def _reason(value: Any) -> EndReason:
    return EndReason.from_dict(value if type(value) is dict else {})


def _same(value: Any) -> Any:
    return value


def _plain_str(value: Any) -> str:
    return value if type(value) is str else str(value)  # an ErrorCode member is written as its text


def _images(value: Any) -> tuple[Image, ...] | None:
    if not value or type(value) is not list:
        return None
    images = []
    for item in value:
        if type(item) is dict and type(digest := item.get("sha256")) is str:
            data = item.get("data")
            try:
                raw = base64.b64decode(data, validate=True) if type(data) is str else None
            except ValueError:
                raw = None
            images.append(Image(_str(item.get("name")), _str(item.get("media_type")), digest, _int(item.get("size")),
                                _int(item.get("tokens")), raw, keep=raw is not None))
    return tuple(images) or None


def _images_to_wire(images: tuple[Image, ...] | None) -> list[dict[str, Any]] | None:
    if images is None:
        return None
    wire = []
    for image in images:
        item: dict[str, Any] = {"name": image.name, "media_type": image.media_type, "sha256": image.sha256,
                                "size": image.size, "tokens": image.tokens}
        if image.keep and image.data is not None:
            item["data"] = base64.b64encode(image.data).decode("ascii")
        wire.append(item)
    return wire


def _tool_calls_to_wire(calls: tuple[ToolCall, ...]) -> list[dict[str, str]]:
    return [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in calls]


def _usage_to_wire(usage: Usage | None) -> dict[str, int] | None:
    return asdict(usage) if usage is not None else None


def _reason_to_wire(reason: EndReason) -> dict[str, Any]:
    return reason.to_dict()


Converter = Callable[[Any], Any]


def wire_reader(annotation: str) -> Converter:
    """How a field annotated ``annotation`` is read from the wire (``"str"``, ``"tuple[ToolCall, ...]"``): for a
    reader of records that skips building the event (the resume pass, ``Conversation.apply_record``)."""
    return _CONVERTERS[annotation][0]

# annotation -> (from the wire, to the wire)
_CONVERTERS: dict[str, tuple[Converter, Converter]] = {
    "int": (_int, _same),
    "int | None": (_opt_int, _same),
    "str": (_str, _plain_str),
    "str | None": (_opt_str, _same),
    "bool": (_true, _same),
    "float": (_float, _same),
    "tuple[ToolCall, ...]": (_tool_calls, _tool_calls_to_wire),
    "tuple[Image, ...] | None": (_images, _images_to_wire),
    "Usage | None": (_usage, _usage_to_wire),
    "EndReason": (_reason, _reason_to_wire),
    "tuple[PlanItem, ...]": (items_from_wire, items_to_wire),
}


@dataclass(frozen=True, slots=True)
class _Codec:
    """One event class's wire form: its fields in constructor order and in wire order."""

    kind: str  # the wire ``type``
    decode: Callable[[dict[str, Any]], Event]
    wire: tuple[tuple[str, Callable[[Any], Any], Converter, bool], ...]  # name, read it, convert, only if set

    @classmethod
    def of(cls, event_class: type[_KnownEvent]) -> _Codec:
        kept = [f for f in fields(event_class) if f.metadata.get("wire") != "live"]
        # Live-only fields are the trailing ones, so that a positional call leaves them at their defaults.
        assert [f.name for f in fields(event_class)][: len(kept)] == [f.name for f in kept], event_class
        readers = tuple((f.name, _CONVERTERS[str(f.type)][0]) for f in kept)

        def decode(data: dict[str, Any]) -> Event:
            get = data.get
            return event_class(*[convert(get(name)) for name, convert in readers])

        ordered = sorted(kept, key=lambda f: f.metadata.get("wire") != "leads")  # stable: the rest keep their order
        wire = tuple(
            (f.name, attrgetter(f.name), _CONVERTERS[str(f.type)][1], f.metadata.get("wire") in ("if-set", "leads"))
            for f in ordered
        )
        return cls(event_class.type, decode, wire)

    def data(self, event: Event) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name, read, convert, only_if_set in self.wire:
            value = read(event)
            if value is not None or not only_if_set:
                data[name] = convert(value)
        return data


_CODECS: dict[type, _Codec] = {event_class: _Codec.of(event_class) for event_class in get_args(_KnownEvent)}
_BY_TYPE: dict[str, _Codec] = {codec.kind: codec for codec in _CODECS.values()}


def to_wire(event: Event) -> dict[str, Any]:
    """``{"type", "data"}`` for the session log and ``session/event`` notifications."""
    if type(event) is UnknownEvent:
        return {"type": event.type, "data": dict(event.data)}
    codec = _CODECS.get(type(event))
    if codec is None:
        raise TypeError(f"not a dsh event: {event!r}")
    return {"type": event.type, "data": codec.data(event)}


def from_wire(record: Mapping[str, Any]) -> Event:
    """The event of a ``{"type", "data"}`` mapping (a session-log record or a notification's event)."""
    kind = record.get("type")
    data = record.get("data")
    if type(data) is not dict:
        data = dict(data) if isinstance(data, Mapping) else {}
    codec = _BY_TYPE.get(kind) if type(kind) is str else None
    if codec is None:
        return UnknownEvent(kind if type(kind) is str else "", dict(data))
    return codec.decode(data)
