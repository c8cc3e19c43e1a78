"""The loop around one request: sent again while the retry policy calls its failure transient
(agent_loop/retry.py holds the policy; docs/architecture.md's turn table, "retry")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
import anyio.lowlevel

from dsh.agent_loop.retry import RetryPolicy, asked_to_wait
from dsh.llm import ErrorCode, HarnessError, LlmError, ReplyBuilder

__all__ = ["Announce", "Triage", "retrying"]

Triage = Literal["again", "stands", "policy"]  # a failed request: sent again now, final, or the policy's call
# told of each retry before its delay: the failure, its code, the attempt number, the delay and the limit
Announce = Callable[[Exception, str, int, float, int | None], None]


async def retrying(
    attempt: Callable[[], Awaitable[ReplyBuilder]],
    policy: RetryPolicy,
    cancelled: Callable[[], bool],
    *,
    triage: Callable[[Exception, str], Awaitable[Triage]] | None = None,
    announce: Announce | None = None,
) -> ReplyBuilder:
    """``attempt()`` until it returns: a failure the retry ``policy`` calls transient is tried again after the
    policy's delay; one that comes after the agent's own cancel (``cancelled()``) never is. ``triage`` may
    settle a failure first; ``announce`` hears of each retry (its code, attempt number, delay and limit)
    before the delay."""
    retries = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if cancelled():
                raise
            await anyio.lowlevel.checkpoint_if_cancelled()
            code = exc.code if isinstance(exc, HarnessError) else ErrorCode.UNKNOWN
            verdict = "policy" if triage is None else await triage(exc, code)
            if verdict == "again":
                continue
            limit = exc.retry_limit if isinstance(exc, LlmError) else None
            if verdict == "stands" or not policy.should_retry(code, retries, limit):
                raise
            retry_after = exc.retry_after_s if isinstance(exc, LlmError) else None
            if isinstance(exc, LlmError) and retry_after is not None and policy.waits_too_long(retry_after):
                too_long = asked_to_wait(exc, retry_after)
            else:
                retries += 1
                delay = policy.delay(retries, retry_after)
                if announce is not None:
                    announce(exc, code, retries, delay, limit)
                await anyio.sleep(delay)
                continue
        # Asked to wait past the cap: the turn ends saying when to retry. Raised out here, so that the
        # failure it restates is not chained beneath it a second time.
        raise too_long
