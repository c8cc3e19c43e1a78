"""The agent: a conversation, a tool registry, a session log, and turns that always end.

A turn is ``turn/start`` -> guard -> steps (request with retries, stream, assistant message, tool calls
in model order) -> ``turn/end {reason}``. The ``turn/end`` is owed in a ``finally`` and written under a
shielded cancel scope, so it is there even when the turn is cancelled.

How a turn ends:

* cancelled (``agent.cancel()`` or the caller's cancel scope): ``aborted`` whatever the adapter raised;
  the streamed text/reasoning prefix is kept as an interrupted assistant message, half-streamed tool
  calls are dropped, and tool calls that have no result yet get a synthetic failed one;
* a request failure goes to the retry policy; what is not retried ends the turn ``error`` with the
  rendered cause chain as its message (non-``HarnessError`` failures get code ``UNKNOWN``);
* a session-log write failure ends the turn ``error`` with code ``SESSION_LOG`` (never silently);
* otherwise ``completed``, or ``max-tokens`` when any step hit the output cap.

The conversation is a pure function of the durable events (:class:`Conversation`), so the live
conversation and the one rebuilt from a log on resume are the same by construction.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.lowlevel

from dsh.agent_loop import events as ev  # ev.TextDelta and ev.ReasoningDelta: dsh.llm has its own
from dsh.agent_loop.compact import FALLBACK_CODES, compaction_attempts, summary_message
from dsh.agent_loop.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    JobNotice,
    LlmRetry,
    StepStart,
    StreamKeepAlive,
    ToolCallStart,
    ToolResult,
    TurnEnd,
    TurnStart,
    from_wire,
    wire_reader,
)
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.guard import PromptGuard
from dsh.agent_loop.journal import JOURNAL_KEY, Journal, journal_dir
from dsh.agent_loop.permissions import Mode, Permissions
from dsh.agent_loop.reasons import (
    Aborted,
    Completed,
    Disposed,
    EndReason,
    Failed,
    MaxTokens,
    Rejected,
    failure_from_exception,
)
from dsh.agent_loop.retry import RetryPolicy, asked_to_wait
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.tools import (
    Approver,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    plan_batches,
    run_tool_call,
)
from dsh.agent_loop.usage import CHARS_PER_TOKEN as _CHARS_PER_TOKEN
from dsh.agent_loop.usage import tokens_for_chars
from dsh.llm import (
    DEFAULT_MODEL,
    ChatRequest,
    ErrorCode,
    HarnessError,
    KeepAlive,
    LlmError,
    Message,
    ReasoningDelta,
    Redactor,
    ReplyBuilder,
    TextDelta,
    ToolCall,
    client_secrets,
    error_chain,
    unwrap_group,
)
from dsh.llm.events import ModelClient
from dsh.llm.redact import KnownValueStream
from dsh.llm.reply import MAX_TOOL_CALLS
from dsh.llm.text import scrub_surrogates

__all__ = ["DEFAULT_MAX_STEPS", "Agent", "Conversation", "open_session"]

DEFAULT_MAX_STEPS = 50
CANCELLED_TOOL_OUTPUT = "Error: tool call cancelled"
DISPOSED_TOOL_OUTPUT = "Error: tool call cancelled: the agent was closed"
UNFINISHED_TOOL_OUTPUT = "Error: tool call did not complete: the turn ended"
DROPPED_TOOL_OUTPUT = (
    f"Error: tool call dropped: more than {MAX_TOOL_CALLS} tool calls in one step; "
    "this call and every later one in the response were not run"
)
LOGGED_ARGUMENTS_CHARS = 4096  # a tool/call event's arguments beyond this are in its assistant/message
NOTICE_SOURCE = "notice"

_log = logging.getLogger("dsh.agent_loop")
_read_str, _read_opt_str = wire_reader("str"), wire_reader("str | None")
_read_calls = wire_reader("tuple[ToolCall, ...]")
_KEEPALIVE = StreamKeepAlive()  # carries nothing: one instance serves every keep-alive
_Triage = Literal["again", "stands", "policy"]  # a failed request: sent again now, final, or the policy's call


# --- the conversation, derived from durable events -------------------------------------------


def message_tokens(message: Message) -> int:
    """A message's estimated tokens (:func:`~dsh.agent_loop.usage.estimate_tokens` of all its text), summed per
    message so that a run's count is the sum of its messages'."""
    chars = len(message.content) + len(message.reasoning_content or "")
    for call in message.tool_calls:
        chars += len(call.name) + len(call.arguments)
    return tokens_for_chars(chars)


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
    ``step/start``; queued ``job/notice`` texts join as user messages at the next ``step/start`` (a
    point where every tool call has its result); a turn that produced no assistant message leaves no
    trace (its prompt is withdrawn, its notices re-queued), so a failed or rejected prompt is not
    silently resent with the next one. A ``context/compact`` replaces everything but the system prompt
    by the summary; inside a turn (an automatic compaction) the summary stands for the turn so far too.
    """

    def __init__(self, system_prompt: str | None = None) -> None:
        self.messages: list[Message] = [Message("system", system_prompt)] if system_prompt else []
        self._summary_head = False  # the first message after the system prompt is a compaction's summary
        self.resume_dropped = 0  # messages the resume pass cut to the model's window (:func:`open_session`)
        self._notices: list[str] = []
        self._turn_mark: int | None = None
        self._turn_prompt: str | None = None
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
            self._turn_start(event.prompt, event.source)
        elif isinstance(event, StepStart):
            self._step_start()
        elif isinstance(event, AssistantMessage):
            self._reply(_assistant_to_message(event))
        elif isinstance(event, ToolResult):
            self._tool_result(event.id, event.output)
        elif isinstance(event, JobNotice):
            if event.text:
                self._notices.append(event.text)
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
            ToolResult.type: lambda data: self._tool_result(_read_str(data.get("id")), _read_str(data.get("output"))),
            AssistantMessage.type: assistant,
            TurnStart.type: lambda data: self._turn_start(_read_str(data.get("prompt")),
                                                          _read_opt_str(data.get("source"))),
            TurnEnd.type: lambda data: self._turn_end(),
            JobNotice.type: notice,
            ContextCompacted.type: lambda data: self._compacted(_read_str(data.get("summary"))),
        }

    def _turn_start(self, prompt: str, source: str | None) -> None:
        self._turn_mark = len(self.messages)
        self._turn_prompt = prompt
        self._turn_has_reply = False
        self._first_step = True
        self._open_calls = {}
        self._turn_notices = []
        if source == NOTICE_SOURCE:
            # A turn started to deliver the queued notices: its prompt is their text.
            self._turn_notices, self._notices = self._notices, []

    def _step_start(self) -> None:
        if self._first_step:
            self._first_step = False
            self._flush_notices()
            if self._turn_prompt is not None:
                self.messages.append(Message("user", self._turn_prompt))
        else:
            self._flush_notices()

    def _reply(self, message: Message | None) -> None:
        if message is not None:
            self.messages.append(message)
            self._turn_has_reply = True
            self._open_calls = {call.id: call.name for call in message.tool_calls}

    def _tool_result(self, call_id: str, output: str) -> None:
        if call_id in self._open_calls:
            del self._open_calls[call_id]
            self.messages.append(Message("tool", output, tool_call_id=call_id))

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
        self._turn_notices = []

    @property
    def between_turns(self) -> bool:
        """No turn is open: the messages are whole turns (a cut may be made, nothing is withdrawn later)."""
        return self._turn_mark is None

    def fit(self, budget: int) -> int:
        """Drop the oldest messages so that the rest fit ``budget`` estimated tokens; how many were dropped.

        The resume pass's cut to the model's window (:func:`open_session`, docs/architecture.md "The session
        log"): kept are the system prompt, a compaction's summary at the head, and the longest run of the
        newest messages that starts at a user message and fits what is left of ``budget``
        (:func:`message_tokens`); if even the newest turn does not fit, it is kept whole from its user
        message. A cut never separates a tool result from its call. Between turns only. The cut of a cut
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


# --- per-turn state ----------------------------------------------------------------------------


_Delta = TextDelta | ReasoningDelta


class _MaskedDeltas:
    """A reply's text and reasoning with the known secrets masked as they stream (docs/architecture.md,
    "Redaction"): each delta passes here before the reply builder keeps it and before any subscriber
    sees it, so the conversation, the session log and every front end get the same masked text.

    Each channel holds back a tail that could be the start of a secret (:class:`KnownValueStream`); a
    channel's tail comes out when the other channel speaks (a reply thinks, then answers) or at the end.
    """

    __slots__ = ("_reasoning", "_text")

    def __init__(self, redactor: Redactor) -> None:
        self._text = KnownValueStream(redactor)
        self._reasoning = KnownValueStream(redactor)

    def mask(self, delta: _Delta) -> tuple[_Delta, ...]:
        """What to keep and show for one delta (a released text may be empty)."""
        other_kind: type[_Delta]
        if isinstance(delta, TextDelta):
            mine, other, other_kind = self._text, self._reasoning, ReasoningDelta
        else:
            mine, other, other_kind = self._reasoning, self._text, TextDelta
        released = mine.feed(delta.text)
        masked = delta if released is delta.text else type(delta)(released)
        if other.holding and delta.text:
            return other_kind(other.flush()), masked
        return (masked,)

    def flush(self) -> tuple[_Delta, ...]:
        """The held tails at the end of the reply (or at a cancel), masked: reasoning first."""
        return ReasoningDelta(self._reasoning.flush()), TextDelta(self._text.flush())


@dataclass
class _TurnState:
    turn: int
    step: int = 0
    hit_max_tokens: bool = False
    builder: ReplyBuilder | None = None  # the reply being streamed, until committed
    masks: _MaskedDeltas | None = None  # what the builder's text and reasoning pass through first
    pending: list[ToolCall] = field(default_factory=list)  # committed calls still owed a result
    announced: set[str] = field(default_factory=set)  # call ids with a tool/call event
    finished: dict[str, ToolOutput] = field(default_factory=dict)  # outputs not yet committed
    log_failure: HarnessError | None = None
    compacted: bool = False  # an automatic compaction happened: at most one per turn


def _reply_message(
    state: _TurnState, builder: ReplyBuilder, calls: tuple[ToolCall, ...], *, interrupted: bool = False
) -> AssistantMessage:
    """The step's reply as its event: whole, or the prefix of an interrupted one (no finish reason)."""
    return AssistantMessage(
        state.turn,
        state.step,
        content=builder.text,
        reasoning_content=builder.reasoning or None,
        tool_calls=calls,
        finish_reason=None if interrupted else builder.finish_reason,
        interrupted=interrupted,
        usage=builder.usage,
    )


def _unique_ids(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """Tool calls with ids made unique (results are matched by id; a repeat would be ambiguous)."""
    seen: set[str] = set()
    unique: list[ToolCall] = []
    for call in calls:
        call_id = call.id
        n = 2
        while call_id in seen:
            call_id, n = f"{call.id}_{n}", n + 1
        seen.add(call_id)
        unique.append(call if call_id == call.id else ToolCall(call_id, call.name, call.arguments))
    return unique


# --- the agent ---------------------------------------------------------------------------------


# What the resume pass keeps of a conversation longer than the model's window: twice the window (by
# estimate, :func:`message_tokens`; a real tokenizer may count fewer), so that no conversation the server
# could still accept is cut; a model with no known window counts as one of UNKNOWN_WINDOW tokens.
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

    Memory follows the conversation, not the file (docs/architecture.md, the session log); pass both
    to :class:`Agent` (``session=``, ``conversation=``). ``on_record`` sees each record of that pass
    too (the front end's resume recap, :class:`~dsh.agent_loop.recap.Recap`), or only those of ``record_kinds``
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


class Agent:
    """Runs turns against ``client`` (anything with ``stream(ChatRequest) -> AsyncIterator[StreamEvent]``)."""

    def __init__(
        self,
        client: ModelClient,
        *,
        model: str = DEFAULT_MODEL,
        tools: ToolRegistry | None = None,
        session: SessionLog | None = None,
        label: str = "main",
        system_prompt: str | None = None,
        retry: RetryPolicy | None = None,
        guard: PromptGuard | None = None,
        max_tokens: int | None = None,
        thinking: bool | None = None,
        reasoning_effort: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        approver: Approver | None = None,
        cwd: str | os.PathLike[str] | None = None,
        conversation: Conversation | None = None,
        redactor: Redactor | None = None,
        auto_compact: bool = False,
        permissions: Permissions | None = None,
    ) -> None:
        """``conversation``, when given, is the one :func:`open_session` rebuilt from ``session``.
        ``redactor`` masks every tool result (subagent output included) before the model, the log or the
        screen get it; by default it knows the client's secrets (its key, URL and proxy credentials) and
        the secret shapes. ``auto_compact``: a request refused as ``CONTEXT_WINDOW_EXCEEDED`` gets one
        compaction and one retry. ``permissions``: the session's permission mode, which each approval consults
        (docs/safety.md); None is the default mode."""
        self.client = client
        self.model = model
        self.tools = tools if tools is not None else ToolRegistry()
        self.session = session
        self.label = label
        self.system_prompt = system_prompt
        self.retry = retry if retry is not None else RetryPolicy()
        self.guard = guard if guard is not None else PromptGuard()
        self.max_tokens = max_tokens
        self.thinking = thinking
        self.reasoning_effort = reasoning_effort
        self.max_steps = max_steps
        self.approver = approver
        self.permissions = permissions
        self._redactor = redactor
        self.auto_compact = auto_compact
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.last_failure: BaseException | None = None
        self.session_state: dict[str, Any] = {}
        self._journal: Journal | None = None  # the session log's undo journal, opened on first need
        self.journal_key: Path | None = None  # the key its lines are signed with (agent_loop/journal.py)
        # A tuple, replaced on (un)subscribe: delivery iterates a snapshot without copying per event.
        self._subscribers: tuple[Callable[[Event], None], ...] = ()
        self._running = False
        self._closed = False
        self._scope: anyio.CancelScope | None = None
        self._cancel_reason: str | None = None
        self._disposing = False
        self._idle: anyio.Event | None = None
        self._state: _TurnState | None = None
        self._conversation = conversation if conversation is not None else Conversation(system_prompt)
        self.turn_number = 0
        if session is not None:
            if conversation is None:
                self._rebuild(session)
            self.turn_number = session.last_turn

    @classmethod
    def resume(
        cls, client: ModelClient, id_or_last: str = "last", *, root: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> Agent:
        """Open a session (repairing an open last turn) and continue it."""
        session, conversation = open_session(id_or_last, root, system_prompt=kwargs.get("system_prompt"))
        return cls(client, session=session, conversation=conversation, **kwargs)

    def _rebuild(self, session: SessionLog) -> None:
        # The same as applying session.events(), one record at a time, streamed from the file; the
        # collector is paused while 100 000s of messages build.
        apply = self._conversation.apply
        with gc_paused():
            for record in session.iter_records():
                apply(from_wire(record))

    # --- public surface ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def messages(self) -> list[Message]:
        """The conversation as it will be sent with the next request (a copy)."""
        return list(self._conversation.messages)

    def set_system_prompt(self, text: str | None) -> None:
        """The system message of every later request (and of the conversation after ``/new``)."""
        if self._running:
            raise RuntimeError("the system prompt changes between turns only")
        self.system_prompt = text
        self._conversation.set_system_prompt(text)

    @property
    def repaired_turn(self) -> int | None:
        return self.session.repaired_turn if self.session is not None else None

    @property
    def load_warnings(self) -> list[str]:
        return list(self.session.load_warnings) if self.session is not None else []

    @property
    def pending_notices(self) -> int:
        """Background-job notices the model has not seen yet."""
        return len(self._conversation.pending_notices)

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback(event)`` synchronously, in order, for every event; returns an unsubscribe."""
        self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            remaining = list(self._subscribers)
            with contextlib.suppress(ValueError):
                remaining.remove(callback)
                self._subscribers = tuple(remaining)

        return unsubscribe

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel the running turn (it ends ``aborted {reason}``); False when no turn is running."""
        if not self._running or self._scope is None:
            return False
        if self._cancel_reason is None:
            self._cancel_reason = reason
        self._scope.cancel()
        return True

    def post_notice(self, text: str, job_id: str) -> None:
        """A background job settled: publish ``job/notice`` now and queue ``text`` for the model.

        The model sees queued notices at the next step of a running turn. When the agent is idle the
        owner decides when it sees them: ``await agent.deliver_notices()`` runs a turn for them.
        Call from the agent's event loop.
        """
        self._publish_quietly(JobNotice(job_id, text))

    async def deliver_notices(self) -> EndReason | None:
        """Run a turn whose prompt is the queued notices; None when there are none or a turn is running."""
        notices = self._conversation.pending_notices
        if not notices or self._running:
            return None
        return await self._run("\n".join(notices), source=NOTICE_SOURCE)

    async def run_turn(self, prompt: str) -> EndReason:
        """Run one turn and return how it ended. Turn failures are reasons, never exceptions."""
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a string")
        # Command-line prompts arrive surrogate-escaped when their bytes are not UTF-8.
        return await self._run(scrub_surrogates(prompt), source=None)

    async def compact(self, focus: str | None = None) -> ContextCompacted:
        """``/compact [focus]``: the model summarizes the conversation, and the summary replaces it.

        The summary is a durable ``context/compact`` record (fsynced), so a resume rebuilds the compacted
        conversation. Raises :class:`HarnessError` on failure (``ABORTED`` when cancelled), and then the
        conversation is unchanged. Runs like a turn: one at a time, and :meth:`cancel` stops it.
        """
        if self._closed:
            raise HarnessError("the agent is closed", ErrorCode.AGENT_CLOSED)
        if self._running:
            raise HarnessError("a turn is already running on this agent", ErrorCode.TURN_BUSY)
        if not any(message.role != "system" for message in self._conversation.messages):
            raise HarnessError("nothing to compact yet", ErrorCode.COMPACT)
        self._running = True
        self._idle = anyio.Event()
        self._cancel_reason = None
        scope = self._scope = anyio.CancelScope()
        event: ContextCompacted | None = None
        try:
            try:
                with scope:
                    event = await self._summarize(focus, None)
            except Exception:
                if not scope.cancel_called:
                    raise
            if event is None:
                raise HarnessError("compaction cancelled", ErrorCode.ABORTED)
            if self.session is not None:
                self.session.append(event)  # first: a summary that is not on disk replaces nothing
            self._deliver(event)
            return event
        finally:
            self._running = False
            self._scope = None
            self._idle.set()

    async def _summarize(self, focus: str | None, turn: int | None) -> ContextCompacted:
        """Ask the model for the summary (no tools): each of :func:`compaction_attempts` in turn, moving on
        only when one is refused as too long; transient failures are retried as a step's request is."""
        messages = self._conversation.messages
        replaced = sum(1 for message in messages if message.role != "system")
        refused: HarnessError | None = None
        for attempt in compaction_attempts(messages, focus):
            request = ChatRequest(
                model=self.model, messages=attempt, max_tokens=self.max_tokens, thinking=self.thinking,
                reasoning_effort=self.reasoning_effort,  # type: ignore[arg-type]
            )
            try:
                builder = await self._stream_quietly(request)
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

    async def _stream_quietly(self, request: ChatRequest) -> ReplyBuilder:
        """One request, its reply assembled but not shown; transient failures retried (no log records)."""

        async def attempt() -> ReplyBuilder:
            builder = ReplyBuilder()
            # The summary is stored: masked like any reply.
            await self._stream_reply(request, builder, _MaskedDeltas(self.redactor), show=False)
            return builder

        return await self._retrying(attempt)

    async def _stream_reply(self, request: ChatRequest, builder: ReplyBuilder, masks: _MaskedDeltas, *,
                            show: bool) -> None:
        """Stream one request into ``builder``, its deltas masked (and shown, with keep-alives, if ``show``)."""
        async with contextlib.aclosing(self.client.stream(request)) as stream:
            async for item in stream:
                if isinstance(item, TextDelta | ReasoningDelta):
                    self._take_deltas(builder, masks.mask(item), show=show)
                    continue
                builder.feed(item)
                if show and isinstance(item, KeepAlive) and self._subscribers:
                    self._deliver(_KEEPALIVE)
        self._take_deltas(builder, masks.flush(), show=show)

    async def _retrying(
        self,
        attempt: Callable[[], Awaitable[ReplyBuilder]],
        *,
        triage: Callable[[Exception, str], Awaitable[_Triage]] | None = None,
        announce: Callable[[Exception, str, int, float, int | None], None] | None = None,
    ) -> ReplyBuilder:
        """``attempt()`` until it returns: a failure the retry policy calls transient is tried again after the
        policy's delay; a cancel of this agent never is. ``triage`` may settle a failure first; ``announce``
        hears of each retry (its code, attempt number, delay and limit) before the delay."""
        retries = 0
        while True:
            try:
                return await attempt()
            except Exception as exc:
                if self._scope is not None and self._scope.cancel_called:
                    raise
                await anyio.lowlevel.checkpoint_if_cancelled()
                code = exc.code if isinstance(exc, HarnessError) else ErrorCode.UNKNOWN
                verdict = "policy" if triage is None else await triage(exc, code)
                if verdict == "again":
                    continue
                limit = exc.retry_limit if isinstance(exc, LlmError) else None
                if verdict == "stands" or not self.retry.should_retry(code, retries, limit):
                    raise
                retry_after = exc.retry_after_s if isinstance(exc, LlmError) else None
                if isinstance(exc, LlmError) and retry_after is not None and self.retry.waits_too_long(retry_after):
                    too_long = asked_to_wait(exc, retry_after)
                else:
                    retries += 1
                    delay = self.retry.delay(retries, retry_after)
                    if announce is not None:
                        announce(exc, code, retries, delay, limit)
                    await anyio.sleep(delay)
                    continue
            # Asked to wait past the cap: the turn ends saying when to retry. Raised out here, so that the
            # failure it restates is not chained beneath it a second time.
            raise too_long

    @property
    def journal(self) -> Journal | None:
        """The undo journal beside the session log (agent_loop/journal.py); None without a log."""
        if self.session is None:
            return None
        directory = journal_dir(self.session.path)
        if self._journal is None or self._journal.directory != directory:
            if self._journal is not None:
                self._journal.close()
            self._journal = Journal(directory, key_file=self.journal_key)
        return self._journal

    def new_session(self) -> None:
        """``/new``: a fresh conversation, approvals and turn numbers, and a new log in the same root."""
        if self._running:
            raise HarnessError("cannot start a new session while a turn is running", ErrorCode.TURN_BUSY)
        old = self.session
        if old is not None:
            self.session = SessionLog.create(old.root, cwd=self.cwd, lazy=True)  # written at its first turn
            old.close()
        self._conversation = Conversation(self.system_prompt)
        self.session_state.clear()
        self.turn_number = 0
        self.last_failure = None

    async def aclose(self) -> None:
        """Dispose: a running turn ends ``disposed``; the session log is closed. Idempotent."""
        if self._running and self._scope is not None:
            self._disposing = True
            self._scope.cancel()
            if self._idle is not None:
                with anyio.CancelScope(shield=True):
                    await self._idle.wait()
        self._closed = True
        if self._journal is not None:
            self._journal.close()
        if self.session is not None:
            self.session.close()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- publishing ----------------------------------------------------------------------------

    def _publish(self, event: Event) -> None:
        """Log (durable events), update the conversation, then tell subscribers. Log failures raise,
        after the event is still shown: the user sees what happened, e.g. the turn header."""
        if event.durable and self.session is not None:
            try:
                self.session.append(event)
            except HarnessError as exc:
                if self._state is not None and self._state.log_failure is None:
                    self._state.log_failure = exc
                self.last_failure = exc
                self._deliver(event)
                raise
        self._deliver(event)

    def _publish_quietly(self, event: Event) -> None:
        """Like :meth:`_publish`, but a log failure is recorded, not raised (closers, notices)."""
        try:
            self._publish(event)
        except HarnessError:
            pass  # recorded in _publish; the event was delivered

    def _deliver(self, event: Event) -> None:
        if event.durable:
            self._conversation.apply(event)
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception as exc:  # a broken subscriber must not break the turn; say so
                _log.warning("event subscriber failed on %s: %s", event.type, self.redactor(error_chain(exc)))

    def _notify(self, event: Event) -> None:
        # For tools and background jobs: a log failure is recorded (it ends the running turn, or the
        # next one, with SESSION_LOG) rather than raised into a job that may outlive the turn.
        self._publish_quietly(event)

    # --- the turn ------------------------------------------------------------------------------

    @property
    def redactor(self) -> Redactor:
        """What masks tool and subagent output (docs/architecture.md, "Redaction")."""
        if self._redactor is None:
            self._redactor = Redactor(client_secrets(self.client))
        return self._redactor

    def _secrets(self) -> tuple[str, ...]:
        return self.redactor.secrets

    async def _run(self, prompt: str, *, source: str | None) -> EndReason:
        if self._closed:
            raise HarnessError("the agent is closed", ErrorCode.AGENT_CLOSED)
        if self._running:
            raise HarnessError("a turn is already running on this agent", ErrorCode.TURN_BUSY)
        self._running = True
        self._idle = anyio.Event()
        self._cancel_reason = None
        self.turn_number += 1
        state = self._state = _TurnState(self.turn_number)
        scope = self._scope = anyio.CancelScope()
        reason: EndReason | None = None
        failure: BaseException | None = None
        cancelled_from_outside = False
        try:
            try:
                with scope:
                    reason = await self._turn_body(state, prompt, source)
            except Exception as exc:
                failure = unwrap_group(exc)
                if not scope.cancel_called:
                    # The adapter turns cancellation into an ABORTED LlmError; if our caller cancelled
                    # us this re-raises the cancellation, which wins over what the adapter raised.
                    await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            cancelled_from_outside = True
            raise
        finally:
            if cancelled_from_outside or (scope.cancel_called and reason is None):
                reason = Disposed() if self._disposing else Aborted(self._cancel_reason or "cancelled")
            elif failure is not None:
                reason = failure_from_exception(failure, state.step, self._secrets())
                self.last_failure = failure
            elif reason is None:  # a BaseException (not cancellation) is propagating: say what it is
                escaping = sys.exc_info()[1]
                reason = (
                    failure_from_exception(unwrap_group(escaping), state.step, self._secrets())
                    if escaping is not None
                    else Failed(ErrorCode.UNKNOWN, "turn ended without a reason", state.step)
                )
            # _close_turn is synchronous (log writes are plain write/fsync), so no cancellation can cut
            # it short; the shield keeps that true should it ever need to await.
            with anyio.CancelScope(shield=True):
                reason = self._close_turn(state, reason)
            self._running = False
            self._scope = None
            self._state = None
            self._disposing = False
            self._idle.set()
        return reason

    def _close_turn(self, state: _TurnState, reason: EndReason) -> EndReason:
        """Commit what the turn owes (interrupted prefix, results for pending calls) and the turn/end."""
        if state.builder is not None:
            builder, state.builder = state.builder, None
            if state.masks is not None:  # a tail held back is masked and kept, never dropped unmasked
                self._take_deltas(builder, state.masks.flush())
            if builder.text or builder.reasoning:  # half-streamed tool calls are dropped
                self._publish_quietly(_reply_message(state, builder, (), interrupted=True))
        if state.pending:
            text = (
                DISPOSED_TOOL_OUTPUT
                if isinstance(reason, Disposed)
                else CANCELLED_TOOL_OUTPUT
                if isinstance(reason, Aborted)
                else UNFINISHED_TOOL_OUTPUT
            )
            for call in list(state.pending):
                output = state.finished.pop(call.id, None) or ToolOutput(text, is_error=True)
                self._commit_result(state, call, output, quietly=True)
        if state.log_failure is not None:
            # The session is no longer being recorded: that is the news, whatever else happened.
            reason = failure_from_exception(state.log_failure, state.step, self._secrets())
        self._publish_quietly(TurnEnd(state.turn, reason))
        return reason

    async def _turn_body(self, state: _TurnState, prompt: str, source: str | None) -> EndReason:
        guarded = source is None
        logged_prompt = self.guard.mask(prompt) if guarded else prompt
        mode = self.permissions.mode if self.permissions is not None else Mode.DEFAULT
        self._publish(TurnStart(state.turn, logged_prompt, source=source,
                                mode=None if mode is Mode.DEFAULT else str(mode)))
        journal = self.journal  # the log exists now (a lazy one is written by turn/start)
        if journal is not None:
            self.session_state[JOURNAL_KEY] = journal  # the edit tools journal before-images there
        if guarded:
            rejection = await self.guard.check(prompt, self.cwd)
            if rejection is not None:
                return Rejected(rejection)
        for step in range(1, self.max_steps + 1):
            state.step = step
            self._publish(StepStart(state.turn, step))
            builder = await self._request(state)
            calls = self._commit_reply(state, builder)
            if builder.finish_reason == "length":
                state.hit_max_tokens = True  # sticky for the rest of the turn
            if not calls:
                return MaxTokens() if state.hit_max_tokens else Completed()
            await self._run_tools(state, calls)
        raise HarnessError(
            f"turn stopped after {self.max_steps} steps (the max-steps guard); the model kept calling tools",
            ErrorCode.MAX_STEPS,
        )

    def _chat_request(self) -> ChatRequest:
        return ChatRequest(
            model=self.model,
            messages=tuple(self._conversation.messages),
            tools=self.tools.specs(),
            max_tokens=self.max_tokens,
            thinking=self.thinking,
            reasoning_effort=self.reasoning_effort,  # type: ignore[arg-type]
        )

    async def _request(self, state: _TurnState) -> ReplyBuilder:
        """Stream one step's reply, retrying transient failures that happened before any content."""

        async def attempt() -> ReplyBuilder:
            builder = state.builder = ReplyBuilder()
            state.masks = _MaskedDeltas(self.redactor)
            await self._stream_reply(self._chat_request(), builder, state.masks, show=True)
            return builder

        async def triage(exc: Exception, code: str) -> _Triage:
            if code == ErrorCode.CONTEXT_WINDOW_EXCEEDED and self.auto_compact and not state.compacted:
                state.compacted = True  # one compaction and one retry, then the failure stands
                state.builder = None
                await self._compact_in_turn(state, exc)
                return "again"
            # Content already on the user's screen is not streamed twice: such a failure ends the turn. A
            # half-received tool call was never shown: it is dropped and the request retried.
            return "stands" if state.builder is not None and state.builder.has_shown_content else "policy"

        def announce(exc: Exception, code: str, attempt: int, delay: float, limit: int | None) -> None:
            state.builder = None
            self._publish(
                LlmRetry(
                    state.turn,
                    state.step,
                    attempt=attempt,
                    max_attempts=self.retry.attempts_for(limit),
                    delay_s=round(delay, 3),
                    code=code,
                    message=self.redactor(error_chain(exc)),
                )
            )

        return await self._retrying(attempt, triage=triage, announce=announce)

    def _take_deltas(self, builder: ReplyBuilder, deltas: tuple[_Delta, ...], *, show: bool = True) -> None:
        """Keep masked deltas in the reply and show them (live-only events: built only for a subscriber)."""
        for delta in deltas:
            if not delta.text:
                continue
            builder.feed(delta)
            if show and self._subscribers:
                kind = ev.TextDelta if isinstance(delta, TextDelta) else ev.ReasoningDelta
                self._deliver(kind(delta.text))

    async def _compact_in_turn(self, state: _TurnState, refused: Exception) -> None:
        """The automatic compaction: on success the summary is published and the step's request is sent
        again; on failure the refusal stands (the compaction's own failure goes to the host log)."""
        event: ContextCompacted | None = None
        try:
            event = await self._summarize(None, state.turn)
        except Exception as exc:
            if self._scope is not None and self._scope.cancel_called:
                raise
            _log.warning("automatic compaction failed: %s", self.redactor(error_chain(exc)))
        if event is None:
            raise refused  # outside the handler: its cause chain stays its own
        self._publish(event)

    def _commit_reply(self, state: _TurnState, builder: ReplyBuilder) -> list[ToolCall]:
        calls = _unique_ids(builder.tool_calls)
        state.builder = None
        self._publish(_reply_message(state, builder, tuple(calls)))
        state.pending = list(calls)
        state.announced = set()
        state.finished = {}
        return calls

    def _announce(self, state: _TurnState, call: ToolCall, *, quietly: bool = False) -> None:
        if call.id in state.announced:
            return
        state.announced.add(call.id)
        arguments = call.arguments
        if len(arguments) > LOGGED_ARGUMENTS_CHARS:
            # Stored once: the whole text is in this step's assistant/message, which resume reads.
            arguments = arguments[:LOGGED_ARGUMENTS_CHARS] + "…"
        event = ToolCallStart(state.turn, call.id, call.name, arguments)
        self._publish_quietly(event) if quietly else self._publish(event)

    def _commit_result(self, state: _TurnState, call: ToolCall, output: ToolOutput, *, quietly: bool = False) -> None:
        self._announce(state, call, quietly=quietly)
        # The one place a tool's text enters the turn: masked here, it is masked for the model,
        # the session log and the screen alike.
        text = self.redactor(output.text)
        event = ToolResult(
            state.turn, call.id, call.name, text, is_error=output.is_error, diagnostic=output.diagnostic,
            cause=output.cause,
        )
        self._publish_quietly(event) if quietly else self._publish(event)
        state.pending.remove(call)
        state.finished.pop(call.id, None)

    def _context(self, state: _TurnState, call: ToolCall) -> ToolContext:
        return ToolContext(
            cwd=self.cwd,
            turn=state.turn,
            notify=self._notify,
            approver=self.approver,
            session_state=self.session_state,
            label=self.label,
            call_id=call.id,
            post_notice=self.post_notice,
            redact=self.redactor,
            permissions=self.permissions,
        )

    async def _run_tools(self, state: _TurnState, calls: list[ToolCall]) -> None:
        # The reply builder kept one call past the bound to stand for every dropped one (llm/reply.py).
        calls, dropped = calls[:MAX_TOOL_CALLS], calls[MAX_TOOL_CALLS:]
        await self._run_kept(state, calls)
        for call in dropped:
            self._commit_result(state, call, ToolOutput(DROPPED_TOOL_OUTPUT, is_error=True))

    async def _run_kept(self, state: _TurnState, calls: list[ToolCall]) -> None:
        for batch in plan_batches(self.tools, calls):
            for call in batch:
                self._announce(state, call)
            if len(batch) == 1:
                call = batch[0]
                state.finished[call.id] = await run_tool_call(self.tools, call, self._context(state, call))
                self._commit_result(state, call, state.finished[call.id])
                continue
            await self._run_batch(state, batch)

    async def _run_batch(self, state: _TurnState, batch: list[ToolCall]) -> None:
        """Run concurrency-safe calls in parallel (bounded); commit their results in model order."""
        limiter = anyio.CapacityLimiter(self.tools.max_parallel)
        done = {call.id: anyio.Event() for call in batch}

        async def worker(call: ToolCall) -> None:
            async with limiter:
                state.finished[call.id] = await run_tool_call(self.tools, call, self._context(state, call))
            done[call.id].set()

        async with anyio.create_task_group() as group:
            for call in batch:
                group.start_soon(worker, call)
            for call in batch:
                await done[call.id].wait()
                self._commit_result(state, call, state.finished[call.id])
