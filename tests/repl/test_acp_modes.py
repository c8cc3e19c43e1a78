"""``dsh acp`` and the permission modes (docs/safety.md, docs/editors.md): session/new answers the modes and the
current one (``--permission-mode``), session/set_mode changes what the next tool call may do, and auto is not
offered (nor accepted) without a sandbox. A real ``dsh acp`` process, the SDK's client, the fault server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import acp
import anyio
import pytest
from acp import schema

from dsh.agent_loop.permissions import PLAN_REFUSAL
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.mcp_servers import stdio_command
from tests.repl.test_acp_agent import REPO, Client, _dsh_acp
from tests.repl.test_permission_modes import _needs_bwrap
from tests.waiting import PROMPTLY

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]


async def test_modes_are_advertised_and_set_mode_applies_to_the_next_call(tmp_path: Path) -> None:
    script = [
        Behaviour("tool_call", id="call_w", name="write_file", arguments={"path": "new.txt", "content": "unasked\n"}),
        Behaviour("text", text="wrote"),
        Behaviour("tool_call", id="call_s", name="run_shell", arguments={"command": "echo no > no.txt"}),
        Behaviour("text", text="refused"),
    ]
    async with FaultServer(script=script) as server:
        client = Client(answers=[])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url, "--permission-mode", "accept-edits") as agent:
            with anyio.fail_after(PROMPTLY):
                await agent.conn.initialize(protocol_version=1, client_capabilities=schema.ClientCapabilities(),
                                            client_info=schema.Implementation(name="test", version="1"))
                session = await agent.conn.new_session(cwd=str(agent.cwd), mcp_servers=[])
            modes = session.modes
            assert modes is not None and modes.current_mode_id == "accept-edits"
            assert [(m.id, m.name) for m in modes.available_modes] == [
                ("default", "Default"), ("accept-edits", "Accept edits"), ("plan", "Plan")]  # no auto: no sandbox
            first = await agent.prompt(session.session_id, "write it")
            with anyio.fail_after(PROMPTLY):
                await agent.conn.set_session_mode(session_id=session.session_id, mode_id="plan")
            second = await agent.prompt(session.session_id, "run it")
            for mode_id, line in (("auto", 'auto needs a sandbox: set sandbox = "bwrap" in config.toml '
                                            "(docs/safety.md)"),
                                  ("yolo", "not a mode (modes: default, plan, accept-edits, auto)")):
                with anyio.fail_after(PROMPTLY), pytest.raises(acp.RequestError) as caught:
                    await agent.conn.set_session_mode(session_id=session.session_id, mode_id=mode_id)
                assert caught.value.code == -32602 and caught.value.data == {"modeId": line}
            tree = agent.cwd
    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert client.asked == []  # accept-edits wrote unasked; plan refused without asking
    assert (tree / "new.txt").read_text() == "unasked\n" and not (tree / "no.txt").exists()
    assert server.requests[3].json["messages"][-1]["content"] == PLAN_REFUSAL


async def test_plan_refuses_a_subagent_under_acp_and_default_runs_it_unasked(tmp_path: Path) -> None:
    """The same rule as the terminal app: in plan a delegation is refused without asking the editor; in default
    it runs under the subagent's own permission setting (docs/safety.md)."""
    child = [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"]
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "config" / "dsh" / "config.toml").write_text(
        f'[subagents.helper]\nprovider = "dsh"\ncommand = {json.dumps(child)}\n'
        f"env = {{ DSH_SCRIPTED_CHILD = {json.dumps(json.dumps({'text': 'delegated'}))} }}\n")
    delegate = {"description": "look", "prompt": "look around"}
    script = [
        Behaviour("tool_call", id="call_1", name="subagent", arguments=delegate),
        Behaviour("text", text="refused"),
        Behaviour("tool_call", id="call_2", name="subagent", arguments=delegate),
        Behaviour("text", text="ran"),
    ]
    async with FaultServer(script=script) as server:
        client = Client(answers=[])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url, "--permission-mode", "plan") as agent:
            session_id = await agent.start()
            first = await agent.prompt(session_id, "delegate it")
            with anyio.fail_after(PROMPTLY):
                await agent.conn.set_session_mode(session_id=session_id, mode_id="default")
            second = await agent.prompt(session_id, "delegate it again")
    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert client.asked == []
    assert server.requests[1].json["messages"][-1]["content"] == PLAN_REFUSAL
    assert server.requests[3].json["messages"][-1]["content"] == "delegated"


async def test_with_a_sandbox_the_editor_is_told_and_auto_still_asks_for_an_mcp_tool(tmp_path: Path) -> None:
    """Under ``dsh acp`` with ``sandbox = "bwrap"``: the permission request for a command says ``(sandboxed)``;
    in auto the next command runs without one, but an MCP tool that may write still asks the editor."""
    _needs_bwrap()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "config" / "dsh" / "config.toml").write_text('sandbox = "bwrap"\n')
    command = stdio_command("ok")
    mcp = schema.McpServerStdio(name="fx", command=command[0], args=command[1:],
                                env=[schema.EnvVariable(name="PYTHONPATH", value=REPO)])
    script = [
        Behaviour("tool_call", id="call_1", name="run_shell", arguments={"command": "echo asked > one.txt"}),
        Behaviour("text", text="ran"),
        Behaviour("tool_call", id="call_2", name="run_shell", arguments={"command": "echo unasked > two.txt"}),
        Behaviour("tool_call", id="call_3", name="mcp__fx__add", arguments={"a": 2, "b": 40}),
        Behaviour("text", text="done"),
    ]
    async with FaultServer(script=script) as server:
        client = Client(answers=["yes", "no"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start(mcp_servers=[mcp])
            first = await agent.prompt(session_id, "run it")
            with anyio.fail_after(PROMPTLY):
                await agent.conn.set_session_mode(session_id=session_id, mode_id="auto")
            second = await agent.prompt(session_id, "run and add")
            tree = agent.cwd
    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert [asked.title for asked, _ in client.asked] == ["Run echo asked > one.txt (sandboxed)", "fx: add"]
    assert (tree / "one.txt").read_text() == "asked\n" and (tree / "two.txt").read_text() == "unasked\n"
    results = [m["content"] for m in server.requests[-1].json["messages"] if m["role"] == "tool"]
    assert results == ["(no output)\n[exit code: 0] (sandboxed)", "(no output)\n[exit code: 0] (sandboxed)",
                       "Error: the user denied this MCP tool call"]
