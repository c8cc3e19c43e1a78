"""Helpers shared by the agent-loop tests (plain functions and small classes, no fixtures)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from dsh.agent_loop import Event, Tool, ToolOutput, to_wire
from dsh.llm import ChatRequest, StreamEvent


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


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and records of a session log, read straight from disk with plain ``json``."""
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), "the log must end with a complete line"
    lines = raw.decode("utf-8").splitlines()
    header = json.loads(lines[0])
    records = [json.loads(line) for line in lines[1:]]
    return header, records


def durable_types(records: Sequence[dict[str, Any]]) -> list[str]:
    return [record["type"] for record in records]


def assert_well_formed(records: Sequence[dict[str, Any]]) -> None:
    """seq contiguous from 1; every turn/start has exactly one turn/end, nothing of a turn after its end;
    every tool/call of a turn has exactly one tool/result before the turn ends."""
    assert [record["seq"] for record in records] == list(range(1, len(records) + 1))
    open_turn: int | None = None
    ended: set[int] = set()
    pending: set[str] = set()
    last_turn = 0
    for record in records:
        kind, data = record["type"], record["data"]
        if kind == "turn/start":
            assert open_turn is None, f"turn {data['turn']} started inside turn {open_turn}"
            assert data["turn"] > last_turn
            open_turn = last_turn = data["turn"]
            pending = set()
        elif kind == "turn/end":
            assert open_turn == data["turn"], f"turn/end {data['turn']} without its turn/start"
            assert data["turn"] not in ended
            assert not pending, f"turn {open_turn} ended with unanswered tool calls {pending}"
            ended.add(data["turn"])
            open_turn = None
        elif kind == "job/notice":
            continue
        else:
            assert open_turn is not None, f"{kind} outside a turn"
            assert data["turn"] == open_turn
            if kind == "assistant/message":
                assert not pending
                pending = {call["id"] for call in data["tool_calls"]}
            elif kind == "tool/result":
                assert data["id"] in pending, f"result for unknown call {data['id']}"
                pending.discard(data["id"])
    assert open_turn is None, f"turn {open_turn} has no turn/end"


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
