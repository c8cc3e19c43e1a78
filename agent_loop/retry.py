"""Which failed model requests are retried, and how long to wait first.

Up to ``max_retries`` retries for transient codes; backoff starts at ``base_delay`` and doubles to
``max_delay``, plus up to ``jitter`` (a fraction) so that clients do not retry in lockstep (never above
the cap). A failure may cap its own retries lower (``LlmError.retry_limit``: 0 for a permanent one).
A server's ``Retry-After`` is used as-is when it is below the cap; a longer one is not
honoured (the ordinary backoff applies) so a turn never hangs for minutes on one header. The default
numbers live in :mod:`dsh.llm.defaults`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from dsh.llm import ErrorCode
from dsh.llm.defaults import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_RETRY_JITTER,
    DEFAULT_RETRY_MAX_DELAY,
)

__all__ = ["NEVER_RETRIED", "RETRYABLE_CODES", "RetryPolicy"]

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


@dataclass
class RetryPolicy:
    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay: float = DEFAULT_RETRY_BASE_DELAY
    max_delay: float = DEFAULT_RETRY_MAX_DELAY
    jitter: float = DEFAULT_RETRY_JITTER
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def attempts_for(self, limit: int | None = None) -> int:
        """How many retries a failure gets: the policy's, or fewer when the failure caps them itself."""
        return self.max_retries if limit is None else min(self.max_retries, limit)

    def should_retry(self, code: str, retries_done: int, limit: int | None = None) -> bool:
        """Whether a failure with ``code`` (capped at ``limit`` retries) gets another attempt."""
        return code in RETRYABLE_CODES and retries_done < self.attempts_for(limit)

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if retry_after_s is not None and 0 < retry_after_s <= self.max_delay:
            return retry_after_s
        backoff = min(self.max_delay, self.base_delay * (2.0 ** max(0, attempt - 1)))
        return min(self.max_delay, backoff * (1.0 + self.jitter * self.rng.random()))
