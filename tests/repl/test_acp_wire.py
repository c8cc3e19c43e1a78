"""``dsh acp`` speaks ACP's JSON-RPC itself (repl/acp_wire.py): the real child on pipes, raw frames in, parsed
frames out. What the schema requires and a client leaves out is ``-32602``; a method dsh does not serve is
``-32601``; an unknown notification is ignored; a prompt's blocks reach the model as the text docs/editors.md
shows; a permission answer that is no pick denies; and the ``acp`` SDK is never imported on the way."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.images import IMAGE_CAP_BYTES
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.acp_session import prompt_text
from dsh.repl.acp_wire import WireError
from tests import canaries
from tests.agent_loop.test_images import png
from tests.waiting import PROMPTLY, wait_until

pytestmark = pytest.mark.usefixtures("no_leftover_processes")

REPO = str(Path(__file__).resolve().parents[2])


class Agent:
    """``python [-X importtime] -m dsh.repl acp ARGS`` on pipes: frames in, parsed frames out, in order."""

    def __init__(self, home: Path, *args: str, python_flags: tuple[str, ...] = ()) -> None:
        self.tree = home / "tree"
        self.tree.mkdir(exist_ok=True)
        env = {"HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
               "PYTHONPATH": REPO, "PATH": os.environ.get("PATH", ""), "DEEPSEEK_API_KEY": canaries.API_KEY}
        self.child = subprocess.Popen([sys.executable, *python_flags, "-m", "dsh.repl", "acp", *args], cwd=home,
                                      env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.frames: list[Any] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            self.frames.append(json.loads(line))

    def write(self, raw: bytes) -> None:
        """Bytes as they are: a hostile client's frames (tests/repl/test_acp_hostile_client.py)."""
        assert self.child.stdin is not None
        self.child.stdin.write(raw)
        self.child.stdin.flush()

    def send(self, frame: dict[str, Any]) -> None:
        self.write(json.dumps(frame).encode() + b"\n")

    def request(self, request_id: int, method: str, params: Any) -> Any:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return self.answer_to(request_id)

    def answer_to(self, request_id: int) -> Any:
        return wait_until(lambda: next((f for f in self.frames if f.get("id") == request_id and "method" not in f),
                                       None), PROMPTLY, f"the answer to request {request_id}")

    def asked(self, method: str) -> Any:
        return wait_until(lambda: next((f for f in self.frames if f.get("method") == method and "id" in f), None),
                          PROMPTLY, f"a {method} request")

    def new_session(self) -> str:
        self.request(0, "initialize", {"protocolVersion": 1})
        return str(self.request(1, "session/new", {"cwd": str(self.tree), "mcpServers": []})["result"]["sessionId"])

    def close(self) -> tuple[int, str]:
        assert self.child.stdin is not None and self.child.stderr is not None
        self.child.stdin.close()
        code = self.child.wait(PROMPTLY)
        self._reader.join(PROMPTLY)
        return code, self.child.stderr.read().decode()


@contextmanager
def _agent(home: Path, *args: str, python_flags: tuple[str, ...] = ()) -> Iterator[Agent]:
    agent = Agent(home, *args, python_flags=python_flags)
    try:
        yield agent
    finally:
        code, stderr = agent.close()
        assert code == 0, stderr


@contextmanager
def _server(script: list[Behaviour]) -> Iterator[FaultServer]:
    server = FaultServer(script=script).start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def test_what_the_schema_requires_is_checked_and_unknown_methods_are_not_found(tmp_path: Path) -> None:
    with _agent(tmp_path, "--demo") as agent:
        agent.send({"jsonrpc": "2.0", "method": "session/unknown_notification", "params": {}})  # ignored
        answers = {
            "no params": agent.request(0, "initialize", None),
            "a string version": agent.request(1, "initialize", {"protocolVersion": "1"}),
            "initialized": agent.request(2, "initialize", {"protocolVersion": 1})["result"]["protocolVersion"],
            "no mcpServers": agent.request(3, "session/new", {"cwd": str(agent.tree)}),
            "a server without a name": agent.request(4, "session/new", {"cwd": str(agent.tree), "mcpServers": [5]}),
            "an sse server": agent.request(5, "session/new", {"cwd": str(agent.tree), "mcpServers": [
                {"type": "sse", "name": "s", "url": "http://127.0.0.1:9", "headers": []}]}),
            "session/list": agent.request(6, "session/list", {}),
            "an extension": agent.request(7, "_dsh/anything", {}),
            "an unknown session": agent.request(8, "session/prompt", {"sessionId": "nope", "prompt": []}),
        }
    errors = {what: answer["error"] if isinstance(answer, dict) else answer for what, answer in answers.items()}
    assert errors == {
        "no params": {"code": -32602, "message": "Invalid params", "data": {"params": "an object is required"}},
        "a string version": {"code": -32602, "message": "Invalid params",
                             "data": {"protocolVersion": "an integer is required"}},
        "initialized": 1,
        "no mcpServers": {"code": -32602, "message": "Invalid params", "data": {"mcpServers": "a list is required"}},
        "a server without a name": {"code": -32602, "message": "Invalid params",
                                    "data": {"mcpServers": "each server is an object with a name"}},
        "an sse server": {"code": -32602, "message": "Invalid params",
                          "data": {"mcpServers": "s: dsh connects stdio and http MCP servers, not sse"}},
        "session/list": {"code": -32601, "message": "Method not found", "data": {"method": "session/list"}},
        "an extension": {"code": -32601, "message": "Method not found", "data": {"method": "_dsh/anything"}},
        "an unknown session": {"code": -32002, "message": "no such session on this connection",
                               "data": {"sessionId": "nope"}},
    }


def test_an_image_reaches_a_model_that_sees_and_a_model_that_cannot_refuses_it(tmp_path: Path) -> None:
    shot = png(64, 32)
    prompt = [{"type": "text", "text": "what is this"},
              {"type": "image", "data": base64.b64encode(shot).decode(), "mimeType": "image/png"}]
    flags = ("--dialect", "deepseek")
    with _server([Behaviour("text", text="a square")]) as server, \
            _agent(tmp_path, "--base-url", server.url, *flags) as agent:
        session_id = agent.new_session()
        answer = agent.request(2, "session/prompt", {"sessionId": session_id, "prompt": prompt})
    assert answer["result"] == {"stopReason": "end_turn"}
    (request,) = server.requests
    assert request.json["messages"][-1]["content"] == [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(shot).decode()}}]
    with _server([]) as server, _agent(tmp_path, "--base-url", server.url, "--model", "deepseek-v4-pro",
                                       *flags) as agent:
        session_id = agent.new_session()
        answer = agent.request(2, "session/prompt", {"sessionId": session_id, "prompt": prompt})
        chunks = [f["params"]["update"] for f in agent.frames if f.get("method") == "session/update"]
    assert answer["result"] == {"stopReason": "refusal"}
    assert server.requests == []
    assert chunks == [{"sessionUpdate": "agent_thought_chunk", "content": {  # the REPL's line, the editor's to show
        "type": "text", "text": "deepseek-v4-pro does not accept images; use --model deepseek-flash\n"}}]


def test_prompt_blocks_reach_the_model_and_an_image_that_is_none_is_refused(tmp_path: Path) -> None:
    blocks = [{"type": "text", "text": "look at"}, {"type": "resource_link", "name": "a.py", "uri": "file:///t/a.py"},
              {"type": "resource", "resource": {"uri": "file:///t/b.py", "text": "print(1)"}},
              {"type": "resource", "resource": {"uri": "file:///t/c.png", "blob": "AAAA", "mimeType": "image/png"}}]
    with _server([Behaviour("text", text="seen")]) as server, _agent(tmp_path, "--base-url", server.url) as agent:
        session_id = agent.new_session()
        image = agent.request(2, "session/prompt", {"sessionId": session_id, "prompt": [
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}]})
        answer = agent.request(3, "session/prompt", {"sessionId": session_id, "prompt": blocks})
        chunks = [f["params"]["update"] for f in agent.frames if f.get("method") == "session/update"]
    assert image["error"] == {"code": -32602, "message": "Invalid params",
                              "data": {"prompt": "image 1: not an image: its bytes are not PNG, JPEG, GIF or WebP"}}
    assert answer["result"] == {"stopReason": "end_turn"}
    assert chunks == [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "seen"}}]
    (request,) = server.requests
    assert request.json["messages"][-1] == {"role": "user", "content": (
        'look at\n[a.py](file:///t/a.py)\n<context uri="file:///t/b.py">\nprint(1)\n</context>\n'
        "[binary resource file:///t/c.png left out: dsh reads text only]")}


def test_a_permission_answer_that_is_no_pick_denies(tmp_path: Path) -> None:
    script = [Behaviour("tool_call", id="call_x", name="run_shell", arguments={"command": "echo ran > out.txt"}),
              Behaviour("text", text="was refused")]
    with _server(script) as server, _agent(tmp_path, "--base-url", server.url) as agent:
        session_id = agent.new_session()
        agent.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                    "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "run it"}]}})
        asked = agent.asked("session/request_permission")
        agent.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": {"optionId": "yes"}}})  # no outcome
        answer = agent.answer_to(2)
        tree = agent.tree
    assert asked["params"]["toolCall"] == {"toolCallId": "1:call_x", "title": "Run echo ran > out.txt",
                                           "kind": "execute", "status": "pending",
                                           "rawInput": {"command": "echo ran > out.txt"}}
    assert [option["optionId"] for option in asked["params"]["options"]] == ["yes", "always", "no"]
    assert answer["result"] == {"stopReason": "end_turn"}
    assert not (tree / "out.txt").exists()


def test_a_whole_turn_imports_neither_the_acp_sdk_nor_pydantic(tmp_path: Path) -> None:
    # -X importtime names every module the process imports, on stderr: the handshake, a session and a turn.
    with _server([Behaviour("text", text="hello")]) as server:
        agent = Agent(tmp_path, "--base-url", server.url, python_flags=("-X", "importtime"))
        try:
            session_id = agent.new_session()
            answer = agent.request(2, "session/prompt", {"sessionId": session_id,
                                                         "prompt": [{"type": "text", "text": "hi"}]})
        finally:
            code, stderr = agent.close()
    imported = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert (code, answer["result"]) == (0, {"stopReason": "end_turn"})
    assert "dsh.repl.acp_wire" in imported
    assert sorted(name for name in imported if name.split(".")[0] in ("acp", "pydantic")) == []


def test_a_stream_of_tiny_deltas_arrives_whole_and_in_order_in_fewer_frames(tmp_path: Path) -> None:
    # Deltas that come while the last ones are still queued join them (repl/acp_session.py, ``_open``).
    pieces = [f"{n}," for n in range(3000)]
    with _server([Behaviour("text", text="|".join(pieces), cut="|", delay=0)]) as server, \
            _agent(tmp_path, "--base-url", server.url) as agent:
        session_id = agent.new_session()
        answer = agent.request(2, "session/prompt", {"sessionId": session_id,
                                                     "prompt": [{"type": "text", "text": "count"}]})
        updates = [f["params"]["update"] for f in agent.frames if f.get("method") == "session/update"]
    assert answer["result"] == {"stopReason": "end_turn"}
    assert {update["sessionUpdate"] for update in updates} == {"agent_message_chunk"}
    assert "".join(update["content"]["text"] for update in updates) == "".join(pieces)
    assert len(updates) < len(pieces)


def test_a_session_with_subagents_closes_cleanly_when_the_client_goes(tmp_path: Path) -> None:
    # The demo's session has subagents (their jobs' task group is open): closing it after a turn is exit 0, quiet.
    agent = Agent(tmp_path, "--demo")
    session = agent.new_session()
    answer = agent.request(2, "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]})
    assert answer["result"] == {"stopReason": "end_turn"}
    unknown = agent.request(3, "session/load", {"sessionId": "20990101-000000-aaaaaa", "cwd": str(agent.tree),
                                                "mcpServers": []})
    assert (agent.close(), unknown["error"]["code"]) == ((0, ""), -32002)


def test_an_image_block_over_the_cap_is_refused_before_it_is_decoded() -> None:
    data = "A" * (IMAGE_CAP_BYTES // 3 * 4 + 400)  # base64 of a little over 10 MiB
    with pytest.raises(WireError) as refused:
        prompt_text([{"type": "text", "text": "look"}, {"type": "image", "data": data, "mimeType": "image/png"}])
    assert (refused.value.code, refused.value.data) == (-32602, {
        "prompt": "image 1: refused: 10.0 MiB is over the 10 MiB cap for an image"})


@pytest.mark.anyio
async def test_a_handlers_own_failure_reaches_the_client_as_internal_error_with_the_secrets_masked() -> None:
    """No method of dsh's fails this way today (a fuzz of every method's params found none): a bug that does must not
    hand the client the key or a URL's password its exception text carries."""
    import asyncio
    import socket

    import anyio

    from dsh.llm import Redactor
    from dsh.repl.acp_wire import AgentConnection, ClientFrames

    reader = asyncio.StreamReader()
    reader.feed_data(b'{"jsonrpc":"2.0","id":7,"method":"session/new","params":{}}\n')
    reader.feed_eof()
    ours, theirs = socket.socketpair()
    _, writer = await asyncio.open_connection(sock=ours)

    async def failing(method: str, params: Any, notified: bool) -> Any:
        raise RuntimeError(f"key {canaries.API_KEY} for https://{canaries.URL_USER}:{canaries.URL_PASSWORD}@h.test/")

    async with anyio.create_task_group() as tasks:
        connection = AgentConnection(ClientFrames(reader, writer), tasks,
                                     Redactor((canaries.API_KEY, canaries.URL_PASSWORD)))
        await connection.listen(failing)
    writer.close()
    with theirs:
        answer = json.loads(theirs.makefile("rb").readline())
    assert answer == {"jsonrpc": "2.0", "id": 7, "error": {
        "code": -32603, "message": "Internal error",
        "data": {"details": "key *** for https://***@h.test/"}}}
