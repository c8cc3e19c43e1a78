"""Which failed model requests are retried, and how long to wait first.

Up to ``max_retries`` retries for transient codes; backoff starts at ``base_delay`` and doubles to
``max_delay``, plus up to ``jitter`` (a fraction) so that clients do not retry in lockstep (never above
the cap). A failure may cap its own retries lower (``LlmError.retry_limit``: 0 for a permanent one).
A server's ``Retry-After`` (already parsed and bounded by the client: positive and finite) is waited for
as asked, up to ``retry_after_max``; one that asks for longer is not retried at all: the failure ends the
turn with when the server asked to be retried appended (:func:`asked_to_wait`), so a turn neither hangs for
minutes on one header nor hammers a server that asked for quiet. The default numbers live in
:mod:`dsh.llm.defaults`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from dsh.llm import ErrorCode, LlmError
from dsh.llm.defaults import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_AFTER_MAX,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_RETRY_JITTER,
    DEFAULT_RETRY_MAX_DELAY,
)

__all__ = ["NEVER_RETRIED", "RETRYABLE_CODES", "RetryPolicy", "asked_to_wait", "wait_words"]

RETRYABLE_CODES: frozenset[str] = frozenset(
    {
        ErrorCode.RATE_LIMIT,
        ErrorCode.SERVER,
        ErrorCode.TIMEOUT,
        ErrorCode.TRANSPORT,
        ErrorCode.EMPTY_RESPONSE,
        ErrorCode.PROXY,  # a proxy's 407 (and any permanent failure) caps itself with retry_limit=0
    }
)
# Listed for documentation and tests; anything not in RETRYABLE_CODES is not retried (HTTP_* included).
NEVER_RETRIED: frozenset[str] = frozenset(
    {
        ErrorCode.AUTH,
        ErrorCode.QUOTA,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.CONTEXT_WINDOW_EXCEEDED,
        ErrorCode.STREAM_CLOSED,
        ErrorCode.MALFORMED_RESPONSE,
    }
)

_MINUTE, _HOUR, _DAY = 60.0, 3600.0, 86400.0


@dataclass
class RetryPolicy:
    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay: float = DEFAULT_RETRY_BASE_DELAY
    max_delay: float = DEFAULT_RETRY_MAX_DELAY
    jitter: float = DEFAULT_RETRY_JITTER
    retry_after_max: float = DEFAULT_RETRY_AFTER_MAX
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def attempts_for(self, limit: int | None = None) -> int:
        """How many retries a failure gets: the policy's, or fewer when the failure caps them itself."""
        return self.max_retries if limit is None else min(self.max_retries, limit)

    def should_retry(self, code: str, retries_done: int, limit: int | None = None) -> bool:
        """Whether a failure with ``code`` (capped at ``limit`` retries) gets another attempt."""
        return code in RETRYABLE_CODES and retries_done < self.attempts_for(limit)

    def waits_too_long(self, retry_after_s: float | None) -> bool:
        """Whether a server asked to be retried later than this policy waits (its failure then ends the turn)."""
        return retry_after_s is not None and retry_after_s > self.retry_after_max

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based): the server's Retry-After when it gave
        one this policy waits for, else the backoff."""
        if retry_after_s is not None and 0 < retry_after_s <= self.retry_after_max:
            return retry_after_s
        backoff = min(self.max_delay, self.base_delay * (2.0 ** max(0, attempt - 1)))
        return min(self.max_delay, backoff * (1.0 + self.jitter * self.rng.random()))


def wait_words(seconds: float) -> str:
    """``45 s``, ``2 min``, ``3 h``, or ``more than a day``: rounded up, bounded whatever a server sent."""
    if not math.isfinite(seconds) or seconds > _DAY:
        return "more than a day"
    seconds = max(seconds, 0.0)
    if seconds < 2 * _MINUTE:
        return f"{math.ceil(seconds)} s"
    if seconds < 2 * _HOUR:
        return f"{math.ceil(seconds / _MINUTE)} min"
    return f"{math.ceil(seconds / _HOUR)} h"


def asked_to_wait(exc: LlmError, retry_after_s: float) -> LlmError:
    """``exc`` as the failure that ends the turn when its server asked to be retried later than dsh waits:
    the same facts and causes, its line saying when (``Rate Limit Reached (the server asked to retry after
    2 min)``), and no retries left."""
    return LlmError(
        f"{exc.message} (the server asked to retry after {wait_words(retry_after_s)})",
        exc.code,
        status=exc.status,
        retry_after_s=retry_after_s,
        request_id=exc.request_id,
        retry_limit=0,
        detail=exc.detail,
        endpoint=exc.endpoint,
        endpoint_name=exc.endpoint_name,
        cause=exc.__cause__,
    )
