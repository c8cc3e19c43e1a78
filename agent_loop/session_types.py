"""What a :class:`~dsh.agent_loop.session.Session` tells its subscribers and takes from its front end, beside the
agent's events (agent_loop/events.py): its own lines, a repaired turn, the failure to start, the hooks on a turn."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from dsh.agent_loop.events import Event
from dsh.llm import ErrorCode, HarnessError, error_chain

__all__ = ["Notice", "PromptTransform", "RepairedTurn", "SessionUpdate", "StartupError", "TurnScope",
           "no_scope"]


class StartupError(HarnessError):
    """The main agent could not be built; ``__cause__`` holds why."""

    def __init__(self, cause: BaseException) -> None:
        code = cause.code if isinstance(cause, HarnessError) else ErrorCode.STARTUP
        super().__init__(error_chain(cause), code, cause=cause)


@dataclass(frozen=True, slots=True)
class Notice:
    """A line about the session itself, not a turn's event: a subagent hint, a project-context note, a log
    that loaded with warnings, a compaction that did not happen. Plain text; the front end sanitizes it."""

    text: str


@dataclass(frozen=True, slots=True)
class RepairedTurn:
    """The session log's repair just closed turn ``turn``: the process that ran it exited before its end."""

    turn: int


SessionUpdate = Event | Notice | RepairedTurn  # what a subscriber hears
TurnScope = Callable[[], contextlib.AbstractAsyncContextManager[None]]  # wraps each turn (a live view, say)
PromptTransform = Callable[[str], str]  # the user's prompt -> the text the model is sent


@contextlib.asynccontextmanager
async def no_scope() -> AsyncIterator[None]:
    """A turn wrapped in nothing (no front end asked for a scope)."""
    yield
