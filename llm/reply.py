"""Assemble stream events into one assistant reply, linear in its size."""

from __future__ import annotations

from dataclasses import dataclass, field

from dsh.llm.events import Finish, Message, ReasoningDelta, StreamEvent, TextDelta, ToolCall, ToolCallDelta, Usage

__all__ = ["MAX_TOOL_CALLS", "ReplyBuilder"]

MAX_TOOL_CALLS = 128
"""Tool calls kept from one reply; the builder keeps one more to carry the "dropped" result and ignores
the rest, so a response of 10^6 calls costs what 129 do (docs/reliability.md, "Hostile streams")."""


@dataclass
class _PartialCall:
    id: str | None = None
    name: str | None = None
    fragments: list[str] = field(default_factory=list)


class ReplyBuilder:
    """Collects deltas in lists (never repeated string concatenation) and joins them on demand."""

    def __init__(self, max_tool_calls: int = MAX_TOOL_CALLS) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._max_calls = max_tool_calls
        self.dropped_calls = False  # more calls came than max_tool_calls + 1 (the extra ones are ignored)
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def feed(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self._calls.get(event.index)
            if call is None:
                if len(self._calls) > self._max_calls:
                    self.dropped_calls = True
                    return
                call = self._calls[event.index] = _PartialCall()
            if event.id and not call.id:
                call.id = event.id
            if event.name and not call.name:
                call.name = event.name
            if event.arguments:
                call.fragments.append(event.arguments)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.finish_reason = event.reason

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def has_shown_content(self) -> bool:
        """Whether text or reasoning came: what a front end draws as it streams. A tool call is drawn only
        once its reply is whole, so a half-received one was never shown (a retry drops it)."""
        return any(self._text) or any(self._reasoning)

    @property
    def began_tool_calls(self) -> bool:
        """Whether any tool call has begun arriving, whole or not."""
        return bool(self._calls)

    @property
    def over_limit(self) -> bool:
        """Whether the reply holds more calls than may run: the last one kept stands for the rest."""
        return len(self._calls) > self._max_calls

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Calls in wire-index order; a call that never got a name is dropped."""
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if call.name:
                arguments = "".join(call.fragments)
                call.fragments[:] = [arguments] if arguments else []  # held once, not as parts and whole
                calls.append(ToolCall(call.id or f"call_{index}", call.name, arguments))
        return calls

    def message(self, *, keep_reasoning: bool = True) -> Message:
        """The complete assistant message (``content`` is always a string)."""
        reasoning = self.reasoning
        calls = tuple(self.tool_calls)
        return Message(
            "assistant",
            self.text,
            reasoning_content=reasoning if (keep_reasoning and (reasoning or calls)) else None,
            tool_calls=calls,
        )

    def interrupted_message(self) -> Message | None:
        """The streamed text/reasoning prefix after a cancel; half-streamed tool calls are dropped."""
        text, reasoning = self.text, self.reasoning
        if not text and not reasoning:
            return None
        return Message("assistant", text, reasoning_content=reasoning or None)
