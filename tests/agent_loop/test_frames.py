"""The frames a session remembers of its children (agent_loop/frames.py), for a failure report: real ACP agents and
MCP servers talking to dsh; only closed facts are kept (never a prompt, a result, a method a child made up)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dsh.agent_loop.frames import PER_PEER, FrameLog
from dsh.agent_loop.mcp import McpManager, parse_servers
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.tools.registry import ToolContext
from tests.agent_loop.mcp.conftest import StdioServers

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REPO = Path(__file__).resolve().parents[2]
AGENT = str(REPO / "repl" / "demo" / "acp_agent.py")  # a scripted ACP agent, run as a child
CANARY = "sk-canary-frames-3f9d"


async def _delegate(env: dict[str, str], tmp_path: Path) -> tuple[FrameLog, str | None]:
    frames = FrameLog()
    table = {"provider": "acp", "command": sys.executable, "args": [AGENT], "env": env, "startup_timeout": 120}
    provider = build_provider("probe", table, ParentContext(frames=frames))
    request = SubagentRequest(description="test", prompt=f"please use {CANARY}", cwd=str(tmp_path))
    async with provider.run(request) as run:
        result = await run.result()
    return frames, result.diagnostic


def _shape(frames: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(f["direction"], f["kind"], f.get("method"), f.get("code")) for f in frames]


async def test_an_acp_run_is_remembered_as_its_requests_and_answers_without_their_text(tmp_path: Path) -> None:
    frames, diagnostic = await _delegate({"ACP_FAKE_TEXT": f"answer with {CANARY}"}, tmp_path)
    assert diagnostic is None
    snapshot = frames.snapshot()
    assert list(snapshot) == ["subagent probe"]
    shape = _shape(snapshot["subagent probe"])
    assert shape[:4] == [("sent", "request", "initialize", None), ("received", "response", None, None),
                         ("sent", "request", "session/new", None), ("received", "response", None, None)]
    assert ("sent", "request", "session/prompt", None) in shape
    assert ("received", "notification", "session/update", None) in shape
    assert shape[-1] == ("received", "response", None, None)  # the prompt's answer
    ids = [f["id"] for f in snapshot["subagent probe"] if f["kind"] == "request"]
    assert ids == sorted(ids) and all(isinstance(i, int) for i in ids)
    text = json.dumps(snapshot)
    assert CANARY not in text and "answer" not in text and "please" not in text


async def test_an_agents_error_answer_is_remembered_with_its_code(tmp_path: Path) -> None:
    frames, diagnostic = await _delegate({"ACP_FAKE_ERROR_AT": "prompt"}, tmp_path)
    assert diagnostic is not None and "stage: prompt; category: agent-error" in diagnostic
    shape = _shape(frames.snapshot()["subagent probe"])
    assert ("received", "error", None, -32603) in shape


def _ctx() -> ToolContext:
    return ToolContext(cwd=Path("."), turn=1, notify=lambda event: None, approver=None)


async def test_an_mcp_servers_handshake_and_calls_are_remembered() -> None:
    frames = FrameLog()
    tables = {"ok": StdioServers().table("ok", approve="auto")}
    async with McpManager(parse_servers(tables), environ=os.environ, mask=lambda text: text, notice=lambda text: None,
                          frames=frames) as manager:
        await manager.wait_ready()
        tools = {tool.name: tool for tool in manager.tools()}
        assert (await tools["mcp__ok__echo"].run({"text": CANARY}, _ctx())).text == CANARY
    shape = _shape(frames.snapshot()["mcp ok"])
    assert shape[:3] == [("sent", "request", "initialize", None), ("received", "response", None, None),
                         ("sent", "notification", "notifications/initialized", None)]
    assert ("sent", "request", "tools/list", None) in shape
    call = shape.index(("sent", "request", "tools/call", None))
    assert ("received", "response", None, None) in shape[call:]
    assert CANARY not in json.dumps(frames.snapshot())


def test_a_method_a_child_made_up_is_kept_as_other_and_bad_frames_as_invalid() -> None:
    frames = FrameLog()
    tap = frames.tap("subagent x")
    tap("received", {"method": f"\x1b]0;{CANARY}\x07", "id": 7}, 40)
    tap("received", {"method": "session/update", "params": {"text": CANARY}}, 90)
    tap("received", "not an object", 3)
    tap("received", {"id": "a-string-id", "error": {"code": "x", "message": CANARY}}, 60)
    assert frames.snapshot()["subagent x"] == [
        {"t": frames.snapshot()["subagent x"][0]["t"], "direction": "received", "kind": "request", "method": "other",
         "id": 7, "size": 40},
        {"t": frames.snapshot()["subagent x"][1]["t"], "direction": "received", "kind": "notification",
         "method": "session/update", "size": 90},
        {"t": frames.snapshot()["subagent x"][2]["t"], "direction": "received", "kind": "invalid", "size": 3},
        {"t": frames.snapshot()["subagent x"][3]["t"], "direction": "received", "kind": "error", "size": 60},
    ]
    assert CANARY not in json.dumps(frames.snapshot())


def test_memory_is_bounded_per_peer_and_in_peers() -> None:
    frames = FrameLog(peers=3)
    for n in range(10 * PER_PEER):
        frames.message("mcp busy", "sent", {"method": "tools/call", "id": n}, None)
    for name in ("a", "b", "c"):
        frames.message(f"mcp {name}", "sent", {"method": "ping", "id": 1}, None)
    snapshot = frames.snapshot()
    assert list(snapshot) == ["mcp a", "mcp b", "mcp c"]  # the peer heard from least recently went first
    frames = FrameLog()
    for n in range(10 * PER_PEER):
        frames.message("mcp busy", "sent", {"method": "tools/call", "id": n}, None)
    kept = frames.snapshot()["mcp busy"]
    assert len(kept) == PER_PEER and kept[-1]["id"] == 10 * PER_PEER - 1  # the last ones, where a failure is
