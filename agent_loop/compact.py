"""Compaction: a summary the model writes of the conversation so far stands in for it from then on.

A long session ends in ``CONTEXT_WINDOW_EXCEEDED`` unless something gives; ``/compact [focus]`` (and,
when configured, an automatic compaction on that error) asks the model for a summary through the same
client, with no tools, and the agent replaces the conversation by it (docs/compaction.md). This module
holds the policy: the instruction, the message the summary becomes, and the requests to try in order.

Requests, cheapest first: the conversation as it is plus the instruction (its prefix is the one the
last request sent, so the provider's prompt cache serves most of it); if the provider refuses that as
too long (or malformed, e.g. tool calls with no tool definitions), the conversation flattened into one
plain-text transcript, its oldest half cut, then its oldest three quarters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator, Sequence

from dsh.agent_loop.events import ContextCompacted
from dsh.llm import ChatRequest, ErrorCode, HarnessError, Message, ReplyBuilder

__all__ = [
    "COMPACT_INSTRUCTION",
    "FALLBACK_CODES",
    "SUMMARY_HEADER",
    "compaction_attempts",
    "summarize",
    "summary_message",
    "transcript",
]

COMPACT_INSTRUCTION = (
    "Summarize the conversation so far, for yourself: it will be replaced by your summary, and you will "
    "continue from the summary alone. Keep what the work needs: the user's goals and requests (the latest "
    "one exactly), decisions and their reasons, files, paths and commands involved, what was done and what "
    "came of it, errors met, and what is still to do. Be concise and complete; plain text, no preamble."
)
FOCUS_LINE = "Give most room to: {focus}"
SUMMARY_HEADER = (
    "[The conversation was compacted to save context. This is the summary of everything before this "
    "point, written by you.]\n\n"
)
# A refusal of the whole conversation that a shorter, plain request may avoid.
FALLBACK_CODES = frozenset({ErrorCode.CONTEXT_WINDOW_EXCEEDED, ErrorCode.INVALID_REQUEST})
_CUTS = (2, 4)  # the flattened transcript keeps its newest 1/2, then 1/4
_CUT_MARK = "[… the oldest part of the conversation was cut to fit …]\n"


def summary_message(summary: str) -> Message:
    """The message the summary becomes: the first one after the system prompt."""
    return Message("user", SUMMARY_HEADER + summary)


def _instruction(focus: str | None) -> str:
    return COMPACT_INSTRUCTION + ("\n\n" + FOCUS_LINE.format(focus=focus) if focus else "")


def transcript(history: Sequence[Message]) -> str:
    """The conversation as plain text, one labelled block per message (tool calls and results included)."""
    parts: list[str] = []
    for message in history:
        if message.role == "tool":
            parts.append(f"[tool result]\n{message.content}")
            continue
        if message.content:
            parts.append(f"[{message.role}]\n{message.content}")
        for call in message.tool_calls:
            parts.append(f"[tool call] {call.name}({call.arguments})")
    return "\n\n".join(parts)


def compaction_attempts(messages: Sequence[Message], focus: str | None) -> Iterator[tuple[Message, ...]]:
    """The message lists to send, in order; the caller moves on only after a :data:`FALLBACK_CODES` refusal."""
    system = tuple(m for m in messages[:1] if m.role == "system")
    history = [m for m in messages if m.role != "system"]
    instruction = Message("user", _instruction(focus))
    yield (*system, *history, instruction)
    text = transcript(history)
    for cut in _CUTS:
        keep = text[len(text) - len(text) // cut :]
        body = "The conversation so far, as a transcript:\n\n" + _CUT_MARK + keep + "\n\n" + instruction.content
        yield (*system, Message("user", body))


async def summarize(
    template: ChatRequest,
    messages: Sequence[Message],
    focus: str | None,
    turn: int | None,
    stream: Callable[[ChatRequest], Awaitable[ReplyBuilder]],
) -> ContextCompacted:
    """Ask the model for the summary of ``messages`` (``template``'s settings, no tools): each of
    :func:`compaction_attempts` in turn through ``stream``, moving on only when one is refused as too long."""
    replaced = sum(1 for message in messages if message.role != "system")
    refused: HarnessError | None = None
    for attempt in compaction_attempts(messages, focus):
        try:
            builder = await stream(dataclasses.replace(template, messages=attempt, tools=()))
        except HarnessError as exc:
            if exc.code not in FALLBACK_CODES:
                raise
            refused = exc
            continue
        summary = builder.text.strip()
        if builder.finish_reason == "length":
            raise HarnessError("the summary was cut off at the output-token limit", ErrorCode.COMPACT)
        if not summary:
            raise HarnessError("the model wrote an empty summary", ErrorCode.COMPACT)
        return ContextCompacted(summary, focus or None, replaced, builder.usage, turn)
    assert refused is not None
    raise refused
