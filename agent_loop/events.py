"""The one event vocabulary: published live, appended to the session log, rendered by the REPL.

An :class:`Event` is a type string, a JSON-serialisable ``data`` dict and a ``durable`` flag.
Durable events are appended to the session log; live-only ones (deltas, keep-alives) are not.
The builders below are the only place the field names are spelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ASSISTANT_MESSAGE",
    "DURABLE_TYPES",
    "JOB_NOTICE",
    "LLM_RETRY",
    "REASONING_DELTA",
    "STEP_START",
    "STREAM_KEEPALIVE",
    "TEXT_DELTA",
    "TOOL_CALL",
    "TOOL_RESULT",
    "TURN_END",
    "TURN_START",
    "Event",
    "assistant_message",
    "job_notice",
    "keepalive",
    "llm_retry",
    "reasoning_delta",
    "step_start",
    "text_delta",
    "tool_call",
    "tool_result",
    "turn_end",
    "turn_start",
]

TURN_START = "turn/start"
STEP_START = "step/start"
TEXT_DELTA = "text/delta"
REASONING_DELTA = "reasoning/delta"
STREAM_KEEPALIVE = "stream/keepalive"
ASSISTANT_MESSAGE = "assistant/message"
TOOL_CALL = "tool/call"
TOOL_RESULT = "tool/result"
LLM_RETRY = "llm/retry"
TURN_END = "turn/end"
JOB_NOTICE = "job/notice"

DURABLE_TYPES: frozenset[str] = frozenset(
    {TURN_START, STEP_START, ASSISTANT_MESSAGE, TOOL_CALL, TOOL_RESULT, LLM_RETRY, TURN_END, JOB_NOTICE}
)


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    data: dict[str, Any]
    durable: bool

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Event:
        """An event read back from a session-log record (``{"type","seq","time","data"}``)."""
        data = record.get("data")
        kind = str(record.get("type", ""))
        return cls(kind, dict(data) if isinstance(data, Mapping) else {}, kind in DURABLE_TYPES)


def turn_start(turn: int, prompt: str, *, source: str | None = None) -> Event:
    data: dict[str, Any] = {"turn": turn, "prompt": prompt}
    if source is not None:
        data["source"] = source  # "notice": a turn started to deliver background-job notices
    return Event(TURN_START, data, True)


def step_start(turn: int, step: int) -> Event:
    return Event(STEP_START, {"turn": turn, "step": step}, True)


def text_delta(text: str) -> Event:
    return Event(TEXT_DELTA, {"text": text}, False)


def reasoning_delta(text: str) -> Event:
    return Event(REASONING_DELTA, {"text": text}, False)


def keepalive() -> Event:
    return Event(STREAM_KEEPALIVE, {}, False)


def assistant_message(
    turn: int,
    step: int,
    *,
    content: str,
    reasoning_content: str | None,
    tool_calls: list[dict[str, str]],
    finish_reason: str | None,
    interrupted: bool,
    usage: dict[str, int] | None,
) -> Event:
    return Event(
        ASSISTANT_MESSAGE,
        {
            "turn": turn,
            "step": step,
            "content": content,
            "reasoning_content": reasoning_content,
            "tool_calls": tool_calls,
            "finish_reason": finish_reason,
            "interrupted": interrupted,
            "usage": usage,
        },
        True,
    )


def tool_call(turn: int, call_id: str, name: str, arguments: str) -> Event:
    return Event(TOOL_CALL, {"turn": turn, "id": call_id, "name": name, "arguments": arguments}, True)


def tool_result(
    turn: int, call_id: str, name: str, output: str, *, is_error: bool, diagnostic: str | None
) -> Event:
    return Event(
        TOOL_RESULT,
        {
            "turn": turn,
            "id": call_id,
            "name": name,
            "output": output,
            "is_error": is_error,
            "diagnostic": diagnostic,
        },
        True,
    )


def llm_retry(
    turn: int, step: int, *, attempt: int, max_attempts: int, delay_s: float, code: str, message: str
) -> Event:
    return Event(
        LLM_RETRY,
        {
            "turn": turn,
            "step": step,
            "attempt": attempt,
            "max_attempts": max_attempts,
            "delay_s": delay_s,
            "code": code,
            "message": message,
        },
        True,
    )


def turn_end(turn: int, reason: dict[str, Any]) -> Event:
    return Event(TURN_END, {"turn": turn, "reason": reason}, True)


def job_notice(job_id: str, text: str) -> Event:
    return Event(JOB_NOTICE, {"job_id": job_id, "text": text}, True)
