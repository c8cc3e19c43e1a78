"""One ordered pump from a session's synchronous callbacks to an async wire (``dsh acp``, ``dsh serve --stdio``).

A session's subscribers are called synchronously, in the agent's task, and must not block; the frames that
carry what they heard go out from one task of the front end's own task group, in order. :class:`UpdatePump`
is that hand-over, on an anyio memory object stream: :meth:`UpdatePump.send` from a callback, :meth:`run` in
the front end's task group, :meth:`flushed` before an answer that must come after every frame of the turn,
:meth:`close` when the session has closed.
:meth:`dsh.agent_loop.session.Session.pump_updates` feeds one with the session's updates.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

__all__ = ["UpdatePump"]

T = TypeVar("T")


class UpdatePump(Generic[T]):
    """Items sent in order, delivered in order by :meth:`run`: each delivery takes every item that queued while
    the one before it went out (a front end may merge them: ACP's text chunks)."""

    def __init__(self) -> None:
        # Unbounded: a callback cannot wait, and what it sends is what the turn already produced.
        self._sender, self._receiver = anyio.create_memory_object_stream[T](math.inf)
        self._undelivered = 0
        self._delivered: anyio.Event | None = None  # made by the first flushed() that has to wait

    def send(self, item: T) -> None:
        """Queue ``item`` after everything sent before it (never blocks; dropped once the pump is closed)."""
        try:
            self._sender.send_nowait(item)
        except anyio.ClosedResourceError:
            return
        self._undelivered += 1

    async def flushed(self) -> None:
        """Returns once everything sent so far has been delivered."""
        if not self._undelivered:
            return
        if self._delivered is None:
            self._delivered = anyio.Event()
        await self._delivered.wait()

    async def run(self, deliver: Callable[[Sequence[T]], Awaitable[None]]) -> None:
        """Deliver queued items, in batches, until cancelled or closed; ``deliver`` handles its own failures."""
        while batch := await self._next_batch():
            try:
                await deliver(batch)
            finally:
                self._done(len(batch))

    async def _next_batch(self) -> list[T]:
        """Everything queued, the first waited for; nothing once the pump is closed."""
        batch: list[T] = []
        try:
            batch.append(await self._receiver.receive())
            while True:
                batch.append(self._receiver.receive_nowait())
        except anyio.WouldBlock:
            return batch
        except (anyio.ClosedResourceError, anyio.EndOfStream):
            return []

    def close(self) -> None:
        """Both ends closed, once the session is: what is still queued is dropped (anyio warns of an open stream),
        and a :meth:`flushed` still waiting returns."""
        self._sender.close()
        self._receiver.close()
        self._undelivered = 0
        if self._delivered is not None:
            self._delivered.set()
            self._delivered = None

    def _done(self, count: int) -> None:
        self._undelivered = max(0, self._undelivered - count)  # 0 already if closed meanwhile
        if not self._undelivered and self._delivered is not None:
            self._delivered.set()
            self._delivered = None
