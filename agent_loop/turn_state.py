"""The agent's turn bookkeeping (agent_loop/agent.py): the one slot a turn or a compaction runs in, and what
a running turn holds."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import anyio

from dsh.agent_loop.events import AssistantMessage
from dsh.agent_loop.masked_deltas import MaskedDeltas
from dsh.agent_loop.reasons import Aborted, Disposed, EndReason, Failed, failure_from_exception
from dsh.agent_loop.tool_calls import StepCalls
from dsh.llm import ErrorCode, HarnessError, Image, ReplyBuilder, ToolCall, unwrap_group

__all__ = ["TurnSlot", "TurnState"]


@dataclass
class TurnState:
    """What a running turn holds: its number and step, the reply streaming in, the step's tool calls, and
    what it must end with (a session-log failure, the output cap hit)."""

    turn: int
    step: int = 0
    images: tuple[Image, ...] = ()  # what the prompt sends with its text (agent_loop/image_input.py)
    hit_max_tokens: bool = False
    builder: ReplyBuilder | None = None  # the reply being streamed, until committed
    masks: MaskedDeltas | None = None  # what the builder's text and reasoning pass through first
    calls: StepCalls | None = None  # the step's tool calls, once its reply is committed
    log_failure: HarnessError | None = None
    compacted: bool = False  # an automatic compaction happened: at most one per turn

    def reply_message(
        self, builder: ReplyBuilder, calls: tuple[ToolCall, ...], *, interrupted: bool = False
    ) -> AssistantMessage:
        """The step's reply as its event: whole, or the prefix of an interrupted one (no finish reason)."""
        return AssistantMessage(
            self.turn,
            self.step,
            content=builder.text,
            reasoning_content=builder.reasoning or None,
            tool_calls=calls,
            finish_reason=None if interrupted else builder.finish_reason,
            interrupted=interrupted,
            usage=builder.usage,
        )


class TurnSlot:
    """Whether a turn (or a compaction) runs, its cancel scope and why it was cancelled, whether the agent is
    being disposed, and the event a disposal waits on until the run is over."""

    __slots__ = ("cancel_reason", "closed", "disposing", "idle", "running", "scope")

    def __init__(self) -> None:
        self.running = False
        self.closed = False
        self.scope: anyio.CancelScope | None = None
        self.cancel_reason: str | None = None
        self.disposing = False
        self.idle: anyio.Event | None = None

    def check_free(self) -> None:
        """Raise unless a run may start: the agent is open and nothing runs."""
        if self.closed:
            raise HarnessError("the agent is closed", ErrorCode.AGENT_CLOSED)
        if self.running:
            raise HarnessError("a turn is already running on this agent", ErrorCode.TURN_BUSY)

    def begin(self) -> anyio.CancelScope:
        """Take the slot (see :meth:`check_free`); the run's cancel scope."""
        self.check_free()
        self.running = True
        self.idle = anyio.Event()
        self.cancel_reason = None
        scope = self.scope = anyio.CancelScope()
        return scope

    def end(self) -> None:
        """Free the slot and wake a disposal waiting for the run to be over."""
        self.running = False
        self.scope = None
        self.disposing = False
        if self.idle is not None:
            self.idle.set()

    @property
    def cancel_called(self) -> bool:
        """The running turn was cancelled by the agent itself (not by the caller's scope)."""
        return self.scope is not None and self.scope.cancel_called

    def cancel(self, reason: str) -> bool:
        """Cancel the run for ``reason`` (the first reason given stands); False when nothing runs."""
        if not self.running or self.scope is None:
            return False
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.scope.cancel()
        return True

    def ending(self, reason: EndReason | None, failure: BaseException | None, *, cancelled_from_outside: bool,
               step: int, secrets: tuple[str, ...]) -> EndReason:
        """How a run ends, in its ``finally``: cancelled (disposed or aborted, whatever the adapter raised), the
        failure it raised, the reason it returned, or what is propagating (a BaseException that is not a cancel)."""
        if cancelled_from_outside or (self.cancel_called and reason is None):
            return Disposed() if self.disposing else Aborted(self.cancel_reason or "cancelled")
        if failure is not None:
            return failure_from_exception(failure, step, secrets)
        if reason is not None:
            return reason
        escaping = sys.exc_info()[1]
        if escaping is not None:
            return failure_from_exception(unwrap_group(escaping), step, secrets)
        return Failed(ErrorCode.UNKNOWN, "turn ended without a reason", step)

    async def dispose(self) -> None:
        """Close the slot: a running turn is cancelled (it ends ``disposed``) and waited for."""
        if self.running and self.scope is not None:
            self.disposing = True
            self.scope.cancel()
            if self.idle is not None:
                with anyio.CancelScope(shield=True):
                    await self.idle.wait()
        self.closed = True
