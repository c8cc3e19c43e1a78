"""The resume pass: a session log opened to continue, its conversation rebuilt in the same single pass and
cut to the model's window as it goes (docs/architecture.md, "The session log"), so memory follows the
conversation, not the file."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dsh.agent_loop.conversation import Conversation
from dsh.agent_loop.events import TurnEnd, from_wire
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.usage import CHARS_PER_TOKEN as _CHARS_PER_TOKEN
from dsh.llm import Message

__all__ = ["RESUME_WINDOWS", "UNKNOWN_WINDOW", "open_session", "rebuild", "resume_budget"]

# What the resume pass keeps of a conversation longer than the model's window: twice the window (by
# estimate, :func:`~dsh.agent_loop.conversation.message_tokens`; a real tokenizer may count fewer), so that no
# conversation the server could still accept is cut; a model with no known window counts as one of UNKNOWN_WINDOW
# tokens.
RESUME_WINDOWS = 2
UNKNOWN_WINDOW = 1_048_576


def resume_budget(window: int | None) -> int:
    """The estimated tokens a resumed conversation keeps for a model with this context ``window``."""
    return RESUME_WINDOWS * (window or UNKNOWN_WINDOW)


_CHECK_EVERY = 32  # messages added between two looks at what is held (memory: twice the budget and these)


class _Bounded:
    """The resume pass's running cut: :meth:`Conversation.fit` whenever what is held passes twice the budget.

    Counts the characters the conversation holds as it grows (only the messages added since the last
    look; a trigger, so characters over four stand in for tokens), so the pass stays linear; memory stays
    within about twice the budget plus the open turn.
    """

    def __init__(self, conversation: Conversation, budget: int) -> None:
        self.conversation = conversation
        self.budget = budget
        self.dropped = 0
        self._limit = 2 * budget * _CHARS_PER_TOKEN
        self._seen: list[Message] = conversation.messages
        self._counted = 0
        self._held = 0  # characters

    def check(self) -> None:
        conversation = self.conversation
        messages = conversation.messages
        if messages is not self._seen or len(messages) < self._counted:  # a compaction replaced them
            self._seen, self._counted, self._held = messages, 0, 0
        elif len(messages) - self._counted < _CHECK_EVERY:
            return  # counted a few turns at a time: a look per turn cost more than the cut it guards
        self._held += _chars(messages[self._counted :])
        self._counted = len(messages)
        if self._held > self._limit and conversation.between_turns:
            self.finish()

    def finish(self) -> None:
        if not self.conversation.between_turns:
            return
        self.dropped += self.conversation.fit(self.budget)
        messages = self._seen = self.conversation.messages
        self._counted = len(messages)
        self._held = _chars(messages)


def _chars(messages: list[Message]) -> int:
    held = sum([len(message.content) for message in messages])
    held += sum([len(message.reasoning_content) for message in messages if message.reasoning_content])
    return held + sum([len(call.arguments) for message in messages for call in message.tool_calls])


def open_session(
    id_or_last: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    system_prompt: str | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    record_kinds: frozenset[str] | None = None,
    window: int | None = None,
) -> tuple[SessionLog, Conversation]:
    """Open a session to continue and rebuild its conversation in the same single pass over the log.

    Memory follows the conversation, not the file (docs/architecture.md, the session log); pass both to
    :class:`~dsh.agent_loop.agent.Agent` (``session=``, ``conversation=``). ``on_record`` sees each record of that
    pass too (the front end's resume recap, :class:`~dsh.agent_loop.recap.Recap`), or only those of ``record_kinds``
    when given (a hook that reads a few types is not called 100 000s of times for nothing). With ``window`` (the
    model's context window in tokens; 0 for unknown) the conversation is cut to
    :func:`resume_budget` as it is rebuilt (:meth:`Conversation.fit`): what the next request can hold,
    not the whole log. :attr:`Conversation.resume_dropped` says how many messages the cut left out.
    """
    conversation = Conversation(system_prompt)
    handlers = conversation.record_handlers()
    bounded = _Bounded(conversation, resume_budget(window)) if window is not None else None
    if bounded is not None:  # the running cut looks at each turn's end, once the conversation has it
        end_turn = handlers[TurnEnd.type]

        def turn_end(data: dict[str, Any]) -> None:
            end_turn(data)
            bounded.check()

        handlers[TurnEnd.type] = turn_end
    hook = handlers.get
    wanted = record_kinds

    def take(records: list[dict[str, Any]]) -> None:
        for record in records:  # one call per batch of records, not per record: 100 000s of them
            kind = record["type"]  # a str: the log's reader keeps no record without one
            handler = hook(kind)
            if handler is not None:
                data = record.get("data")
                handler(data if type(data) is dict else {})
            if on_record is not None and (wanted is None or kind in wanted):
                on_record(record)

    session = SessionLog.open(id_or_last, root, on_records=take)
    if bounded is not None:
        bounded.finish()
        conversation.resume_dropped = bounded.dropped
    return session, conversation


def rebuild(conversation: Conversation, session: SessionLog) -> None:
    """Apply a session's events to ``conversation``: the same as applying ``session.events()``, one record at a
    time, streamed from the file (no cut: the agent given a log without its conversation)."""
    apply = conversation.apply
    with gc_paused():  # the collector is paused while 100 000s of messages build
        for record in session.iter_records():
            apply(from_wire(record))
