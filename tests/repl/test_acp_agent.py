"""``dsh acp`` as a real child process, driven by the ACP SDK's own client side against the loopback fault server.

Each test spawns ``python -m dsh.repl acp`` with ``acp.spawn_agent_process`` and a :class:`Client` that records
every ``session/update``, answers ``session/request_permission`` from a script, and (when it advertises ``fs``)
serves ``fs/read_text_file`` from its own buffers, different from the disk. Exact lines, canary key.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import acp
import anyio
import pytest
from acp import schema

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.mcp_servers import read_record, received, stdio_command
from tests import canaries
from tests.waiting import PROMPTLY, async_wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REPO = str(Path(__file__).resolve().parents[2])


class Client:
    """The ACP client side: records updates, answers permissions from ``answers``, serves ``buffers`` as files."""

    def __init__(self, answers: list[str] | None = None, buffers: dict[str, str] | None = None) -> None:
        self.updates: list[Any] = []
        self.frames: list[str] = []  # every update as JSON, for canary checks
        self.answers = list(answers or [])
        self.asked: list[tuple[schema.ToolCallUpdate, list[schema.PermissionOption]]] = []
        self.buffers = buffers
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)
        self.frames.append(update.model_dump_json(by_alias=True))

    async def request_permission(self, session_id: str, tool_call: schema.ToolCallUpdate,
                                 options: list[schema.PermissionOption], **_: Any) -> Any:
        self.asked.append((tool_call, options))
        answer = self.answers.pop(0) if self.answers else "cancel"
        if answer == "cancel":
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=answer))

    async def read_text_file(self, session_id: str, path: str, **_: Any) -> Any:
        self.reads.append(path)
        if self.buffers is None or path not in self.buffers:
            raise acp.RequestError.resource_not_found(path)
        return schema.ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(self, session_id: str, path: str, content: str, **_: Any) -> Any:
        self.writes.append((path, content))
        assert self.buffers is not None
        self.buffers[path] = content
        return schema.WriteTextFileResponse()

    def text(self, kind: type = schema.AgentMessageChunk) -> str:
        return "".join(u.content.text for u in self.updates if isinstance(u, kind))

    def of(self, kind: type) -> list[Any]:
        return [u for u in self.updates if isinstance(u, kind)]


class Agent:
    def __init__(self, conn: Any, client: Client, cwd: Path) -> None:
        self.conn = conn
        self.client = client
        self.cwd = cwd

    async def start(self, *, fs: bool = False, mcp_servers: list[Any] | None = None) -> str:
        capabilities = schema.ClientCapabilities(
            fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True) if fs else None)
        with anyio.fail_after(PROMPTLY):
            info = await self.conn.initialize(protocol_version=1, client_capabilities=capabilities,
                                              client_info=schema.Implementation(name="test", version="1"))
        assert info.protocol_version == 1 and info.agent_info.name == "dsh"
        with anyio.fail_after(PROMPTLY):
            session = await self.conn.new_session(cwd=str(self.cwd), mcp_servers=mcp_servers or [])
        return session.session_id

    async def prompt(self, session_id: str, text: str) -> Any:
        with anyio.fail_after(PROMPTLY * 2):
            return await self.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "HOME": str(tmp_path), "PYTHONPATH": REPO}
    env.update(extra)
    return env


@asynccontextmanager
async def _dsh_acp(tmp_path: Path, client: Client, *args: str, key: str | None = canaries.API_KEY,
                   env: dict[str, str] | None = None, shutdown_timeout: float = 2.0) -> AsyncIterator[Agent]:
    cwd = tmp_path / "tree"
    cwd.mkdir(exist_ok=True)
    full = _env(tmp_path, **(env or {}))
    if key is not None:
        full["DEEPSEEK_API_KEY"] = key
    saved = os.environ.pop("DEEPSEEK_API_KEY", None)  # the SDK merges the parent's environment
    try:
        async with acp.spawn_agent_process(client, sys.executable, "-m", "dsh.repl", "acp", *args, env=full,
                                           cwd=str(cwd), transport_kwargs={"shutdown_timeout": shutdown_timeout},
                                           ) as (conn, _process):
            yield Agent(conn, client, cwd)  # the SDK closes stdin, waits, then terminates: dsh's shutdown ladder
    finally:
        if saved is not None:
            os.environ["DEEPSEEK_API_KEY"] = saved


def _log_text(tmp_path: Path) -> str:
    path = tmp_path / "state" / "dsh" / "dsh.log"
    return path.read_text() if path.exists() else ""


async def test_an_answer_streams_as_message_chunks_and_ends_end_turn(tmp_path: Path) -> None:
    async with FaultServer(script=[Behaviour("slow_text", text="hello |from |dsh", cut="|", delay=0.05)]) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            response = await agent.prompt(session_id, "say hello")
    assert response.stop_reason == "end_turn"
    assert client.text() == "hello from dsh"
    assert len(client.of(schema.AgentMessageChunk)) >= 2  # streamed, not one block at the end
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {canaries.API_KEY}"
    assert request.json["messages"][-1] == {"role": "user", "content": "say hello"}


async def test_reasoning_streams_as_thought_chunks(tmp_path: Path) -> None:
    script = [Behaviour("reasoning", reasoning="9.8 = 9.80 > 9.11", text="9.8 is greater.")]
    async with FaultServer(script=script) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            response = await agent.prompt(session_id, "which is bigger?")
    assert response.stop_reason == "end_turn"
    assert client.text(schema.AgentThoughtChunk) == "9.8 = 9.80 > 9.11"
    assert client.text() == "9.8 is greater."


def _shell_call(command: str, call_id: str = "call_sh") -> Behaviour:
    return Behaviour("tool_call", id=call_id, name="run_shell", arguments={"command": command})


async def test_a_shell_command_asks_permission_allow_runs_it_and_reject_holds(tmp_path: Path) -> None:
    script = [_shell_call("echo allowed-ran > out.txt", "call_a"), Behaviour("text", text="ran it"),
              _shell_call("echo rejected-ran > no.txt", "call_b"), Behaviour("text", text="was refused")]
    async with FaultServer(script=script) as server:
        client = Client(answers=["yes", "no"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            first = await agent.prompt(session_id, "run it")
            second = await agent.prompt(session_id, "run another")
            tree = agent.cwd
    assert first.stop_reason == "end_turn" and second.stop_reason == "end_turn"
    assert (tree / "out.txt").read_text() == "allowed-ran\n"
    assert not (tree / "no.txt").exists()  # the rejection held
    (asked_a, options), (asked_b, _) = client.asked
    assert asked_b.tool_call_id == "2:call_b"
    assert [o.kind for o in options] == ["allow_once", "allow_always", "reject_once"]
    assert asked_a.tool_call_id == "1:call_a" and asked_a.kind == "execute"
    assert asked_a.title == "Run echo allowed-ran > out.txt" and asked_a.raw_input == {
        "command": "echo allowed-ran > out.txt"}
    starts = client.of(schema.ToolCallStart)
    assert [(s.tool_call_id, s.kind, s.status) for s in starts] == [("1:call_a", "execute", "pending"),
                                                                     ("2:call_b", "execute", "pending")]
    finals = [u for u in client.of(schema.ToolCallProgress) if u.status in ("completed", "failed")]
    assert [(u.tool_call_id, u.status) for u in finals] == [("1:call_a", "completed"), ("2:call_b", "failed")]
    assert "denied" in finals[1].content[-1].content.text
    # the model was told the command was denied
    assert "denied" in json.dumps(server.requests[3].json["messages"][-1])


async def test_allow_always_is_kept_for_the_session(tmp_path: Path) -> None:
    script = [_shell_call("echo one >> log.txt", "call_1"), Behaviour("text", text="one"),
              _shell_call("echo two >> log.txt", "call_2"), Behaviour("text", text="two")]
    async with FaultServer(script=script) as server:
        client = Client(answers=["always"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            await agent.prompt(session_id, "one")
            await agent.prompt(session_id, "two")
            tree = agent.cwd
    assert len(client.asked) == 1  # the second command ran without asking
    assert (tree / "log.txt").read_text() == "one\ntwo\n"


async def test_an_edit_is_approved_with_a_diff_and_reported_with_it(tmp_path: Path) -> None:
    script = [
        Behaviour("tool_call", id="call_r", name="read_file", arguments={"path": "notes.txt"}),
        Behaviour("tool_call", id="call_e", name="edit_file",
                  arguments={"path": "notes.txt", "old_string": "beta", "new_string": "BETA"}),
        Behaviour("text", text="edited"),
    ]
    async with FaultServer(script=script) as server:
        client = Client(answers=["yes"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            (agent.cwd / "notes.txt").write_text("alpha\nbeta\n")
            session_id = await agent.start()
            response = await agent.prompt(session_id, "edit it")
            tree = agent.cwd
    assert response.stop_reason == "end_turn"
    assert (tree / "notes.txt").read_text() == "alpha\nBETA\n"
    path = str(tree / "notes.txt")
    (asked, _), = client.asked
    assert asked.kind == "edit" and asked.title == "Edit notes.txt"
    (diff,) = asked.content
    assert (diff.path, diff.old_text, diff.new_text) == (path, "alpha\nbeta\n", "alpha\nBETA\n")
    starts = client.of(schema.ToolCallStart)
    assert [(s.kind, s.status) for s in starts] == [("read", "in_progress"), ("edit", "pending")]
    assert starts[0].locations[0].path == path
    done = [u for u in client.of(schema.ToolCallProgress) if u.tool_call_id == "1:call_e" and u.status]
    assert [u.status for u in done] == ["in_progress", "completed"]
    final = done[-1].content
    assert final[0].type == "diff" and (final[0].old_text, final[0].new_text) == ("alpha\nbeta\n", "alpha\nBETA\n")
    assert final[1].content.text == "edited notes.txt: 1 replacement (+1 -1)"


async def test_files_go_through_the_client_when_it_advertises_fs(tmp_path: Path) -> None:
    script = [
        Behaviour("tool_call", id="call_r", name="read_file", arguments={"path": "notes.txt"}),
        Behaviour("tool_call", id="call_e", name="edit_file",
                  arguments={"path": "notes.txt", "old_string": "unsaved", "new_string": "saved"}),
        Behaviour("text", text="done"),
    ]
    async with FaultServer(script=script) as server:
        client = Client(answers=["yes"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            path = str(agent.cwd / "notes.txt")
            (agent.cwd / "notes.txt").write_text("on disk\n")
            client.buffers = {path: "unsaved buffer text\n"}
            session_id = await agent.start(fs=True)
            response = await agent.prompt(session_id, "read and fix")
            tree = agent.cwd
    assert response.stop_reason == "end_turn"
    # the model saw the editor's buffer, not the disk
    tool_message = server.requests[1].json["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == "unsaved buffer text\n"
    assert client.writes == [(path, "saved buffer text\n")]
    assert (tree / "notes.txt").read_text() == "on disk\n"  # the editor writes its buffer, not dsh
    assert client.reads and set(client.reads) == {path}


async def test_a_read_the_editor_refuses_is_named_by_its_error_code(tmp_path: Path) -> None:
    script = [Behaviour("tool_call", id="call_r", name="read_file", arguments={"path": "notes.txt"}),
              Behaviour("text", text="could not read it")]
    async with FaultServer(script=script) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            (agent.cwd / "notes.txt").write_text("on disk\n")
            client.buffers = {}  # an editor that answers every read with an error (acpx --deny-all)
            session_id = await agent.start(fs=True)
            response = await agent.prompt(session_id, "read it")
            path = agent.cwd / "notes.txt"
    assert response.stop_reason == "end_turn"
    tool_message = server.requests[1].json["messages"][-1]
    assert tool_message["content"] == (
        f"Error: the editor could not read {path} (error code: -32002 (resource not found))")


async def test_a_refused_connection_fails_the_prompt_with_the_turn_end_line(tmp_path: Path) -> None:
    async with FaultServer() as server:
        url = server.url  # closed once the block ends: nothing listens there any more
    client = Client()
    async with _dsh_acp(tmp_path, client, "--base-url", url) as agent:
        session_id = await agent.start()
        with pytest.raises(acp.RequestError) as failed:
            await agent.prompt(session_id, "hello?")
    error = failed.value
    port = url.rsplit(":", 1)[1].split("/")[0]
    assert error.code == -32603
    message = str(error)
    assert message.startswith("[turn failed TRANSPORT] ")
    assert f"[Errno 111] Connect call failed ('127.0.0.1', {port})" in message
    assert error.data["code"] == "TRANSPORT"
    assert error.data["fix"] and f"127.0.0.1:{port}" in error.data["fix"]
    assert any("Connect call failed" in link for link in error.data["chain"])


async def test_a_401_names_auth_and_never_the_key(tmp_path: Path) -> None:
    upstream = Behaviour("http_401", message=f"Authentication Fails, key {canaries.UPSTREAM_KEY} is invalid")
    async with FaultServer(script=[upstream]) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url, env={"DSH_DEBUG": "1"}) as agent:
            session_id = await agent.start()
            with pytest.raises(acp.RequestError) as failed:
                await agent.prompt(session_id, "hi")
    error = failed.value
    assert str(error).startswith("[turn failed AUTH] ")
    assert error.data["code"] == "AUTH" and error.data["fix"]
    everything = json.dumps([str(error), error.data, client.frames])
    for secret in (canaries.API_KEY, canaries.UPSTREAM_KEY):
        assert secret not in everything
        assert secret not in _log_text(tmp_path)


async def test_cancel_ends_a_stalled_turn_as_cancelled_promptly(tmp_path: Path) -> None:
    async with FaultServer(script=[Behaviour("stall_mid_stream", text="Partial")]) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            answers: list[Any] = []
            latency: list[float] = []
            async with anyio.create_task_group() as tasks:
                async def prompt() -> None:
                    answers.append(await agent.prompt(session_id, "stall"))
                    latency.append(time.monotonic() - sent[0])

                sent: list[float] = []
                tasks.start_soon(prompt)
                await async_wait_until(lambda: client.text() == "Partial", PROMPTLY, "the partial text")
                sent.append(time.monotonic())
                await agent.conn.cancel(session_id=session_id)
                with anyio.fail_after(PROMPTLY):
                    await async_wait_until(lambda: answers, PROMPTLY, "the prompt's answer")
    assert answers[0].stop_reason == "cancelled"
    (tmp_path / "cancel-latency.txt").write_text(f"{latency[0] * 1000:.1f} ms\n")
    print(f"session/cancel -> stopReason cancelled: {latency[0] * 1000:.1f} ms")


async def test_load_replays_the_saved_session_and_an_unknown_id_is_not_found(tmp_path: Path) -> None:
    script = [Behaviour("reasoning", reasoning="think first", text="the answer"),
              Behaviour("tool_call", id="call_l", name="list_dir", arguments={"path": "."}),
              Behaviour("text", text="listed")]
    async with FaultServer(script=script) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            await agent.prompt(session_id, "first question")
            await agent.prompt(session_id, "list it")
        replayed = Client()
        async with _dsh_acp(tmp_path, replayed, "--base-url", server.url) as agent:
            await agent.conn.initialize(protocol_version=1)
            with anyio.fail_after(PROMPTLY):
                await agent.conn.load_session(cwd=str(agent.cwd), session_id=session_id, mcp_servers=[])
            with pytest.raises(acp.RequestError) as missing:
                await agent.conn.load_session(cwd=str(agent.cwd), session_id="20260101-nosuch", mcp_servers=[])
    kinds = [type(u).__name__ for u in replayed.updates]
    assert kinds == ["UserMessageChunk", "AgentThoughtChunk", "AgentMessageChunk", "UserMessageChunk",
                     "AgentThoughtChunk", "ToolCallStart", "ToolCallProgress", "AgentMessageChunk"]
    assert replayed.updates[0].content.text == "first question"
    assert replayed.updates[2].content.text == "the answer"
    assert replayed.updates[6].status == "completed"
    assert missing.value.code == -32002
    assert "\n" not in str(missing.value) and "20260101-nosuch" in str(missing.value)


async def test_load_takes_a_session_id_never_a_path_or_last(tmp_path: Path) -> None:
    """The CLI's --resume also takes a path to a log, or "last"; a client gets only the sessions it was answered: a
    path would have dsh open (and append to) any log the client names."""
    async with FaultServer(script=[Behaviour("text", text="saved")]) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            await agent.prompt(session_id, "keep this")
        (log,) = (tmp_path / "state").rglob(f"{session_id}.jsonl")
        before = log.read_bytes()
        async with _dsh_acp(tmp_path, Client(), "--base-url", server.url) as agent:
            await agent.conn.initialize(protocol_version=1)
            refused = []
            for named in (str(log), f"{session_id}.jsonl", "last", f"../sessions/{session_id}"):
                with pytest.raises(acp.RequestError) as failed:
                    await agent.conn.load_session(cwd=str(agent.cwd), session_id=named, mcp_servers=[])
                refused.append((failed.value.code, str(failed.value), failed.value.data))
    assert refused == [(-32002, "dsh: failed to start: session/load takes a dsh session id, not a path",
                        {"sessionId": named}) for named in (str(log), f"{session_id}.jsonl", "last",
                                                            f"../sessions/{session_id}")]
    assert log.read_bytes() == before


async def test_a_client_mcp_server_is_connected_and_its_tool_asks_the_client(tmp_path: Path) -> None:
    command = stdio_command("ok")
    # The server's environment is dsh's allowlist plus the entry's own variables (agent_loop/process.py).
    server_entry = schema.McpServerStdio(name="fx", command=command[0], args=command[1:],
                                         env=[schema.EnvVariable(name="PYTHONPATH", value=REPO)])
    # ``add`` is not read-only: it asks, and the client answers
    script = [Behaviour("tool_call", id="call_m", name="mcp__fx__add", arguments={"a": 2, "b": 40}),
              Behaviour("text", text="added")]
    async with FaultServer(script=script) as server:
        client = Client(answers=["yes"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start(mcp_servers=[server_entry])
            response = await agent.prompt(session_id, "add them")
    assert response.stop_reason == "end_turn"
    tools = [tool["function"]["name"] for tool in server.requests[0].json["tools"]]
    assert "mcp__fx__add" in tools, client.text(schema.AgentThoughtChunk)
    (asked, _), = client.asked
    assert asked.tool_call_id == "1:call_m" and asked.title == "fx: add" and asked.raw_input == {"a": 2, "b": 40}
    final = [u for u in client.of(schema.ToolCallProgress) if u.status == "completed"]
    assert final[-1].content[-1].content.text == "42"


async def test_a_missing_key_fails_session_new_with_the_repl_line(tmp_path: Path) -> None:
    client = Client()
    async with _dsh_acp(tmp_path, client, key=None) as agent:
        await agent.conn.initialize(protocol_version=1)
        with pytest.raises(acp.RequestError) as failed:
            await agent.conn.new_session(cwd=str(agent.cwd), mcp_servers=[])
    config = tmp_path / "config" / "dsh" / "config.toml"
    assert str(failed.value) == (f"dsh: failed to start: no DeepSeek API key: set DEEPSEEK_API_KEY (or api_key in "
                                 f"{config}), or try `dsh --demo`")


async def test_the_demo_answers_without_a_key(tmp_path: Path) -> None:
    client = Client()
    async with _dsh_acp(tmp_path, client, "--demo", key=None) as agent:
        session_id = await agent.start()
        response = await agent.prompt(session_id, "hello")
    assert response.stop_reason == "end_turn" and client.text()


async def test_cancel_while_a_client_mcp_server_is_still_starting_ends_the_prompt_cancelled(tmp_path: Path) -> None:
    # The turn waits for the client's servers (startup_timeout 30 s) before it starts: a cancel then has no turn
    # to end, and still ends the prompt (the model is never asked). Closing the session abandons the hung
    # server's handshake: dsh exits within the client's shutdown ladder, the server reaped before it.
    record = tmp_path / "hang.jsonl"
    command = stdio_command("hang-initialize", "--record", str(record))
    entry = schema.McpServerStdio(name="hang", command=command[0], args=command[1:],
                                  env=[schema.EnvVariable(name="PYTHONPATH", value=REPO)])
    async with FaultServer() as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start(mcp_servers=[entry])
            await async_wait_until(lambda: received(record, "initialize"), PROMPTLY, "the server's initialize")
            answers: list[Any] = []
            async with anyio.create_task_group() as tasks:
                async def prompt() -> None:
                    answers.append(await agent.prompt(session_id, "hi"))

                tasks.start_soon(prompt)
                with anyio.fail_after(PROMPTLY):
                    while not answers:  # a cancel before the prompt arrived is a no-op: send until answered
                        await agent.conn.cancel(session_id=session_id)
                        await anyio.sleep(0.05)
    assert answers[0].stop_reason == "cancelled"
    assert server.requests == []
    [pid] = {e["pid"] for e in read_record(record) if e["event"] == "started"}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_allow_always_for_edits_still_reports_each_diff(tmp_path: Path) -> None:
    script = [
        Behaviour("tool_call", id="call_w1", name="write_file", arguments={"path": "a.txt", "content": "one\n"}),
        Behaviour("tool_call", id="call_w2", name="write_file", arguments={"path": "b.txt", "content": "two\n"}),
        Behaviour("text", text="wrote both"),
    ]
    async with FaultServer(script=script) as server:
        client = Client(answers=["always"])
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            response = await agent.prompt(session_id, "write two files")
            tree = agent.cwd
    assert response.stop_reason == "end_turn"
    assert len(client.asked) == 1  # "always" covered the second edit
    assert (tree / "a.txt").read_text() == "one\n" and (tree / "b.txt").read_text() == "two\n"
    diffs = [(u.tool_call_id, u.content[0].path, u.content[0].old_text, u.content[0].new_text)
             for u in client.of(schema.ToolCallProgress) if u.status == "completed"]
    assert diffs == [("1:call_w1", str(tree / "a.txt"), None, "one\n"),
                     ("1:call_w2", str(tree / "b.txt"), None, "two\n")]
