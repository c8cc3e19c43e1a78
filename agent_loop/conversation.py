"""The conversation: the messages of the next request, a pure function of the durable events.

The live conversation and the one rebuilt from a log on resume (agent_loop/resume.py) are the same by
construction: both apply the same events in order (:class:`Conversation`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.agent_loop.compact import summary_message
from dsh.agent_loop.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    HookContext,
    JobNotice,
    StepStart,
    ToolResult,
    TurnEnd,
    TurnStart,
    wire_reader,
)
from dsh.agent_loop.usage import tokens_for_chars
from dsh.llm import Image, Message, ToolCall

__all__ = ["HOOK_SOURCE", "NOTICE_SOURCE", "UNFINISHED_TOOL_OUTPUT", "Conversation", "message_tokens"]

UNFINISHED_TOOL_OUTPUT = "Error: tool call did not complete: the turn ended"
NOTICE_SOURCE = "notice"  # the source of a turn started to deliver the queued job notices
HOOK_SOURCE = "hook"  # the source of a turn a Stop hook's reason started (agent_loop/session_extensions.py)

_read_str, _read_opt_str = wire_reader("str"), wire_reader("str | None")
_read_calls = wire_reader("tuple[ToolCall, ...]")
_read_images = wire_reader("tuple[Image, ...] | None")


def message_tokens(message: Message) -> int:
    """A message's estimated tokens (:func:`~dsh.agent_loop.usage.estimate_tokens` of all its text), summed per
    message so that a run's count is the sum of its messages'."""
    chars = len(message.content) + len(message.reasoning_content or "")
    for call in message.tool_calls:
        chars += len(call.name) + len(call.arguments)
    return tokens_for_chars(chars) + sum(image.tokens for image in message.images)


def _assistant_to_message(event: AssistantMessage) -> Message | None:
    """The message sent back to the model for an ``assistant/message``, or None for nothing."""
    return _reply_to_message(event.content, event.reasoning_content, event.tool_calls)


def _reply_to_message(content: str, reasoning: str | None, calls: tuple[ToolCall, ...]) -> Message | None:
    if calls:
        # Thinking mode answers 400 unless tool-call messages carry their reasoning back, even "".
        return Message("assistant", content, reasoning_content=reasoning or "", tool_calls=calls)
    if not content:
        return None  # an empty or reasoning-only prefix: nothing the model needs back
    return Message("assistant", content)


class Conversation:
    """Messages for the next request, maintained by applying durable events in order.

    Rules (the same live and on resume): a turn's prompt joins the conversation at its first
    ``step/start``, with what its ``UserPromptSubmit`` hooks added (``hook/context``) below it; queued
    ``job/notice`` texts join as user messages at the next ``step/start`` (a point where every tool call
    has its result); a turn that produced no assistant message leaves no trace (its prompt is withdrawn,
    its notices re-queued), so a failed or rejected prompt is not silently resent with the next one. A
    ``context/compact`` replaces everything but the system prompt by the summary; inside a turn (an
    automatic compaction) the summary stands for the turn so far too.
    """

    def __init__(self, system_prompt: str | None = None) -> None:
        self.messages: list[Message] = [Message("system", system_prompt)] if system_prompt else []
        self._summary_head = False  # the first message after the system prompt is a compaction's summary
        self.resume_dropped = 0  # messages the resume pass cut to the model's window (agent_loop/resume.py)
        self._notices: list[str] = []
        self._turn_mark: int | None = None
        self._turn_prompt: str | None = None
        self._turn_images: tuple[Image, ...] = ()
        self._read_images: list[Image] = []  # images tools returned, sent in a user message at the next step
        self._turn_notices: list[str] = []
        self._turn_has_reply = False
        self._first_step = False
        self._open_calls: dict[str, str] = {}

    @property
    def pending_notices(self) -> list[str]:
        return list(self._notices)

    def set_system_prompt(self, text: str | None) -> None:
        """Replace the system message (between turns: it is not in the log, so resume sets it again)."""
        assert self._turn_mark is None, "the system prompt changes between turns only"
        if self.messages and self.messages[0].role == "system":
            del self.messages[0]
        if text:
            self.messages.insert(0, Message("system", text))

    def apply(self, event: Event) -> None:
        """Apply one event; live-only and unknown ones change nothing."""
        if isinstance(event, TurnStart):
            self._turn_start(event.prompt, event.source, event.images)
        elif isinstance(event, StepStart):
            self._step_start()
        elif isinstance(event, AssistantMessage):
            self._reply(_assistant_to_message(event))
        elif isinstance(event, ToolResult):
            self._tool_result(event.id, event.output, event.images)
        elif isinstance(event, JobNotice):
            if event.text:
                self._notices.append(event.text)
        elif isinstance(event, HookContext):
            self._hook_context(event.event, event.text)
        elif isinstance(event, ContextCompacted):
            self._compacted(event.summary)
        elif isinstance(event, TurnEnd):
            self._turn_end()

    def apply_record(self, kind: str, data: Any) -> None:
        """:meth:`apply` of ``from_wire({"type": kind, "data": data})``, without building the event."""
        handler = self.record_handlers().get(kind)
        if handler is not None:
            handler(data if type(data) is dict else {})

    def record_handlers(self) -> dict[str, Callable[[dict[str, Any]], None]]:
        """For each record type the conversation reads, what applies a record's ``data`` (a dict) to it: the
        resume pass's path through 100 000s of records, with no event built (other types change nothing).
        The fields are read with the event codec's own lenient readers
        (:func:`~dsh.agent_loop.events.wire_reader`), so this path and :meth:`apply` see the same values
        (tests/agent_loop/test_resume_window.py holds them equal)."""

        def assistant(data: dict[str, Any]) -> None:
            get = data.get
            self._reply(_reply_to_message(_read_str(get("content")), _read_opt_str(get("reasoning_content")),
                                          _read_calls(get("tool_calls"))))

        def notice(data: dict[str, Any]) -> None:
            text = _read_str(data.get("text"))
            if text:
                self._notices.append(text)

        return {
            StepStart.type: lambda data: self._step_start(),
            ToolResult.type: lambda data: self._tool_result(_read_str(data.get("id")), _read_str(data.get("output")),
                                                            _read_images(data.get("images"))),
            AssistantMessage.type: assistant,
            TurnStart.type: lambda data: self._turn_start(
                _read_str(data.get("prompt")), _read_opt_str(data.get("source")), _read_images(data.get("images"))),
            TurnEnd.type: lambda data: self._turn_end(),
            JobNotice.type: notice,
            HookContext.type: lambda data: self._hook_context(_read_str(data.get("event")),
                                                              _read_str(data.get("text"))),
            ContextCompacted.type: lambda data: self._compacted(_read_str(data.get("summary"))),
        }

    def _turn_start(self, prompt: str, source: str | None, images: tuple[Image, ...] | None) -> None:
        self._turn_mark = len(self.messages)
        self._turn_prompt = prompt
        self._turn_images = images or ()
        self._read_images = []
        self._turn_has_reply = False
        self._first_step = True
        self._open_calls = {}
        self._turn_notices = []
        if source == NOTICE_SOURCE:
            # A turn started to deliver the queued notices: its prompt is their text.
            self._turn_notices, self._notices = self._notices, []

    def _hook_context(self, event: str, text: str) -> None:
        if self._first_step and self._turn_prompt is not None and text:  # before the prompt joins: it goes with it
            self._turn_prompt = f"{self._turn_prompt}\n\n[{event} hook]\n{text}"

    def _step_start(self) -> None:
        if self._first_step:
            self._first_step = False
            self._flush_notices()
            if self._turn_prompt is not None:
                self.messages.append(Message("user", self._turn_prompt, images=self._turn_images))
        else:
            self._flush_notices()
            if self._read_images:  # a tool message carries text only: what read_file read follows as the user's
                names = ", ".join(image.name for image in self._read_images)
                read = tuple(self._read_images)
                self.messages.append(Message("user", f"The image read_file read: {names}", images=read))
                self._read_images = []

    def _reply(self, message: Message | None) -> None:
        if message is not None:
            self.messages.append(message)
            self._turn_has_reply = True
            self._open_calls = {call.id: call.name for call in message.tool_calls}

    def _tool_result(self, call_id: str, output: str, images: tuple[Image, ...] | None = None) -> None:
        if call_id in self._open_calls:
            del self._open_calls[call_id]
            self.messages.append(Message("tool", output, tool_call_id=call_id))
            self._read_images.extend(images or ())

    def _compacted(self, summary: str) -> None:
        system = self.messages[:1] if self.messages and self.messages[0].role == "system" else []
        self.messages = [*system, summary_message(summary)]
        self._summary_head = True
        if self._turn_mark is not None:
            self._turn_mark = len(self.messages)  # nothing before the summary can be withdrawn
            self._turn_notices = []
            self._open_calls = {}

    def _turn_end(self) -> None:
        for call_id in list(self._open_calls):  # defensive: the API rejects unanswered calls
            self.messages.append(Message("tool", UNFINISHED_TOOL_OUTPUT, tool_call_id=call_id))
        self._open_calls = {}
        if self._turn_mark is not None and not self._turn_has_reply:
            del self.messages[self._turn_mark :]
            self._notices[:0] = self._turn_notices
        self._turn_mark = None
        self._turn_prompt = None
        self._turn_images = ()
        self._read_images = []
        self._turn_notices = []

    @property
    def turn_alone(self) -> bool:
        """A turn is open and nothing but the system prompt comes before it: no compaction can shorten its request."""
        return self._turn_mark is not None and all(m.role == "system" for m in self.messages[: self._turn_mark])

    @property
    def between_turns(self) -> bool:
        """No turn is open: the messages are whole turns (a cut may be made, nothing is withdrawn later)."""
        return self._turn_mark is None

    def fit(self, budget: int) -> int:
        """Drop the oldest messages so that the rest fit ``budget`` estimated tokens; how many were dropped.

        The resume pass's cut to the model's window (:func:`~dsh.agent_loop.resume.open_session`,
        docs/architecture.md "The session log"): kept are the system prompt, a compaction's summary at the
        head, and the longest run of the newest messages that starts at a user message and fits what is left
        of ``budget`` (:func:`message_tokens`); if even the newest turn does not fit, it is kept whole from its
        user message. A cut never separates a tool result from its call. Between turns only. The cut of a cut
        with more turns after it is the cut of the whole (the kept run only grows at its new end), so the
        pass may cut as it goes and still end where one cut of everything would.
        """
        assert self._turn_mark is None, "the conversation is cut between turns only"
        messages = self.messages
        head = (1 if messages and messages[0].role == "system" else 0) + (1 if self._summary_head else 0)
        left = budget - sum(message_tokens(message) for message in messages[:head])
        held = 0
        cut: int | None = None  # the oldest user message whose run to the end fits
        index = len(messages) - 1
        while index >= head:
            held += message_tokens(messages[index])
            if held > left:
                break
            if messages[index].role == "user":
                cut = index
            index -= 1
        else:
            return 0  # everything fits: nothing is cut
        if cut is None:  # the newest turn alone is over the budget: kept whole, from its user message
            while index >= head and messages[index].role != "user":
                index -= 1
            if index < head:
                return 0
            cut = index
        del messages[head:cut]
        return cut - head

    def _flush_notices(self) -> None:
        for text in self._notices:
            self.messages.append(Message("user", text))
        self._turn_notices.extend(self._notices)
        self._notices = []
