"""SIGINT/SIGTERM outside the interactive app (piped stdin and ``-p``): :class:`Signals`."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc

if TYPE_CHECKING:
    from dsh.agent_loop.session import Session

__all__ = ["Signals"]


class Signals:
    """SIGINT/SIGTERM outside the interactive app: cancel the session's running turn, else ``on_idle``.

    Remembers the last signal, so that the exit status says which one ended dsh (130 or 143).
    """

    def __init__(self, session: Session, on_idle: Callable[[], None]) -> None:
        self.session = session
        self.on_idle = on_idle
        self.received: int | None = None

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()  # installed before the first turn starts
            async for signum in signals:
                self.received = signum
                if self.session.turn_running:
                    self.session.cancel_turn()
                self.on_idle()

    def exit_status(self, default: int) -> int:
        """``128 + signal`` once a signal stopped the work, else ``default``."""
        return 128 + self.received if self.received is not None else default
