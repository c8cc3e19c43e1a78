"""Helpers shared by the agent-loop tests (plain functions and small classes, no fixtures)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from dsh.agent_loop import Event, Tool, ToolOutput, to_wire
from dsh.llm import ChatRequest, StreamEvent
from tests.session_log_invariants import assert_well_formed, read_log

__all__ = ["Recorder", "ScriptedClient", "assert_well_formed", "durable_types", "echo_tool", "read_log"]


class Recorder:
    """A subscriber that keeps every event it is given, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [to_wire(event)["data"] for event in self.events if event.type == kind]

    @property
    def types(self) -> list[str]:
        return [event.type for event in self.events]

    def text(self) -> str:
        return "".join(data["text"] for data in self.of("text/delta"))


def durable_types(records: Sequence[dict[str, Any]]) -> list[str]:
    return [record["type"] for record in records]


class ScriptedClient:
    """An in-process stand-in for ``DeepSeekClient`` for narrow unit tests: one script per request.

    A script is a sequence of stream events; an exception instance in it is raised at that point.
    """

    def __init__(self, *scripts: Sequence[StreamEvent | BaseException]) -> None:
        self.scripts = list(scripts)
        self.requests: list[ChatRequest] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        script = self.scripts.pop(0) if self.scripts else []
        for item in script:
            if isinstance(item, BaseException):
                raise item
            yield item


def echo_tool(name: str = "get_weather", *, safe: bool = True, text: str | None = None) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> ToolOutput:
        return ToolOutput(text if text is not None else f"{name} ok: {json.dumps(args, sort_keys=True)}")

    return Tool(name, f"test tool {name}", {"type": "object", "properties": {}}, run, concurrency_safe=safe)
