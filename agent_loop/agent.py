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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from dsh.agent_loop import events as ev  # ev.TextDelta and ev.ReasoningDelta: dsh.llm has its own
from dsh.agent_loop.cache_watch import PrefixTracker
from dsh.agent_loop.compact import summarize
from dsh.agent_loop.continuation import LENGTH, ContinuationPolicy, StepContinuations
from dsh.agent_loop.conversation import HOOK_SOURCE, NOTICE_SOURCE, Conversation
from dsh.agent_loop.events import (
    ContextCompacted,
    Event,
    JobNotice,
    LlmRetry,
    StepStart,
    StreamKeepAlive,
    TurnEnd,
    TurnStart,
)
from dsh.agent_loop.guard import PromptGuard
from dsh.agent_loop.image_input import ImageRules, without_images
from dsh.agent_loop.journal import JOURNAL_KEY, Journal, journal_dir
from dsh.agent_loop.masked_deltas import Delta, MaskedDeltas
from dsh.agent_loop.permissions import Mode, Permissions
from dsh.agent_loop.reasons import Completed, EndReason, MaxTokens, Rejected, failure_from_exception, nothing_to_compact
from dsh.agent_loop.request_retry import Announce, Triage, retrying
from dsh.agent_loop.resume import open_session, rebuild
from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.tool_calls import StepCalls, ToolRunner, unique_ids
from dsh.agent_loop.tools import Approver, ToolContext, ToolRegistry
from dsh.agent_loop.turn_state import TurnSlot, TurnState
from dsh.llm import (
    DEFAULT_MODEL,
    ChatRequest,
    ErrorCode,
    HarnessError,
    Image,
    KeepAlive,
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
from dsh.llm.text import scrub_surrogates

__all__ = ["DEFAULT_MAX_STEPS", "Agent"]

DEFAULT_MAX_STEPS = 50

_log = logging.getLogger("dsh.agent_loop")
_KEEPALIVE = StreamKeepAlive()  # carries nothing: one instance serves every keep-alive


class Agent:
    """Runs turns against ``client`` (anything with ``stream(ChatRequest) -> AsyncIterator[StreamEvent]``).

    ``conversation``: the one :func:`open_session` rebuilt from ``session``. ``redactor`` masks every tool result
    (subagent output included) before the model, the log or the screen get it (by default the client's secrets and
    the secret shapes). ``auto_compact``: a request refused as ``CONTEXT_WINDOW_EXCEEDED`` gets one compaction and
    one retry. ``permissions``: the permission mode each approval consults (docs/safety.md). ``continuation``: a
    reply cut after its text goes on by prefix completion (agent_loop/continuation.py). ``before_request``: a reason
    ends the turn unsent (the session's budget); it holds a continuation and a compaction back too.
    ``before_compact``: awaited before the automatic compaction (the session's PreCompact hooks, docs/hooks.md).
    """

    before_request: Callable[[], EndReason | None] | None = None
    before_compact: Callable[[], Awaitable[None]] | None = None
    image_rules = ImageRules()  # which models are sent images (agent_loop/image_input.py)

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
        continuation: ContinuationPolicy | None = None,
    ) -> None:
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
        self.continuation = continuation
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.last_failure: BaseException | None = None
        self.session_state: dict[str, Any] = {}
        self._journal: Journal | None = None  # the session log's undo journal, opened on first need
        self.journal_key: Path | None = None  # the key its lines are signed with (agent_loop/journal.py)
        # A tuple, replaced on (un)subscribe: delivery iterates a snapshot without copying per event.
        self._subscribers: tuple[Callable[[Event], None], ...] = ()
        self._slot = TurnSlot()  # the one turn (or compaction) at a time
        self._state: TurnState | None = None
        self._conversation = conversation if conversation is not None else Conversation(system_prompt)
        self.prefix = PrefixTracker()  # the hashes of the last request's parts (agent_loop/cache_watch.py)
        self.turn_number = 0
        if session is not None:
            if conversation is None:
                rebuild(self._conversation, session)
            self.turn_number = session.last_turn

    @classmethod
    def resume(
        cls, client: ModelClient, id_or_last: str = "last", *, root: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> Agent:
        """Open a session (repairing an open last turn) and continue it."""
        session, conversation = open_session(id_or_last, root, system_prompt=kwargs.get("system_prompt"))
        return cls(client, session=session, conversation=conversation, **kwargs)

    # --- public surface ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._slot.running

    @property
    def messages(self) -> list[Message]:
        """The conversation as it will be sent with the next request (a copy)."""
        return list(self._conversation.messages)

    def set_system_prompt(self, text: str | None) -> None:
        """The system message of every later request (and of the conversation after ``/new``)."""
        if self._slot.running:
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
        return self._slot.cancel(reason)

    def post_notice(self, text: str, job_id: str) -> None:
        """A background job settled: publish ``job/notice`` now and queue ``text`` for the model.

        The model sees queued notices at the next step of a running turn. When the agent is idle the
        owner decides when it sees them: ``await agent.deliver_notices()`` runs a turn for them.
        Call from the agent's event loop.
        """
        self._publish_quietly(JobNotice(job_id, text))

    def record(self, event: Event) -> None:
        """An event of the session's own (a hook's run, agent_loop/hook_run.py), logged and heard as the agent's
        are; a log failure is recorded (it ends the running turn, or the next), not raised."""
        self._publish_quietly(event)

    async def deliver_notices(self) -> EndReason | None:
        """Run a turn whose prompt is the queued notices; None when there are none or a turn is running."""
        notices = self._conversation.pending_notices
        if not notices or self._slot.running:
            return None
        return await self._run("\n".join(notices), source=NOTICE_SOURCE)

    async def run_turn(self, prompt: str, *, by_hook: bool = False, images: tuple[Image, ...] = ()) -> EndReason:
        """Run one turn and return how it ended. Turn failures are reasons, never exceptions. ``by_hook``: the prompt
        is a Stop hook's reason (agent_loop/session_extensions.py), not the user's: not guarded, logged as such.
        ``images``: sent with the prompt (checked by the caller: agent_loop/image_input.py)."""
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a string")
        # Command-line prompts arrive surrogate-escaped when their bytes are not UTF-8.
        return await self._run(scrub_surrogates(prompt), source=HOOK_SOURCE if by_hook else None, images=images)

    async def compact(self, focus: str | None = None) -> ContextCompacted:
        """``/compact [focus]``: the model summarizes the conversation, and the summary replaces it.

        The summary is a durable ``context/compact`` record (fsynced), so a resume rebuilds the compacted
        conversation. Raises :class:`HarnessError` on failure (``ABORTED`` when cancelled), and then the
        conversation is unchanged. Runs like a turn: one at a time, and :meth:`cancel` stops it.
        """
        self._slot.check_free()
        if not any(message.role != "system" for message in self._conversation.messages):
            raise HarnessError("nothing to compact yet", ErrorCode.COMPACT)
        scope = self._slot.begin()
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
            self._slot.end()

    async def _summarize(self, focus: str | None, turn: int | None) -> ContextCompacted:
        """The summary (agent_loop/compact.py); transient failures are retried as a step's request is."""
        return await summarize(self._chat_request(), self._conversation.messages, focus, turn, self._stream_quietly)

    async def _stream_quietly(self, request: ChatRequest) -> ReplyBuilder:
        """One request, its reply assembled but not shown; transient failures retried (no log records)."""

        async def attempt() -> ReplyBuilder:
            builder = ReplyBuilder()
            # The summary is stored: masked like any reply.
            await self._stream_reply(request, builder, MaskedDeltas(self.redactor), show=False)
            return builder

        return await self._retrying(attempt)

    async def _stream_reply(self, request: ChatRequest, builder: ReplyBuilder, masks: MaskedDeltas, *,
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

    async def _retrying(self, attempt: Callable[[], Awaitable[ReplyBuilder]], *,
                        triage: Callable[[Exception, str], Awaitable[Triage]] | None = None,
                        announce: Announce | None = None) -> ReplyBuilder:
        """:func:`~dsh.agent_loop.request_retry.retrying` under this agent's retry policy; a cancel of this
        agent is never retried."""
        return await retrying(attempt, self.retry, lambda: self._slot.cancel_called, triage=triage, announce=announce)

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
        if self._slot.running:
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
        await self._slot.dispose()
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

    async def _run(self, prompt: str, *, source: str | None, images: tuple[Image, ...] = ()) -> EndReason:
        slot = self._slot
        scope = slot.begin()
        self.turn_number += 1
        state = self._state = TurnState(self.turn_number, images=images)
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
            if failure is not None and not (cancelled_from_outside or scope.cancel_called):
                self.last_failure = failure
            reason = slot.ending(reason, failure, cancelled_from_outside=cancelled_from_outside, step=state.step,
                                 secrets=self._secrets())
            # _close_turn is synchronous (log writes are plain write/fsync), so no cancellation can cut
            # it short; the shield keeps that true should it ever need to await.
            with anyio.CancelScope(shield=True):
                reason = self._close_turn(state, reason)
            self._state = None
            slot.end()
        return reason

    def _close_turn(self, state: TurnState, reason: EndReason) -> EndReason:
        """Commit what the turn owes (interrupted prefix, results for pending calls) and the turn/end."""
        reason = nothing_to_compact(reason, self._conversation.turn_alone)
        if state.builder is not None:
            builder, state.builder = state.builder, None
            if state.masks is not None:  # a tail held back is masked and kept, never dropped unmasked
                self._take_deltas(builder, state.masks.flush())
            if builder.text or builder.reasoning:  # half-streamed tool calls are dropped
                self._publish_quietly(state.reply_message(builder, (), interrupted=True))
        if state.calls is not None and state.calls.pending:
            state.calls.settle(reason)
        if state.log_failure is not None:
            # The session is no longer being recorded: that is the news, whatever else happened.
            reason = failure_from_exception(state.log_failure, state.step, self._secrets())
        self._publish_quietly(TurnEnd(state.turn, reason))
        return reason

    async def _turn_body(self, state: TurnState, prompt: str, source: str | None) -> EndReason:
        guarded = source is None
        logged_prompt = self.guard.mask(prompt) if guarded else prompt
        mode = self.permissions.mode if self.permissions is not None else Mode.DEFAULT
        self._publish(TurnStart(state.turn, logged_prompt, source=source,
                                mode=None if mode is Mode.DEFAULT else str(mode), images=state.images or None))
        journal = self.journal  # the log exists now (a lazy one is written by turn/start)
        if journal is not None:
            self.session_state[JOURNAL_KEY] = journal  # the edit tools journal before-images there
        if guarded:
            rejection, added = await self.guard.checked(prompt, self.cwd)
            if rejection is not None:
                return Rejected(rejection)
            if added:  # what UserPromptSubmit hooks printed: it joins the prompt (agent_loop/conversation.py)
                self._publish(ev.HookContext(state.turn, "UserPromptSubmit", added))
        for step in range(1, self.max_steps + 1):
            if self.before_request is not None and (stop := self.before_request()) is not None:
                return stop
            state.step = step
            self._publish(StepStart(state.turn, step))
            builder = await self._request(state)
            step_calls = self._commit_reply(state, builder)
            if builder.finish_reason == "length":
                state.hit_max_tokens = True  # sticky for the rest of the turn
            if not step_calls.calls:
                return MaxTokens() if state.hit_max_tokens else Completed()
            await step_calls.run()
        raise HarnessError(
            f"turn stopped after {self.max_steps} steps (the max-steps guard); the model kept calling tools",
            ErrorCode.MAX_STEPS,
        )

    def _chat_request(self) -> ChatRequest:
        messages = self._conversation.messages
        return ChatRequest(
            model=self.model,
            messages=tuple(messages if self.image_rules.accepts(self.model) else without_images(messages)),
            tools=self.tools.specs(),
            max_tokens=self.max_tokens,
            thinking=self.thinking,
            reasoning_effort=self.reasoning_effort,  # type: ignore[arg-type]
        )

    async def _request(self, state: TurnState) -> ReplyBuilder:
        """Stream one step's reply: transient failures before any content are retried; a cut after text, and
        with ``auto_continue`` a reply stopped at the output-token limit, are continued (agent_loop/continuation.py)."""
        step = StepContinuations(self.continuation)

        async def attempt() -> ReplyBuilder:
            request = self._chat_request()
            builder, request = ((step.cut, step.request(request)) if step.cut is not None
                                else (ReplyBuilder(), self.prefix.observe(request)))
            state.builder, state.masks = builder, MaskedDeltas(self.redactor)
            await self._stream_reply(request, builder, state.masks, show=True)
            return builder

        async def triage(exc: Exception, code: str) -> Triage:
            compacts = self.auto_compact and not state.compacted and self._may_send()
            if code == ErrorCode.CONTEXT_WINDOW_EXCEEDED and compacts:
                state.compacted = True  # one compaction and one retry, then the failure stands
                state.builder = None
                await self._compact_in_turn(state, exc)
                return "again"
            # Content already on the user's screen is not streamed twice: such a failure ends the turn, unless the
            # reply is continued from it (its held-back tail shown first). A half-received tool call was never
            # shown: it is dropped and the request retried.
            builder = state.builder
            if builder is None or not builder.has_shown_content:
                return "policy"
            if state.masks is not None:
                self._take_deltas(builder, state.masks.flush())
            if not step.wanted(builder, code) or not self._may_send():
                return "stands"  # past the budget, the cut stands: the next request would go past the cap
            message = self.redactor(error_chain(exc))
            self._publish(step.take(state.turn, state.step, builder, code, message=message, cause=exc))
            return "again"

        def announce(exc: Exception, code: str, attempt: int, delay: float, limit: int | None) -> None:
            state.builder = None
            self._publish(LlmRetry(state.turn, state.step, attempt=attempt, max_attempts=self.retry.attempts_for(limit),
                                   delay_s=round(delay, 3), code=code, message=self.redactor(error_chain(exc))))

        builder = await self._retrying(attempt, triage=triage, announce=announce)
        while builder.finish_reason == LENGTH and step.wanted(builder, LENGTH) and self._may_send():
            self._publish(step.take(state.turn, state.step, builder, LENGTH, usage=builder.usage))
            builder = await self._retrying(attempt, triage=triage, announce=announce)
        return builder

    def _may_send(self) -> bool:
        """Whether a request besides a step's own (a continuation, a compaction) may go out: the budget allows it."""
        return self.before_request is None or self.before_request() is None

    def _take_deltas(self, builder: ReplyBuilder, deltas: tuple[Delta, ...], *, show: bool = True) -> None:
        """Keep masked deltas in the reply and show them (live-only events: built only for a subscriber)."""
        for delta in deltas:
            if not delta.text:
                continue
            builder.feed(delta)
            if show and self._subscribers:
                kind = ev.TextDelta if isinstance(delta, TextDelta) else ev.ReasoningDelta
                self._deliver(kind(delta.text))

    async def _compact_in_turn(self, state: TurnState, refused: Exception) -> None:
        """The automatic compaction: on success the summary is published and the step's request is sent
        again; on failure the refusal stands (the compaction's own failure goes to the host log)."""
        event: ContextCompacted | None = None
        try:
            if self.before_compact is not None:
                await self.before_compact()
            event = await self._summarize(None, state.turn)
        except Exception as exc:
            if self._slot.cancel_called:
                raise
            _log.warning("automatic compaction failed: %s", self.redactor(error_chain(exc)))
        if event is None:
            raise refused  # outside the handler: its cause chain stays its own
        self._publish(event)

    # --- the step's tool calls (agent_loop/tool_calls.py) ---------------------------------------

    def _commit_reply(self, state: TurnState, builder: ReplyBuilder) -> StepCalls:
        """Publish the step's reply; its tool calls (ids made unique) are owed a result from here on."""
        calls = unique_ids(builder.tool_calls)
        state.builder = None
        self._publish(state.reply_message(builder, tuple(calls)))
        state.calls = StepCalls(state.turn, calls, self._tool_runner())
        return state.calls

    def _tool_runner(self) -> ToolRunner:
        return ToolRunner(self.tools, self._publish, self._publish_quietly, self.redactor, self._context)

    def _context(self, turn: int, call: ToolCall) -> ToolContext:
        return ToolContext(
            cwd=self.cwd,
            turn=turn,
            notify=self._notify,
            approver=self.approver,
            session_state=self.session_state,
            label=self.label,
            call_id=call.id,
            post_notice=self.post_notice,
            redact=self.redactor,
            permissions=self.permissions,
            model=self.model,
            image_rules=self.image_rules,
        )
