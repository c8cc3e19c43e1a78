"""An answer that survives a cut: a reply whose stream ended after its text was shown is continued with chat
prefix completion, the text so far as the prefix (docs/endpoints.md, "DeepSeek"; docs/reliability.md).

Only a ``deepseek``-dialect endpoint is asked (the extension is DeepSeek's beta); elsewhere a cut after shown text
ends the turn as it always did. What is continued:

* a stream cut (a reset, a stall, a close before the end: :data:`CUT_CODES`) after answer text
  arrived, with no tool call begun: a half-received tool call is retried as a step instead, as before;
* with ``auto_continue``, a reply that stopped at the output-token limit (``finish_reason: length``) with no tool
  call.

At most ``max_continuations`` times a step. Each is one ``llm/continue`` event (the visible line, and the session
log's record of the cut and its cause chain); the reply stays one builder, so the log and ``-p`` stdout hold the
whole answer once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from dsh.agent_loop.events import LlmContinue
from dsh.agent_loop.extension_files import grouped
from dsh.llm import ChatRequest, ErrorCode, Message, ReplyBuilder, Usage
from dsh.llm.defaults import DEFAULT_MAX_CONTINUATIONS

__all__ = [
    "CUT_CODES", "DEFAULT_MAX_CONTINUATIONS", "LENGTH", "ContinuationPolicy", "StepContinuations", "continuable",
    "continue_words", "prefix_request",
]

# The failures that cut a stream: a reset or refused connection, a stall, a close before the end. A server's own
# error (an error event, a status) is its answer, not a cut, and stands.
CUT_CODES: frozenset[str] = frozenset({ErrorCode.TRANSPORT, ErrorCode.TIMEOUT, ErrorCode.STREAM_CLOSED})
LENGTH = "length"  # the code an ``llm/continue`` event gives for a reply stopped at the output-token limit


@dataclass(frozen=True, slots=True)
class ContinuationPolicy:
    """Whether and how often a step's reply is continued (config ``max_continuations``, ``auto_continue``)."""

    max_continuations: int = DEFAULT_MAX_CONTINUATIONS
    auto_continue: bool = False  # a reply stopped at the output-token limit is continued too
    # Asked at each cut: whether the endpoint takes prefix completion now (its dialect is ``deepseek``).
    applies: Callable[[], bool] = field(default=lambda: True, compare=False)


def continuable(builder: ReplyBuilder) -> bool:
    """Whether a reply can be continued from its text: some answer text, and no tool call begun."""
    return bool(builder.text) and not builder.began_tool_calls


def continue_words(event: LlmContinue) -> str:
    """The visible line: ``[continuing after TRANSPORT: 1 214 chars kept (prefix completion)]`` (docs/contracts.md).
    ``code`` is dsh's own (an error code or :data:`LENGTH`); anything else reads as UNKNOWN."""
    try:  # a record read back from a log may say anything
        after = "the output-token limit" if event.code == LENGTH else ErrorCode(event.code).value
    except ValueError:
        after = ErrorCode.UNKNOWN.value
    kept = grouped(max(event.kept_chars, 0))
    return f"[continuing after {after}: {kept} chars kept (prefix completion)]"


def prefix_request(request: ChatRequest, builder: ReplyBuilder) -> ChatRequest:
    """``request`` asking the model to go on from the reply so far: its text (and reasoning) as the last, assistant
    ``prefix`` message."""
    prefix = Message("assistant", builder.text, reasoning_content=builder.reasoning or None, prefix=True)
    return dataclasses.replace(request, messages=(*request.messages, prefix))


@dataclass(slots=True)
class StepContinuations:
    """One step's continuations: the reply being continued (``cut``, None for a fresh request) and how many so far."""

    policy: ContinuationPolicy | None  # None: this endpoint's replies are never continued
    cut: ReplyBuilder | None = None
    count: int = 0

    def wanted(self, builder: ReplyBuilder, code: str) -> bool:
        """Whether ``builder``'s reply, ended by ``code`` (a failure's, or :data:`LENGTH`), is continued."""
        policy = self.policy
        if policy is None or self.count >= policy.max_continuations or not continuable(builder) or not policy.applies():
            return False
        return code in CUT_CODES or (code == LENGTH and policy.auto_continue)

    def take(self, turn: int, step: int, builder: ReplyBuilder, code: str, *, message: str = "",
             usage: Usage | None = None, cause: Exception | None = None) -> LlmContinue:
        """The next request goes on from ``builder``; the event that says why and how much is kept."""
        assert self.policy is not None
        self.cut = builder
        self.count += 1
        return LlmContinue(turn, step, attempt=self.count, max_attempts=self.policy.max_continuations, code=code,
                           kept_chars=len(builder.text), message=message, usage=usage, cause=cause)

    def request(self, request: ChatRequest) -> ChatRequest:
        """``request``, asking to go on from the reply being continued."""
        assert self.cut is not None
        return prefix_request(request, self.cut)
