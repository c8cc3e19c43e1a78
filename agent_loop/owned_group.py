"""A task group that an object opens when it is entered and closes when it leaves, after its own shutdown.

For the async context managers that run work of their own (a JSON-RPC connection, a subagent run, the job
manager): the object owns its tasks, and leaving its ``async with`` block waits for every one of them
(docs/architecture.md, "Concurrency: who owns what").
"""

from __future__ import annotations

import anyio
import anyio.abc

__all__ = ["OwnedTaskGroup"]


class OwnedTaskGroup:
    def __init__(self) -> None:
        self.group: anyio.abc.TaskGroup | None = None

    async def open(self) -> anyio.abc.TaskGroup:
        group = anyio.create_task_group()
        await group.__aenter__()
        self.group = group
        return group

    async def close(self) -> None:
        """Called after the owner's own shutdown: every task has ended, so there is nothing to re-raise."""
        group, self.group = self.group, None
        if group is not None:
            await group.__aexit__(None, None, None)
