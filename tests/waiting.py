"""Wait for a condition, not for a fixed time: poll it until it holds or a deadline passes.

A fixed ``sleep(0.2)`` before checking something is either too short on a loaded CI box (a flaky test)
or longer than needed everywhere else. ``wait_until`` returns as soon as the predicate is truthy (its
value, so a test can wait for *and* take a result) and fails the test with ``what`` when the deadline
passes. Sleeps that are the behaviour under test (a slow writer, a stalled peer) stay plain sleeps, with
a comment saying so.

Where a test must tell "ends promptly" from a wrong path (a deadline that does not fire, a wait for a
child that never answers), it bounds the time by :data:`PROMPTLY` and makes the wrong path take several
times longer (a 600 s sleep rather than 60 s, a 60 s fallback deadline): never a speed claim, which
belongs in bench/. A lower bound (``elapsed >= the deadline``) is fine: load only makes it later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["POLL_INTERVAL", "PROMPTLY", "async_wait_until", "wait_until"]

T = TypeVar("T")
POLL_INTERVAL = 0.01
# What a prompt end may take on a loaded machine: busy loops on both cores and other suites running make
# a Python child start in seconds (dsh itself: 5-7 s). The wrong paths such a bound rules out take 60 s+.
PROMPTLY = 20.0


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
