"""The MCP fixture servers (fixtures/mcp_servers.py), driven by the raw ``mcp`` SDK client.

They are known good here before dsh's own client is tested against them: each mode does what
/work/wt/notes/mcpfixtures.md (and the module's docstring) says, over stdio and streamable HTTP.
The leaked secret below is not a suite canary: the record files these tests write sit under pytest's
temp directory, which the suite-end canary scan reads.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from fixtures._mcp_wire import encode_message
from fixtures.mcp_servers import (
    BIG_TEXT_BYTES,
    EXIT_AT_START_CODE,
    EXIT_AT_START_REASON,
    HOSTILE_NAMES,
    HOSTILE_TEXT,
    OK_TOOLS,
    HttpServer,
    read_record,
    received,
)
from tests.waiting import PROMPTLY, async_wait_until, wait_until

if TYPE_CHECKING:
    from tests.agent_loop.mcp.conftest import StdioServers

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

HttpServers = Callable[..., HttpServer]  # the http_server fixture (conftest.py)
SECRET = "fixtureOnlySecret5521"  # deliberately not a canary (see the module docstring)


def _text(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def test_ok_lists_its_tools_and_answers_each(tmp_path: Path, stdio_server: StdioServers) -> None:
    async with stdio_server.session("ok", "--record", str(tmp_path / "record")) as session:
        tools = (await session.list_tools()).tools
        assert [tool.name for tool in tools] == [*OK_TOOLS]
        echo = tools[0]
        assert echo.annotations is not None and echo.annotations.read_only_hint is True
        assert _text(await session.call_tool("echo", {"text": "hello"})) == ["hello"]
        assert _text(await session.call_tool("add", {"a": 2, "b": 40})) == ["42"]
        structured = await session.call_tool("structured", {})
        assert structured.structured_content == {"temperature": 21.5, "unit": "C"}
        mixed = await session.call_tool("image_and_resource", {})
        assert [block.type for block in mixed.content] == ["image", "resource", "resource_link"]
        fails = await session.call_tool("fails", {})
        assert (fails.is_error, _text(fails)) == (True, ["the tool failed: disk full"])
        assert len(_text(await session.call_tool("big", {}))[0]) == BIG_TEXT_BYTES
        with pytest.raises(MCPError, match=r"^Unknown tool: nope$"):
            await session.call_tool("nope", {})
    called = [m["params"]["name"] for m in received(tmp_path / "record", "tools/call")]
    assert called == ["echo", "add", "structured", "image_and_resource", "fails", "big", "nope"]


async def test_slow_waits_until_cancelled_and_records_the_cancellation(
    tmp_path: Path, stdio_server: StdioServers,
) -> None:
    record = tmp_path / "record"
    async with stdio_server.session("ok", "--record", str(record)) as session:
        with anyio.CancelScope() as scope:

            async def cancel_once_started() -> None:
                await async_wait_until(
                    lambda: any(e["event"] == "tool-started" for e in read_record(record)), PROMPTLY, "slow started"
                )
                scope.cancel()

            async with anyio.create_task_group() as group:
                group.start_soon(cancel_once_started)
                await session.call_tool("slow", {})
        assert scope.cancelled_caught
        call_id = received(record, "tools/call")[0]["id"]
        await async_wait_until(
            lambda: any(e["event"] == "cancelled" for e in read_record(record)), PROMPTLY, "the handler cancelled"
        )
    [cancelled] = received(record, "notifications/cancelled")
    assert cancelled["params"]["requestId"] == call_id
    assert [e["request_id"] for e in read_record(record) if e["event"] == "cancelled"] == [call_id]


async def test_tools200_lists_two_hundred_tools(stdio_server: StdioServers) -> None:
    async with stdio_server.session("tools200") as session:
        names = [tool.name for tool in (await session.list_tools()).tools]
    assert names == [f"tool_{i:03d}" for i in range(200)]


async def test_list_changed_adds_a_tool_after_the_first_call_and_says_so(stdio_server: StdioServers) -> None:
    notifications: list[Any] = []

    async def handler(message: Any) -> None:
        notifications.append(message)

    async with stdio_server.session("list-changed", handler=handler) as session:
        assert session.server_capabilities is not None
        assert session.server_capabilities.tools is not None and session.server_capabilities.tools.list_changed
        assert "added_later" not in [tool.name for tool in (await session.list_tools()).tools]
        await session.call_tool("echo", {"text": "x"})
        await async_wait_until(
            lambda: any(isinstance(m, types.ToolListChangedNotification) for m in notifications),
            PROMPTLY,
            "list_changed",
        )
        assert [tool.name for tool in (await session.list_tools()).tools] == [*OK_TOOLS, "added_later"]


async def test_hostile_text_reaches_the_client_unchanged(stdio_server: StdioServers) -> None:
    async with stdio_server.session("hostile-text") as session:
        assert session.server_info is not None and session.server_info.name == "fixture\x1b[2J\u202e"
        assert session.instructions == HOSTILE_TEXT
        tools = (await session.list_tools()).tools
        assert [tool.name for tool in tools] == [*HOSTILE_NAMES, "hostile_echo", "surrogate_echo"]
        assert tools[0].description == f"{HOSTILE_TEXT} (0)"
        assert _text(await session.call_tool("hostile_echo", {}))[1] == HOSTILE_TEXT


@pytest.mark.parametrize(("mode", "tool"), [("hostile-text", "surrogate_echo"), ("lone-surrogate", None)])
async def test_a_lone_surrogate_is_a_message_the_sdk_cannot_parse(
    mode: str, tool: str | None, stdio_server: StdioServers,
) -> None:
    """What the notes tell the client's author: the answer is lost, the exception goes to the handler."""
    errors: list[Exception] = []

    async def handler(message: Any) -> None:
        if isinstance(message, Exception):
            errors.append(message)

    async with stdio_server.session(mode, handler=handler) as session, anyio.create_task_group() as group:
        group.start_soon(session.call_tool, tool, {}) if tool else group.start_soon(session.list_tools)
        await async_wait_until(lambda: errors, PROMPTLY, "the parse error")
        group.cancel_scope.cancel()
    assert "unexpected end of hex escape" in str(errors[0])


def test_exit_at_start_says_why_on_stderr_and_exits_3(stdio_server: StdioServers) -> None:
    child = stdio_server.popen("exit-at-start", stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stdout, stderr = child.communicate(timeout=PROMPTLY)
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        EXIT_AT_START_CODE,
        b"",
        EXIT_AT_START_REASON + "\n",
    )


def _initialize_line() -> bytes:
    request = types.JSONRPCRequest(
        jsonrpc="2.0",
        id=1,
        method="initialize",
        params={"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    )
    return encode_message(request).encode() + b"\n"


def test_hang_initialize_reads_the_request_and_never_answers_even_at_eof(
    tmp_path: Path, stdio_server: StdioServers,
) -> None:
    record = tmp_path / "record"
    child = stdio_server.popen("hang-initialize", "--record", str(record))
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(_initialize_line())
        child.stdin.close()  # EOF: a hung server ignores it
        wait_until(lambda: received(record, "initialize"), PROMPTLY, "initialize received")
        assert child.poll() is None
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=PROMPTLY)
    assert child.stdout.read() == b""


@pytest.mark.parametrize(("crash", "status"), [("kill", -signal.SIGKILL), ("exit", 9)])
async def test_crash_mid_call_dies_during_the_call(
    tmp_path: Path, crash: str, status: int, stdio_server: StdioServers,
) -> None:
    record = tmp_path / "record"
    with pytest.RaisesGroup(pytest.RaisesGroup(pytest.RaisesExc(MCPError, match=r"^Connection closed$"))):
        async with stdio_server.session("crash-mid-call", "--crash", crash, "--record", str(record)) as session:
            with anyio.fail_after(PROMPTLY):
                await session.call_tool("echo", {"text": "x"})
    events = read_record(record)
    assert [e["event"] for e in events][-2:] == ["tool-started", "crashing"]
    pid = events[0]["pid"]
    # The SDK client reaped it; run it again raw for the exit status.
    child = stdio_server.popen("crash-mid-call", "--crash", crash)
    assert child.stdin is not None
    call = types.JSONRPCRequest(jsonrpc="2.0", id=2, method="tools/call", params={"name": "echo", "arguments": {}})
    initialized = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
    child.stdin.write(_initialize_line() + (encode_message(initialized) + "\n" + encode_message(call) + "\n").encode())
    child.stdin.flush()
    assert child.wait(timeout=PROMPTLY) == status
    child.stdin.close()
    assert child.stdout is not None and json.loads(child.stdout.readline())["id"] == 1  # initialize answered
    assert child.stdout.read() == b"" and pid != child.pid


async def test_garbage_before_the_answer_reaches_the_handler_and_the_session_still_works(
    stdio_server: StdioServers,
) -> None:
    errors: list[Exception] = []

    async def handler(message: Any) -> None:
        if isinstance(message, Exception):
            errors.append(message)

    async with stdio_server.session("garbage-stdout", "--garbage", "before", handler=handler) as session:
        assert _text(await session.call_tool("echo", {"text": "still fine"})) == ["still fine"]
    assert len(errors) == 1 and "this is not JSON-RPC" in str(errors[0])


def test_garbage_instead_of_the_answer(stdio_server: StdioServers) -> None:
    child = stdio_server.popen("garbage-stdout", "--garbage", "instead")
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(_initialize_line())
        child.stdin.flush()
        assert child.stdout.readline() == b"Traceback (most recent call last): not an answer\n"
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=PROMPTLY)


async def test_echo_env_secret_puts_the_value_in_results_errors_and_stderr(
    tmp_path: Path, stdio_server: StdioServers,
) -> None:
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("w") as errlog:
        async with stdio_server.session("echo-env-secret", env={"MCP_CANARY_TOKEN": SECRET}, errlog=errlog) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert tools["secret_in_description"].description == f"Authenticated with {SECRET}."
            schema = tools["secret_in_schema"].input_schema
            assert schema["description"] == f"\x1b]0;token {SECRET}\x07\x1b[31mtoken {SECRET}"
            assert list(schema["properties"]) == [f"arg\x1b[2Jtoken {SECRET}"]
            assert _text(await session.call_tool("secret", {})) == [f"token={SECRET}"]
            is_error = await session.call_tool("secret_is_error", {})
            assert (is_error.is_error, _text(is_error)) == (True, [f"rejected token {SECRET}"])
            with pytest.raises(MCPError) as raised:
                await session.call_tool("secret_raises", {})
            assert (raised.value.message, raised.value.data) == (f"backend refused token {SECRET}", {"token": SECRET})
    assert f"mcp fixture: using MCP_CANARY_TOKEN={SECRET}\n" in stderr_path.read_text()


# --- streamable HTTP ----------------------------------------------------------------------------------


@asynccontextmanager
async def http_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers=headers or {}) as client,
        streamable_http_client(url, http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        with anyio.fail_after(PROMPTLY):
            await session.initialize()
        yield session


async def test_http_with_the_right_bearer_token_serves_and_records(tmp_path: Path, http_server: HttpServers) -> None:
    record = tmp_path / "record"
    server = http_server("ok", token="right-token", record=record)
    async with http_session(server.url, {"Authorization": "Bearer right-token"}) as session:
        assert [tool.name for tool in (await session.list_tools()).tools] == [*OK_TOOLS]
        assert _text(await session.call_tool("echo", {"text": "over http"})) == ["over http"]
    assert {e["authorization"] for e in read_record(record) if e["event"] == "http-request"} == {"Bearer right-token"}
    assert [m["params"]["name"] for m in received(record, "tools/call")] == ["echo"]


async def test_http_puts_a_lone_surrogate_on_the_wire_and_the_sdk_answers_the_call_with_a_parse_error(
    http_server: HttpServers,
) -> None:
    """Over streamable HTTP the SDK's transport does not drop the answer it cannot parse: it answers the call
    itself with JSON-RPC -32700 (mcp 2.3, client/streamable_http.py _handle_sse_event), at once."""
    server = http_server("hostile-text")
    async with http_session(server.url) as session:
        with anyio.fail_after(PROMPTLY), pytest.raises(MCPError) as raised:
            await session.call_tool("surrogate_echo", {})
        # pydantic's words for the "\\ud800" escape: the wire held the lone surrogate, not the stand-in
        assert raised.value.code == types.PARSE_ERROR and "unexpected end of hex escape" in raised.value.message
        assert _text(await session.call_tool("hostile_echo", {}))[1] == HOSTILE_TEXT  # the session goes on


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "right-token"}])
async def test_http_without_the_right_bearer_token_is_401(headers: dict[str, str], http_server: HttpServers) -> None:
    server = http_server("ok", token="right-token")
    async with httpx2.AsyncClient() as client:
        answer = await client.post(server.url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert (answer.status_code, answer.text) == (401, "unauthorized\n")
    assert answer.headers["www-authenticate"] == 'Bearer realm="dsh-fixture"'


async def test_http_500_answers_500_to_everything(http_server: HttpServers) -> None:
    server = http_server("http-500")
    async with httpx2.AsyncClient() as client:
        answer = await client.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert (answer.status_code, answer.text) == (500, "internal server error: the fixture always fails\n")


async def test_http_as_a_child_writes_its_port_once_listening(tmp_path: Path, stdio_server: StdioServers) -> None:
    port_file = tmp_path / "port"
    child = stdio_server.popen("list-changed", "--http", "--port-file", str(port_file), "--token", "t0k",
                               stdin=None)
    try:
        port = int(await async_wait_until(lambda: port_file.exists() and port_file.read_text(), PROMPTLY, "port"))
        assert child.stdout is not None and child.stdout.readline() == f"http://127.0.0.1:{port}/mcp\n".encode()
        async with http_session(f"http://127.0.0.1:{port}/mcp", {"Authorization": "Bearer t0k"}) as session:
            await session.call_tool("echo", {"text": "x"})
            assert "added_later" in [tool.name for tool in (await session.list_tools()).tools]
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=PROMPTLY)


# --- the wire encoder ---------------------------------------------------------------------------------


@given(st.text())
def test_any_text_survives_the_fixture_wire_encoding(text: str) -> None:
    """Lone surrogates included: what a hostile fixture means to send is what goes on the wire."""
    message = types.JSONRPCResponse(jsonrpc="2.0", id=1, result={"content": [{"type": "text", "text": text}]})
    line = encode_message(message)
    assert "\n" not in line and json.loads(line)["result"]["content"][0]["text"] == text


def test_record_lines_are_whole_json_even_for_hostile_text(tmp_path: Path) -> None:
    from fixtures._mcp_wire import Recorder

    recorder = Recorder(tmp_path / "record")
    recorder.received(b"not json \xff\n")
    recorder.event("x", text="lone\ud800\n")
    assert [e.get("unparsed") or e.get("text") for e in read_record(tmp_path / "record")] == [
        "not json \ufffd\n",
        "lone\ud800\n",
    ]
