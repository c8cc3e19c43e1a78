"""What a slash command and a failure capsule may use of the shell they run in: :class:`Host`.

A module of its own so that the commands (:mod:`dsh.repl.commands`) and the capsule (:mod:`dsh.repl.capsule`)
both see the shell through it, and neither imports the other for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dsh.agent_loop.reasons import EndReason
    from dsh.agent_loop.session import Session
    from dsh.repl.config import Config
    from dsh.repl.endpoint import Endpoint

__all__ = ["Host"]


class Host(Protocol):
    """What a command may use of the shell it runs in (:class:`dsh.repl.shell.Shell` is one)."""

    config: Config
    endpoint: Endpoint
    session: Session
    exit_code: int | None
    vi_mode: bool

    @property
    def env(self) -> dict[str, str]: ...

    def say(self, text: str) -> None: ...

    def report_resumed(self) -> None: ...

    async def run_turn(self, prompt: str) -> EndReason: ...

    async def compact(self, focus: str) -> None: ...
