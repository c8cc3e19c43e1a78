"""One step's tool calls, from the reply that made them to each one's result (docs/architecture.md's turn
table): announced as ``tool/call``, run in the registry's batches (concurrency-safe calls in parallel,
bounded), and committed as ``tool/result`` in model order; when the turn ends early, what each call is
still owed."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from dsh.agent_loop.conversation import UNFINISHED_TOOL_OUTPUT
from dsh.agent_loop.events import Event, ToolCallStart, ToolResult
from dsh.agent_loop.reasons import Aborted, Disposed, EndReason
from dsh.agent_loop.tools import ToolContext, ToolOutput, ToolRegistry, plan_batches, run_tool_call
from dsh.llm import ToolCall
from dsh.llm.reply import MAX_TOOL_CALLS

__all__ = [
    "CANCELLED_TOOL_OUTPUT",
    "DISPOSED_TOOL_OUTPUT",
    "DROPPED_TOOL_OUTPUT",
    "LOGGED_ARGUMENTS_CHARS",
    "StepCalls",
    "ToolRunner",
    "unique_ids",
]

CANCELLED_TOOL_OUTPUT = "Error: tool call cancelled"
DISPOSED_TOOL_OUTPUT = "Error: tool call cancelled: the agent was closed"
DROPPED_TOOL_OUTPUT = (
    f"Error: tool call dropped: more than {MAX_TOOL_CALLS} tool calls in one step; "
    "this call and every later one in the response were not run"
)
LOGGED_ARGUMENTS_CHARS = 4096  # a tool/call event's arguments beyond this are in its assistant/message


def _arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as a hook is sent them (``{}`` when they are not a JSON object)."""
    try:
        value = json.loads(call.arguments or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def unique_ids(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """Tool calls with ids made unique (results are matched by id; a repeat would be ambiguous)."""
    seen: set[str] = set()
    unique: list[ToolCall] = []
    for call in calls:
        call_id = call.id
        n = 2
        while call_id in seen:
            call_id, n = f"{call.id}_{n}", n + 1
        seen.add(call_id)
        unique.append(call if call_id == call.id else ToolCall(call_id, call.name, call.arguments))
    return unique


@dataclass(frozen=True, slots=True)
class ToolRunner:
    """The agent's parts a step's calls use: the registry, where their events go (``publish`` raises a
    session-log failure, ``publish_quietly`` records it), what masks their output, and each call's context
    (given the turn number and the call)."""

    tools: ToolRegistry
    publish: Callable[[Event], None]
    publish_quietly: Callable[[Event], None]
    redact: Callable[[str], str]
    context: Callable[[int, ToolCall], ToolContext]


class StepCalls:
    """The tool calls of one step's reply, each owed a result: announced at most once, committed in model
    order, their outputs kept until committed."""

    __slots__ = ("announced", "calls", "finished", "pending", "runner", "turn")

    def __init__(self, turn: int, calls: list[ToolCall], runner: ToolRunner) -> None:
        self.turn = turn
        self.calls = calls
        self.runner = runner
        self.pending = list(calls)  # committed calls still owed a result
        self.announced: set[str] = set()  # call ids with a tool/call event
        self.finished: dict[str, ToolOutput] = {}  # outputs not yet committed

    async def run(self) -> None:
        """Run the calls and commit their results; calls past the bound are dropped, each with a result."""
        # The reply builder kept one call past the bound to stand for every dropped one (llm/reply.py).
        kept, dropped = self.calls[:MAX_TOOL_CALLS], self.calls[MAX_TOOL_CALLS:]
        await self._run_kept(kept)
        for call in dropped:
            self.commit(call, ToolOutput(DROPPED_TOOL_OUTPUT, is_error=True))

    def settle(self, reason: EndReason) -> None:
        """At the turn's end: every call still pending gets its output if it finished, else a failed one
        saying why it has none (log failures recorded, not raised)."""
        text = (
            DISPOSED_TOOL_OUTPUT
            if isinstance(reason, Disposed)
            else CANCELLED_TOOL_OUTPUT
            if isinstance(reason, Aborted)
            else UNFINISHED_TOOL_OUTPUT
        )
        for call in list(self.pending):
            output = self.finished.pop(call.id, None) or ToolOutput(text, is_error=True)
            self.commit(call, output, quietly=True)

    def announce(self, call: ToolCall, *, quietly: bool = False) -> None:
        if call.id in self.announced:
            return
        self.announced.add(call.id)
        arguments = call.arguments
        if len(arguments) > LOGGED_ARGUMENTS_CHARS:
            # Stored once: the whole text is in this step's assistant/message, which resume reads.
            arguments = arguments[:LOGGED_ARGUMENTS_CHARS] + "…"
        event = ToolCallStart(self.turn, call.id, call.name, arguments)
        self.runner.publish_quietly(event) if quietly else self.runner.publish(event)

    def commit(self, call: ToolCall, output: ToolOutput, *, quietly: bool = False) -> None:
        self.announce(call, quietly=quietly)
        # The one place a tool's text enters the turn: masked here, it is masked for the model,
        # the session log and the screen alike.
        text = self.runner.redact(output.text)
        event = ToolResult(
            self.turn, call.id, call.name, text, is_error=output.is_error, diagnostic=output.diagnostic,
            images=output.images or None, cause=output.cause,
        )
        self.runner.publish_quietly(event) if quietly else self.runner.publish(event)
        self.pending.remove(call)
        self.finished.pop(call.id, None)

    async def _run_one(self, call: ToolCall) -> None:
        runner = self.runner
        ctx = runner.context(self.turn, call)
        hooks = runner.tools.hooks
        if not hooks:
            self.finished[call.id] = await run_tool_call(runner.tools, call, ctx)
            return
        # The hooks see the call before and after it runs (docs/hooks.md); a refused call never runs.
        arguments = _arguments(call)
        refused = await hooks.before_tool(call, arguments, ctx)
        if refused is not None:
            self.finished[call.id] = refused
            return
        output = await run_tool_call(runner.tools, call, ctx)
        self.finished[call.id] = await hooks.after_tool(call, arguments, output)

    async def _run_kept(self, calls: list[ToolCall]) -> None:
        for batch in plan_batches(self.runner.tools, calls):
            for call in batch:
                self.announce(call)
            if len(batch) == 1:
                call = batch[0]
                await self._run_one(call)
                self.commit(call, self.finished[call.id])
                continue
            await self._run_batch(batch)

    async def _run_batch(self, batch: list[ToolCall]) -> None:
        """Run concurrency-safe calls in parallel (bounded); commit their results in model order."""
        limiter = anyio.CapacityLimiter(self.runner.tools.max_parallel)
        done = {call.id: anyio.Event() for call in batch}

        async def worker(call: ToolCall) -> None:
            async with limiter:
                await self._run_one(call)
            done[call.id].set()

        async with anyio.create_task_group() as group:
            for call in batch:
                group.start_soon(worker, call)
            for call in batch:
                await done[call.id].wait()
                self.commit(call, self.finished[call.id])
