"""``dsh serve --stdio`` as a real child process, talking to the real fault server over loopback."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.jsonrpc import JsonRpcConnection, ProtocolError
from dsh.agent_loop.process import ManagedProcess
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.serve import main as serve_main
from tests import canaries
from tests.waiting import async_wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REPO = str(Path(__file__).resolve().parents[2])
SERVE = [sys.executable, "-m", "dsh.repl.serve", "--stdio"]


class _Child:
    def __init__(self, process: ManagedProcess, conn: JsonRpcConnection, events: list[dict[str, Any]]) -> None:
        self.process = process
        self.conn = conn
        self.events = events

    async def initialize(self, url: str, **extra: Any) -> Any:
        return await self.conn.request("initialize", {"model": "probe-model", "base_url": url, "cwd": REPO, **extra})


@asynccontextmanager
async def _serve(argv: list[str] = SERVE, env: dict[str, str] | None = None) -> AsyncIterator[_Child]:
    events: list[dict[str, Any]] = []

    def on_note(method: str, params: Any) -> None:
        events.append({"method": method, **(params or {})})

    process = ManagedProcess(argv, env={"PYTHONPATH": REPO, **(env or {})}, cwd=REPO)
    await process.start()
    try:
        assert process.stdout is not None and process.stdin is not None
        async with JsonRpcConnection(process.stdout, process.stdin, on_notification=on_note) as conn:
            yield _Child(process, conn, events)
    finally:
        await process.terminate(eof_grace=2, term_grace=1)


def _types(child: _Child) -> list[str]:
    return [note["event"]["type"] for note in child.events if note["method"] == "session/event"]


async def test_a_turn_streams_every_event_before_its_response(tmp_path: Path) -> None:
    async with FaultServer(script=[Behaviour("text", text="hello from the child")]) as server:
        async with _serve(env={"DEEPSEEK_API_KEY": canaries.API_KEY}) as child:
            info = await child.initialize(server.url, max_tokens=77)
            assert info["protocolVersion"] == 1 and info["serverInfo"]["name"] == "dsh"
            with anyio.fail_after(30):
                response = await child.conn.request("session/prompt", {"prompt": "say hello"})
            # the response comes after the last notification of the turn
            assert response == {"reason": {"kind": "completed"}}
            types = _types(child)
            assert types[0] == "turn/start" and types[1] == "step/start"
            assert "text/delta" in types and types[-1] == "turn/end"
            turn_end = child.events[-1]["event"]["data"]
            assert turn_end == {"turn": 1, "reason": {"kind": "completed"}}
            text = "".join(n["event"]["data"]["text"] for n in child.events if n["event"]["type"] == "text/delta")
            assert text == "hello from the child"
            await child.conn.request("shutdown")
            assert await child.process.wait_exit(5) is not None
        assert child.process.exit_status is not None and child.process.exit_status.exit_code == 0
        (request,) = server.requests
        # the key came from the environment the parent passed; model and max_tokens from initialize
        assert request.headers["authorization"] == f"Bearer {canaries.API_KEY}"
        assert request.json["model"] == "probe-model" and request.json["max_tokens"] == 77
        assert request.json["messages"][-1] == {"role": "user", "content": "say hello"}


async def test_a_failing_upstream_ends_the_turn_error_and_the_key_stays_off_stderr() -> None:
    upstream = Behaviour("http_401", message=f"Authentication Fails, key {canaries.UPSTREAM_KEY} is invalid")
    async with (
        FaultServer(script=[upstream]) as server,
        _serve(env={"DEEPSEEK_API_KEY": canaries.API_KEY, "DSH_DEBUG": "1"}) as child,
    ):
        await child.initialize(server.url)
        with anyio.fail_after(30):
            response = await child.conn.request("session/prompt", {"prompt": "hi"})
        reason = response["reason"]
        assert reason["kind"] == "error" and reason["code"] == "AUTH" and reason["status"] == 401
        assert canaries.UPSTREAM_KEY not in json.dumps(response)
        await child.conn.request("shutdown")
        await child.process.wait_exit(5)
        stderr = child.process.stderr_tail()
    assert canaries.API_KEY not in stderr and canaries.UPSTREAM_KEY not in stderr


async def test_cancel_ends_the_turn_aborted_and_keeps_the_prefix() -> None:
    slow = Behaviour("slow_text", text="one two three four five six seven eight nine ten", delay=0.15)
    async with FaultServer(script=[slow]) as server, _serve() as child:
        await child.initialize(server.url)
        async with anyio.create_task_group() as tg:
            answers: list[Any] = []

            async def prompt() -> None:
                answers.append(await child.conn.request("session/prompt", {"prompt": "count"}))

            tg.start_soon(prompt)
            await async_wait_until(lambda: "text/delta" in _types(child), 30, "the first text/delta")
            # a second prompt while one runs is refused
            with pytest.raises(ProtocolError) as busy:
                await child.conn.request("session/prompt", {"prompt": "again"})
            assert busy.value.rpc_code == -32002
            await child.conn.request("session/cancel")
        assert answers == [{"reason": {"kind": "aborted", "reason": "cancelled"}}]
        message = next(n["event"]["data"] for n in child.events if n["event"]["type"] == "assistant/message")
        assert message["interrupted"] is True and message["content"].startswith("one")


async def test_protocol_errors_are_answered_and_the_server_carries_on() -> None:
    async with FaultServer() as server, _serve() as child:
        with pytest.raises(ProtocolError) as early:
            await child.conn.request("session/prompt", {"prompt": "too early"})
        assert early.value.rpc_code == -32002
        with pytest.raises(ProtocolError) as unknown:
            await child.conn.request("session/teleport")
        assert unknown.value.rpc_code == -32601
        with pytest.raises(ProtocolError) as bad_cwd:
            await child.conn.request("initialize", {"cwd": "/nonexistent/dir", "base_url": server.url})
        assert bad_cwd.value.rpc_code == -32602
        with pytest.raises(ProtocolError) as bad_permission:
            await child.initialize(server.url, permission="sometimes")
        assert bad_permission.value.rpc_code == -32602
        # garbage on its stdin gets a parse error (id null) on stdout, then normal service
        assert child.process.stdin is not None
        child.process.stdin.write(b"this is not json\n")
        await child.process.stdin.drain()
        await child.initialize(server.url)
        with pytest.raises(ProtocolError) as again:
            await child.initialize(server.url)
        assert again.value.rpc_code == -32002
        with pytest.raises(ProtocolError) as bad_prompt:
            await child.conn.request("session/prompt", {"prompt": 5})
        assert bad_prompt.value.rpc_code == -32602
        await child.conn.request("shutdown")
        assert await child.process.wait_exit(5) is not None


async def test_stdout_carries_nothing_but_json_rpc_frames() -> None:
    script = ["reasoning", Behaviour("tool_call", name="list_dir", arguments='{"path": "."}'), "text"]
    async with FaultServer(script=script) as server:
        process = ManagedProcess(SERVE, env={"PYTHONPATH": REPO}, cwd=REPO)
        async with process:
            assert process.stdin is not None and process.stdout is not None
            frames = [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"base_url": server.url, "cwd": REPO}},
                {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"prompt": "weather?"}},
            ]
            frames.append({**frames[1], "id": 4})
            for frame in frames[:1]:
                process.stdin.write(json.dumps(frame).encode() + b"\n")
            lines: list[dict[str, Any]] = []
            with anyio.fail_after(30):
                lines.append(json.loads(await process.stdout.readline()))
                process.stdin.write(json.dumps(frames[1]).encode() + b"\n")
                await process.stdin.drain()
                while lines[-1].get("id") != 2:
                    lines.append(json.loads(await process.stdout.readline()))  # every line parses
                process.stdin.write(json.dumps(frames[2]).encode() + b"\n")  # a second turn: tool call + text
                await process.stdin.drain()
                while lines[-1].get("id") != 4:
                    lines.append(json.loads(await process.stdout.readline()))
                process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}).encode() + b"\n")
                await process.stdin.drain()
                while raw := await process.stdout.readline():
                    lines.append(json.loads(raw))
            assert await process.wait_exit(5) is not None
    assert all(line.get("jsonrpc") == "2.0" for line in lines)
    by_id = {line["id"]: line for line in lines if "id" in line}
    assert by_id[2]["result"] == by_id[4]["result"] == {"reason": {"kind": "completed"}}
    assert by_id[3]["result"] == {}
    types = [line["params"]["event"]["type"] for line in lines if line.get("method") == "session/event"]
    assert [t for t in types if t.startswith("tool/")] == ["tool/call", "tool/result"]
    # the shutdown reply is the last frame, after the prompt's response
    assert lines[-1]["id"] == 3


async def test_end_of_input_disposes_a_running_turn_and_exits_zero() -> None:
    async with FaultServer(script=["stall_after_headers"]) as server, _serve() as child:
        await child.initialize(server.url)
        # close stdin while a prompt stalls
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                try:
                    await child.conn.request("session/prompt", {"prompt": "stall"})
                except Exception:
                    pass

            tg.start_soon(prompt)
            await async_wait_until(lambda: server.requests, 30, "the turn's request")
            assert child.process.stdin is not None
            child.process.stdin.close()
            status = await child.process.wait_exit(10)
            tg.cancel_scope.cancel()
        assert status is not None and status.exit_code == 0


async def test_shutdown_during_a_turn_answers_the_turn_then_exits() -> None:
    async with FaultServer(script=["stall_after_headers"]) as server, _serve() as child:
        await child.initialize(server.url)
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                answers.append(await child.conn.request("session/prompt", {"prompt": "stall"}))

            tg.start_soon(prompt)
            await async_wait_until(lambda: server.requests, 30, "the turn's request")
            assert await child.conn.request("shutdown") == {}
        assert answers == [{"reason": {"kind": "aborted", "reason": "cancelled"}}]
        status = await child.process.wait_exit(10)
        assert status is not None and status.exit_code == 0


async def test_the_dsh_cli_dispatches_serve() -> None:
    async with FaultServer() as server, _serve([sys.executable, "-m", "dsh.repl", "serve", "--stdio"]) as child:
        info = await child.initialize(server.url)
        assert info["serverInfo"]["name"] == "dsh"
        await child.conn.request("shutdown")
        assert await child.process.wait_exit(5) is not None


def test_serve_without_stdio_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_main([]) == 2
    assert serve_main(["--tcp"]) == 2
    assert capsys.readouterr().err == "usage: dsh serve --stdio\n" * 2


def test_serve_module_is_importable_without_side_effects() -> None:
    # the child runtime must not touch stdout on import (the parent reads frames from it)
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", "import dsh.repl.serve"],
        capture_output=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout == b""


@pytest.mark.parametrize(("permission", "ran"), [("allow", True), ("reject", False)])
async def test_permission_decides_the_childs_shell_commands(permission: str, ran: bool) -> None:
    shell = Behaviour("tool_call", name="run_shell", arguments='{"command": "echo child-shell-ran"}')
    async with FaultServer(script=[shell, "text"]) as server, _serve() as child:
        await child.initialize(server.url, permission=permission)
        with anyio.fail_after(30):
            response = await child.conn.request("session/prompt", {"prompt": "run it"})
        assert response == {"reason": {"kind": "completed"}}
        (result,) = [n["event"]["data"] for n in child.events if n["event"]["type"] == "tool/result"]
        assert ("child-shell-ran" in result["output"]) is ran
        assert result["is_error"] is not ran
