"""The chat requests one client has in flight: counted in one place, and bounded by ``max_parallel``.

A request is in flight from the moment it is sent until its response is over (DeepSeek counts its concurrency
cap so: docs/endpoints.md, "DeepSeek"). The gate is held by the request's own task (no task of its own), so a
cancelled request leaves it as it found it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

__all__ = ["CONCURRENCY_CAP_ANSWER", "RequestGate", "concurrency_cap_message", "is_concurrency_cap"]

# DeepSeek's documented 429 (its error codes page: "429 - Rate Limit Reached"), which its rate-limit page says is
# the answer once the account's concurrent requests for a model pass the cap.
CONCURRENCY_CAP_ANSWER = "Rate Limit Reached"


class RequestGate:
    """How many requests are in flight, and (``limit`` > 0) at most ``limit`` of them at once; the rest wait."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.in_flight = 0
        self.peak = 0  # the most in flight at once
        self._slots = anyio.Semaphore(limit) if limit > 0 else None

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Wait for a slot (when bounded), then count the request in flight until the block ends."""
        if self._slots is not None:
            await self._slots.acquire()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            if self._slots is not None:
                self._slots.release()


def is_concurrency_cap(status: int, provider: str | None, dialect: str) -> bool:
    """Whether an error answer is DeepSeek's concurrency cap: a 429 saying DeepSeek's words, on a ``deepseek``
    dialect endpoint (another dialect's 429 keeps the generic reading)."""
    return dialect == "deepseek" and status == 429 and (provider or "").strip() == CONCURRENCY_CAP_ANSWER


def concurrency_cap_message(model: str, in_flight: int) -> str:
    """The failure's words: the account's cap for the model, and this dsh's requests in flight (this one included).
    Who answered is named by the turn's fix line, as for every failure."""
    requests = "request" if in_flight == 1 else "requests"
    return (f"{CONCURRENCY_CAP_ANSWER}: the account's cap on concurrent requests to {model} was reached; "
            f"this dsh had {in_flight} {requests} in flight")
