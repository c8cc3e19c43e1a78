"""Wait for a condition, not for a fixed time: poll it until it holds or a deadline passes.

A fixed ``sleep(0.2)`` before checking something is either too short on a loaded CI box (a flaky test)
or longer than needed everywhere else. ``wait_until`` returns as soon as the predicate is truthy (its
value, so a test can wait for *and* take a result) and fails the test with ``what`` when the deadline
passes. Sleeps that are the behaviour under test (a slow writer, a stalled peer) stay plain sleeps, with
a comment saying so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["POLL_INTERVAL", "async_wait_until", "wait_until"]

T = TypeVar("T")
POLL_INTERVAL = 0.01


def wait_until(predicate: Callable[[], T], timeout: float, what: str = "", *, interval: float = POLL_INTERVAL) -> T:
    """``predicate()``'s first truthy value, polled every ``interval`` s; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate!r}")
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], T], timeout: float, what: str = "", *, interval: float = POLL_INTERVAL
) -> T:
    """:func:`wait_until` for async tests: polls with ``anyio.sleep`` so the event loop keeps running."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate!r}")
        await anyio.sleep(interval)
