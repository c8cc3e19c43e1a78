"""The resume pass: a session log opened to continue, its conversation rebuilt in the same single pass and
cut to the model's window as it goes (docs/architecture.md, "The session log"), so memory follows the
conversation, not the file."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from dsh.agent_loop.conversation import Conversation
from dsh.agent_loop.events import ContextCompacted, JobNotice, TurnEnd, from_wire
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.recap import Recap
from dsh.agent_loop.resume_prefix import MessageCount, PrefixSkim
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.session_read import Loaded
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
        if messages is not self._seen:  # a compaction replaced them: what a cut left out is in its summary now
            self._seen, self._counted, self._held, self.dropped = messages, 0, 0, 0
        elif len(messages) < self._counted:  # a turn withdrawn
            self._counted, self._held = 0, 0
        elif len(messages) - self._counted < _CHECK_EVERY:
            return  # counted a few turns at a time: a look per turn cost more than the cut it guards
        self._held += _chars(messages[self._counted :])
        self._counted = len(messages)
        if self._held > self._limit and conversation.between_turns:
            self.finish()

    def finish(self) -> None:
        if not self.conversation.between_turns:
            return
        if self.conversation.messages is not self._seen:  # as in check: a compaction since
            self.dropped = 0
        self.dropped += self.conversation.fit(self.budget)
        messages = self._seen = self.conversation.messages
        self._counted = len(messages)
        self._held = _chars(messages)


def _chars(messages: list[Message]) -> int:
    held = sum([len(message.content) for message in messages])
    held += sum([len(message.reasoning_content) for message in messages if message.reasoning_content])
    return held + sum([len(call.arguments) for message in messages for call in message.tool_calls])


class _Rebuild:
    """One pass's conversation, its running cut, and what hears its records (``take``, a batch at a time)."""

    def __init__(self, system_prompt: str | None, window: int | None,
                 on_record: Callable[[dict[str, Any]], None] | None, record_kinds: frozenset[str] | None) -> None:
        self.conversation = conversation = Conversation(system_prompt)
        self.handlers = handlers = conversation.record_handlers()
        self.bounded = bounded = _Bounded(conversation, resume_budget(window)) if window is not None else None
        if bounded is not None:  # the running cut looks at each turn's end, once the conversation has it
            end_turn = handlers[TurnEnd.type]

            def turn_end(data: dict[str, Any]) -> None:
                end_turn(data)
                bounded.check()

            handlers[TurnEnd.type] = turn_end
        compact = handlers[ContextCompacted.type]
        self.compacted = False  # a compaction read in this pass (not one a skimmed prefix left it)

        def compacted(data: dict[str, Any]) -> None:
            compact(data)
            self.compacted = True

        handlers[ContextCompacted.type] = compacted
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

        self.take = take

    def finish(self) -> int:
        """The last cut; the messages the cuts left out."""
        if self.bounded is None:
            return 0
        self.bounded.finish()
        self.conversation.resume_dropped = self.bounded.dropped
        return self.bounded.dropped

    def inherit(self, count: MessageCount) -> None:
        """What a skimmed prefix leaves the conversation: the last compaction's summary, the queued notices."""
        if count.compaction is not None:
            self.handlers[ContextCompacted.type](count.compaction)
            self.compacted = False
        for text in count.notices:
            self.handlers[JobNotice.type]({"text": text})


# The tail a long log's resume reads exactly (agent_loop/resume_prefix.py): message text of this many times the
# budget's characters, by the share of text in the log's last bytes, so that its messages alone pass the budget and
# the cut falls inside it (checked, not assumed: a try that falls short is followed by one four times as long).
TAIL_BUDGETS = 1.25


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
    not the whole log. :attr:`Conversation.resume_dropped` says how many messages the cut left out. A log much
    longer than that, heard by no hook or by a :class:`Recap`, has the part the cut leaves out skimmed
    (agent_loop/resume_prefix.py), with the same result.
    """
    recap = on_record if isinstance(on_record, Recap) else None
    if window is None or (on_record is not None and recap is None):
        full = _Rebuild(system_prompt, window, on_record, record_kinds)
        session = SessionLog.open(id_or_last, root, on_records=full.take)
        full.finish()
        return session, full.conversation
    first = _Attempt(system_prompt, window, recap, record_kinds, TAIL_BUDGETS)
    session = SessionLog.open(id_or_last, root, on_records=first.take, prefix=first)
    return session, first.settled(recap)


class _Attempt:
    """One try at a resume pass with a skimmed prefix (session_read.PrefixReader): a tail of ``budgets`` times the
    budget's characters of text. When the skim does not stand, the next try reads a tail four times as long, and
    the last reads the whole log exactly (``budgets`` 0)."""

    def __init__(self, system_prompt: str | None, window: int, recap: Recap | None,
                 record_kinds: frozenset[str] | None, budgets: float) -> None:
        self._args = (system_prompt, window, recap, record_kinds)
        self.budgets = budgets
        self.recap = Recap(info=recap.info) if recap is not None and budgets else recap  # the caller's: once it stands
        self.rebuild = rebuild = _Rebuild(system_prompt, window, self.recap, record_kinds)
        tail_chars = int(budgets * resume_budget(window) * _CHARS_PER_TOKEN)
        self.skim = PrefixSkim(tail_chars, self.recap, rebuild.inherit, self._cut) if budgets else None
        self.take = self.skim.watch(rebuild.take) if self.skim is not None else rebuild.take
        self.next: _Attempt | None = None

    def _cut(self) -> bool:
        """Whether the tail's cut left messages out, or a compaction in the tail replaced the prefix's."""
        return self.rebuild.finish() > 0 or self.rebuild.compacted

    def scan(self, fd: int, start: int, size: int, loaded: Loaded, path: Path) -> tuple[int, int]:
        return self.skim.scan(fd, start, size, loaded, path) if self.skim is not None else (start, 0)

    def accepted(self) -> bool:
        return self.skim is None or self.skim.accepted()

    def restart(self) -> tuple[Callable[[list[dict[str, Any]]], None], _Attempt | None]:
        system_prompt, window, recap, record_kinds = self._args
        self.next = _Attempt(system_prompt, window, recap, record_kinds, self.budgets * 4 if self.budgets < 24 else 0)
        return self.next.take, self.next

    def settled(self, recap: Recap | None) -> Conversation:
        """The conversation of the try that stood, its cut finished; the caller's ``recap`` filled from it."""
        if self.next is not None:
            return self.next.settled(recap)
        self.rebuild.finish()
        conversation = self.rebuild.conversation
        if self.skim is not None:
            if not self.rebuild.compacted:  # else the prefix's messages are in the summary, not left out
                conversation.resume_dropped += self.skim.count.held
            if recap is not None and self.recap is not None:
                for name in (item.name for item in fields(Recap)):
                    setattr(recap, name, getattr(self.recap, name))
        return conversation


def rebuild(conversation: Conversation, session: SessionLog) -> None:
    """Apply a session's events to ``conversation``: the same as applying ``session.events()``, one record at a
    time, streamed from the file (no cut: the agent given a log without its conversation)."""
    apply = conversation.apply
    with gc_paused():  # the collector is paused while 100 000s of messages build
        for record in session.iter_records():
            apply(from_wire(record))
