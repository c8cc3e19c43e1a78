"""dsh's MCP client (McpManager over ServerConnection) against real servers: the fixture servers of
fixtures/mcp_servers.py over stdio and streamable HTTP, and the pinned npm servers (server-everything,
server-filesystem; skipped with how to install when absent). Exact lines (docs/contracts.md, docs/mcp.md)."""

from __future__ import annotations

import json
import os
import string
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.mcp import (
    MCP_NO_APPROVER,
    McpCallRequest,
    McpManager,
    McpServerFailure,
    parse_servers,
)
from dsh.agent_loop.mcp.diagnostics import McpStrayLines
from dsh.agent_loop.mcp.tools import MAX_NAME_CHARS, clean_arguments, tool_names
from dsh.agent_loop.settings import SettingsError
from dsh.agent_loop.tools.registry import MAX_RESULT_CHARS, Tool, ToolContext
from fixtures.mcp_servers import (
    BIG_TEXT_BYTES,
    EXIT_AT_START_REASON,
    HOSTILE_TEXT,
    OK_TOOLS,
    HttpServer,
    read_record,
    received,
)
from tests.canaries import CHILD_ENV
from tests.waiting import PROMPTLY, async_wait_until

if TYPE_CHECKING:
    from tests.agent_loop.mcp.conftest import StdioServers

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

HTTP_TOKEN = "httpFixtureToken4471"
# hostile-text's three hostile names of its five tools
LEFT_OUT_HOSTILE = "MCP server h: 3 of 5 tools left out (names with control characters)"
HttpServers = Callable[..., HttpServer]  # the http_server fixture (conftest.py)


def _ctx(approver: Any = None) -> ToolContext:
    return ToolContext(cwd=Path("."), turn=1, notify=lambda event: None, approver=approver)


class _Seen:
    def __init__(self) -> None:
        self.notices: list[str] = []
        self.failures: list[BaseException] = []


def _manager(tables: dict[str, Any], seen: _Seen, *, environ: dict[str, str] | None = None,
             **kwargs: Any) -> McpManager:
    return McpManager(parse_servers(tables), environ=os.environ if environ is None else environ,
                      mask=lambda text: text.replace(CHILD_ENV, "***"),
                      notice=seen.notices.append, on_failure=seen.failures.append, **kwargs)


def _tools(manager: McpManager) -> dict[str, Tool]:
    return {tool.name: tool for tool in manager.tools()}


# --- failures: one closed line, announced once ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "table", "line"),
    [
        ((), {"command": "/nonexistent/mcp-server"},
         "MCP server failure (server: s; stage: spawn; category: process-start)"),
        (("exit-at-start",), {},
         "MCP server failure (server: s; stage: initialize; category: process-exit; exit code: 3)"),
        # Its answer to initialize is a line that is not JSON-RPC: skipped, so initialize is never answered (the
        # timeout leaves the fixture, however slow to start on a loaded machine, time to write that line).
        (("garbage-stdout", "--garbage", "instead"), {"startup_timeout": 10},
         "MCP server failure (server: s; stage: initialize; category: timeout)"),
        (("hang-initialize",), {"startup_timeout": 0.5},
         "MCP server failure (server: s; stage: initialize; category: timeout)"),
    ],
    ids=["missing-command", "exit-at-start", "garbage-stdout", "hang-at-initialize"],
)
async def test_a_failing_server_is_announced_once_with_its_closed_line(
    fixture: tuple[str, ...], table: dict[str, Any], line: str, stdio_server: StdioServers,
) -> None:
    table = stdio_server.table(*fixture, **table) if fixture else table
    seen = _Seen()
    async with _manager({"s": table}, seen) as manager:
        await manager.wait_ready()
        assert [row.line for row in manager.status()] == [line]
        assert manager.tools() == []
    assert seen.notices == [line]
    *stray, record = seen.failures  # a stray line is given to /why when it comes; the failure after it
    assert [type(early) for early in stray] == ([McpStrayLines] if fixture[:1] == ("garbage-stdout",) else [])
    assert isinstance(record, McpServerFailure) and str(record) == line
    if "exit code: 3" in line:  # the server's own words stay host-side, in the record
        assert record.words.stderr == (EXIT_AT_START_REASON,)
        assert EXIT_AT_START_REASON not in line
    if fixture[:1] == ("garbage-stdout",):  # /why says what it skipped: often why a server "hangs"
        assert record.words.said[-2:] == (("stdout lines that are not JSON-RPC, skipped", "1"), (
            "the first of them", "Traceback (most recent call last): not an answer"))


async def test_servers_hanging_at_initialize_have_all_failed_when_wait_ready_returns(
    stdio_server: StdioServers,
) -> None:
    # The startup clock of each server starts when it is started: a turn's wait_ready no longer runs a
    # timer of its own that could wake before the servers' (it did, with several servers or a busy box).
    seen = _Seen()
    tables = {f"s{i}": stdio_server.table("hang-initialize", startup_timeout=0.5) for i in range(6)}
    async with _manager(tables, seen) as manager:
        await manager.wait_ready()
        assert {row.state for row in manager.status()} == {"failed"}
    assert sorted(seen.notices) == [
        f"MCP server failure (server: s{i}; stage: initialize; category: timeout)" for i in range(6)]


async def test_closing_during_a_servers_handshake_stops_it_at_once_and_reaps_it(
    stdio_server: StdioServers, tmp_path: Path,
) -> None:
    # Quitting dsh (or an editor closing a `dsh acp` session) while a server hangs at initialize must not
    # wait out its startup_timeout: the handshake is abandoned and the child goes through its ladder.
    record = tmp_path / "hang.jsonl"
    seen = _Seen()
    table = stdio_server.table("hang-initialize", "--record", str(record), startup_timeout=600)
    with anyio.fail_after(PROMPTLY):
        async with _manager({"h": table}, seen) as manager:
            await async_wait_until(lambda: received(record, "initialize"), PROMPTLY, "the handshake to begin")
    [pid] = {e["pid"] for e in read_record(record) if e["event"] == "started"}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert [row.state for row in manager.status()] == ["stopped"]
    assert seen.notices == [] and seen.failures == []  # a stop is not the server's failure


async def test_a_stray_line_before_the_answers_is_skipped_counted_and_kept_for_why(
    stdio_server: StdioServers,
) -> None:
    # As the official SDK clients do: one careless print() on stdout does not cost the server.
    seen = _Seen()
    table = stdio_server.table("garbage-stdout", approve="auto", env={"MCP_CANARY_TOKEN": CHILD_ENV})
    async with _manager({"g": table}, seen) as manager:
        await manager.wait_ready()
        assert [(row.state, row.tools) for row in manager.status()] == [("ready", len(OK_TOOLS))]
        assert (await _tools(manager)["mcp__g__echo"].run({"text": "fine"}, _ctx())).text == "fine"
    assert seen.notices == []  # nothing on the screen
    [record] = seen.failures  # /why
    assert isinstance(record, McpStrayLines)
    assert str(record) == "MCP server g wrote a stdout line that is not JSON-RPC: skipped"
    assert record.word_lines() == [
        "the server's own words (host-side only, masked):",
        "  first stdout line that is not JSON-RPC: this is not JSON-RPC \\x1b[31m{oops ***",
        "  stdout lines skipped: 1",
    ]


@pytest.mark.parametrize(("crash", "fact"), [("kill", "signal: SIGKILL"), ("exit", "exit code: 9")])
async def test_a_crash_during_a_call_is_a_tool_error_naming_the_server(
    crash: str, fact: str, stdio_server: StdioServers,
) -> None:
    seen = _Seen()
    table = stdio_server.table("crash-mid-call", "--crash", crash, approve="auto")
    async with _manager({"c": table}, seen) as manager:
        await manager.wait_ready()
        output = await _tools(manager)["mcp__c__add"].run({"a": 1, "b": 2}, _ctx())
        line = f"MCP server failure (server: c; stage: call; category: process-exit; {fact})"
        assert (output.text, output.is_error, output.diagnostic) == (
            f"Error: the MCP server c failed the call\n{line}", True, line)
        assert [row.line for row in manager.status()] == [line]
        assert manager.tools() == []  # its tools are gone with it
    assert seen.notices == []  # the tool result carries it
    assert [str(record) for record in seen.failures] == [line]


# --- stdio: results, cancellation, list_changed, restart, size ----------------------------------------


async def test_the_ok_server_lists_and_answers_through_dsh_tools(tmp_path: Path, stdio_server: StdioServers) -> None:
    seen = _Seen()
    async with _manager({"ok": stdio_server.table("ok", approve="auto")}, seen) as manager:
        await manager.wait_ready()
        [status] = manager.status()
        assert (status.state, status.tools, status.line) == ("ready", len(OK_TOOLS), None)
        tools = _tools(manager)
        assert list(tools) == [f"mcp__ok__{name}" for name in OK_TOOLS]
        assert tools["mcp__ok__echo"].concurrency_safe and not tools["mcp__ok__add"].concurrency_safe
        assert (await tools["mcp__ok__echo"].run({"text": "hello"}, _ctx())).text == "hello"
        assert (await tools["mcp__ok__add"].run({"a": 2, "b": 40}, _ctx())).text == "42"
        mixed = await tools["mcp__ok__image_and_resource"].run({}, _ctx())
        assert mixed.text == ("[image: image/png, 66 bytes]\n[resource: file:///fixture/notes.txt, text/plain, 5 "
                              "characters]\n[resource link: file:///fixture/other.txt]")
        failed = await tools["mcp__ok__fails"].run({}, _ctx())
        assert (failed.text, failed.is_error) == ("Error: the tool failed: disk full", True)
    assert seen.notices == []


async def test_a_ten_mib_result_reaches_the_model_bounded_and_the_server_stays_up(stdio_server: StdioServers) -> None:
    seen = _Seen()
    async with _manager({"ok": stdio_server.table("ok", approve="auto")}, seen) as manager:
        await manager.wait_ready()
        tools = _tools(manager)
        output = await tools["mcp__ok__big"].run({}, _ctx())
        omitted = BIG_TEXT_BYTES - MAX_RESULT_CHARS
        assert output.text == "x" * MAX_RESULT_CHARS + f"\n[tool output truncated: {omitted} characters omitted]"
        assert (await tools["mcp__ok__echo"].run({"text": "after"}, _ctx())).text == "after"
    assert seen.notices == [] and seen.failures == []


async def test_cancelling_a_slow_call_sends_notifications_cancelled_and_keeps_the_server(
    tmp_path: Path, stdio_server: StdioServers,
) -> None:
    record = tmp_path / "record"
    seen = _Seen()
    async with _manager({"ok": stdio_server.table("ok", "--record", str(record), approve="auto")}, seen) as manager:
        await manager.wait_ready()
        tools = _tools(manager)
        async with anyio.create_task_group() as group:
            group.start_soon(tools["mcp__ok__slow"].run, {}, _ctx())
            await async_wait_until(lambda: any(e["event"] == "tool-started" for e in read_record(record)),
                                   PROMPTLY, "the slow call to start")
            group.cancel_scope.cancel()
        await async_wait_until(lambda: received(record, "notifications/cancelled"), PROMPTLY, "the cancellation")
        await async_wait_until(lambda: any(e["event"] == "cancelled" for e in read_record(record)), PROMPTLY,
                               "the handler cancelled")
        assert (await tools["mcp__ok__echo"].run({"text": "still here"}, _ctx())).text == "still here"
    assert seen.notices == [] and seen.failures == []


async def test_a_call_past_call_timeout_is_a_timeout_line_and_is_cancelled_on_the_server(
    tmp_path: Path, stdio_server: StdioServers,
) -> None:
    record = tmp_path / "record"
    seen = _Seen()
    table = stdio_server.table("ok", "--record", str(record), approve="auto", call_timeout=0.3)
    async with _manager({"ok": table}, seen) as manager:
        await manager.wait_ready()
        output = await _tools(manager)["mcp__ok__slow"].run({}, _ctx())
        line = "MCP server failure (server: ok; stage: call; category: timeout)"
        assert (output.text, output.diagnostic) == (f"Error: the MCP server ok failed the call\n{line}", line)
        await async_wait_until(lambda: received(record, "notifications/cancelled"), PROMPTLY, "the cancellation")
        assert [row.state for row in manager.status()] == ["ready"]  # a slow tool is not a dead server


async def test_tools_list_changed_gives_the_next_turn_the_new_listing(stdio_server: StdioServers) -> None:
    seen = _Seen()
    async with _manager({"lc": stdio_server.table("list-changed", approve="auto")}, seen) as manager:
        await manager.wait_ready()
        assert "mcp__lc__added_later" not in _tools(manager)
        assert (await _tools(manager)["mcp__lc__echo"].run({"text": "x"}, _ctx())).text == "x"
        await async_wait_until(lambda: "mcp__lc__added_later" in _tools(manager), PROMPTLY, "the re-listing")
        assert manager.status()[0].tools == len(OK_TOOLS) + 1


async def test_restart_stops_the_server_and_starts_a_fresh_one(tmp_path: Path, stdio_server: StdioServers) -> None:
    record = tmp_path / "record"
    seen = _Seen()
    async with _manager({"ok": stdio_server.table("ok", "--record", str(record), approve="auto")}, seen) as manager:
        await manager.wait_ready()
        await manager.restart("ok")
        assert [row.state for row in manager.status()] == ["starting"]
        await manager.wait_ready()
        assert (await _tools(manager)["mcp__ok__echo"].run({"text": "again"}, _ctx())).text == "again"
        with pytest.raises(KeyError):
            await manager.restart("nope")
    started = [event["pid"] for event in read_record(record) if event["event"] == "started"]
    assert len(started) == 2 and started[0] != started[1]
    assert seen.notices == []


async def test_a_restart_brings_back_a_server_that_crashed(stdio_server: StdioServers) -> None:
    seen = _Seen()
    async with _manager({"c": stdio_server.table("crash-mid-call", approve="auto")}, seen) as manager:
        await manager.wait_ready()
        await _tools(manager)["mcp__c__echo"].run({"text": "x"}, _ctx())
        assert manager.status()[0].state == "failed"
        await manager.restart("c")
        await manager.wait_ready()
        assert (manager.status()[0].state, len(_tools(manager))) == ("ready", len(OK_TOOLS))


async def test_two_hundred_tools_offer_the_first_128_with_unique_names_and_one_line(
    stdio_server: StdioServers,
) -> None:
    seen = _Seen()
    async with _manager({"many": stdio_server.table("tools200", approve="auto")}, seen) as manager:
        await manager.wait_ready()
        tools = _tools(manager)
        assert list(tools) == [f"mcp__many__tool_{i:03d}" for i in range(128)]
        assert (await tools["mcp__many__tool_127"].run({"x": "y"}, _ctx())).text.startswith("tool_127: {'x': 'y'}")
        _tools(manager)  # said once per listing, not per turn
    assert seen.notices == ["MCP server many: 72 of 200 tools left out (past the limit of 128 tools per server)"]
    # allow picks which tools count: the limits apply to what is allowed.
    async with _manager({"many": stdio_server.table("tools200", allow=["tool_150", "tool_199"])}, _Seen()) as manager:
        await manager.wait_ready()
        assert list(_tools(manager)) == ["mcp__many__tool_150", "mcp__many__tool_199"]


# --- hostile text and lone surrogates -----------------------------------------------------------------


def _clean(text: str) -> bool:
    return all(ch in string.printable or ord(ch) > 0x9F for ch in text) and not any(
        0xD800 <= ord(ch) <= 0xDFFF or ch in "\x1b\x07\x9b\u202e\u2066\u2069" for ch in text)


async def test_hostile_names_are_left_out_and_descriptions_sanitized(stdio_server: StdioServers) -> None:
    seen = _Seen()
    async with _manager({"h": stdio_server.table("hostile-text", approve="auto")}, seen) as manager:
        await manager.wait_ready()
        specs = manager.specs()
        # A name that is not printable would reach the approval question and tools/call: those tools are out.
        assert [spec.tool for spec in specs] == ["hostile_echo", "surrogate_echo"]
        for spec in specs:
            assert spec.name.startswith("mcp__h__") and len(spec.name) <= MAX_NAME_CHARS
            assert all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in spec.name)
            assert _clean(spec.description), spec.description
            assert _clean(json.dumps(spec.parameters, ensure_ascii=False)), spec.parameters
        cleaned = HOSTILE_TEXT.replace("\x1b", "").replace("\x07", "").replace("\u202e", "").replace("\r", "")
        [echo] = [spec for spec in specs if spec.tool == "hostile_echo"]
        assert echo.parameters["properties"] == {f"arg[2J{cleaned}": {
            "type": "string", "title": f"]0;{cleaned}[31m{cleaned}", "description": f"]0;{cleaned}[31m{cleaned}",
            "enum": [f"]0;{cleaned}[31m{cleaned}", "plain"], "default": f"]0;{cleaned}[31m{cleaned}"}}
        # A lone surrogate in a result (a JSON escape pydantic's parser refuses) arrives as U+FFFD.
        surrogate = _tools(manager)["mcp__h__surrogate_echo"]
        assert (await surrogate.run({}, _ctx())).text == "lone\ufffdsurrogate"
    assert seen.notices == [LEFT_OUT_HOSTILE]


async def test_a_lone_surrogate_in_the_listing_or_the_arguments_cannot_kill_the_transport(
    tmp_path: Path, stdio_server: StdioServers,
) -> None:
    record = tmp_path / "record"
    seen = _Seen()
    asked: list[McpCallRequest] = []

    async def approver(request: McpCallRequest) -> str:
        asked.append(request)
        return "yes"

    async with _manager({"ls": stdio_server.table("lone-surrogate", "--record", str(record))}, seen) as manager:
        await manager.wait_ready()
        tools = _tools(manager)
        assert [spec.tool for spec in manager.specs()] == ["echo"]  # "lone\ud800surrogate" is left out
        echo = tools["mcp__ls__echo"]
        output = await echo.run({"text": "bad\udc00arg", "k\ud800": ["\udfff"]}, _ctx(approver))
        assert (output.text, output.is_error) == ("bad\ufffdarg", False)
        assert asked == [McpCallRequest("ls", "echo", {"text": "bad\ufffdarg", "k\ufffd": ["\ufffd"]})]
        # Listed, named safely, and the transport survived both: the next call answers.
        assert (await echo.run({"text": "after"}, _ctx(approver))).text == "after"
        assert [row.state for row in manager.status()] == ["ready"]
    assert seen.notices == ["MCP server ls: 1 of 2 tools left out (names with control characters)"]


@given(st.recursive(st.text(alphabet=st.characters(codec=None)), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(alphabet=st.characters(codec=None), max_size=5), inner, max_size=4),
                    max_leaves=12))
def test_clean_arguments_leave_nothing_utf8_cannot_encode(value: Any) -> None:
    cleaned = clean_arguments(value)
    assert repr(cleaned).encode("utf-8")  # raises on any lone surrogate left
    assert clean_arguments(cleaned) == cleaned


# --- streamable HTTP --------------------------------------------------------------------------------------


async def test_streamable_http_lists_and_calls_with_a_bearer_from_the_environment(
    tmp_path: Path, http_server: HttpServers,
) -> None:
    record = tmp_path / "record"  # holds the Authorization header it saw: so the token is not a suite canary
    seen = _Seen()
    server = http_server("ok", token=HTTP_TOKEN, record=record)
    table = {"url": server.url, "headers": {"Authorization": "Bearer ${DSH_TEST_MCP_TOKEN}"}, "approve": "auto"}
    async with _manager({"web": table}, seen, environ={"DSH_TEST_MCP_TOKEN": HTTP_TOKEN}) as manager:
        assert manager.secrets() == (HTTP_TOKEN,)
        await manager.wait_ready()
        assert [row.state for row in manager.status()] == ["ready"]
        tools = _tools(manager)
        assert (await tools["mcp__web__add"].run({"a": 1, "b": 1}, _ctx())).text == "2"
    auths = {event.get("authorization") for event in read_record(record) if event["event"] == "http-request"}
    assert auths == {f"Bearer {HTTP_TOKEN}"}
    assert seen.notices == []


async def test_a_lone_surrogate_over_http_is_that_calls_protocol_failure_at_once(http_server: HttpServers) -> None:
    # The SDK's HTTP transport cannot parse the answer (pydantic refuses the "\ud800" escape) and answers the
    # call itself with a parse error: a protocol failure of this call, not the tool's, and not a wait for
    # call_timeout. The server stays up: the next call answers.
    seen = _Seen()
    server = http_server("hostile-text")
    table = {"url": server.url, "approve": "auto", "call_timeout": 600}
    async with _manager({"h": table}, seen, environ={}) as manager:
        await manager.wait_ready()
        tools = _tools(manager)
        with anyio.fail_after(PROMPTLY):
            output = await tools["mcp__h__surrogate_echo"].run({}, _ctx())
        line = "MCP server failure (server: h; stage: call; category: protocol)"
        assert (output.text, output.is_error, output.diagnostic) == (
            f"Error: the MCP server h failed the call\n{line}", True, line)
        assert [row.state for row in manager.status()] == ["ready"]
        assert (await tools["mcp__h__hostile_echo"].run({}, _ctx())).text.startswith("hostile_echo: {}")
    assert seen.notices == [LEFT_OUT_HOSTILE]
    [record] = seen.failures
    assert str(record) == line and "unexpected end of hex escape" in "\n".join(record.words.lines())


@pytest.mark.parametrize(
    ("mode", "token", "status"), [("ok", "expected-token", 401), ("http-500", None, 500)], ids=["401", "500"])
async def test_an_http_error_status_is_named_in_the_line(
    mode: str, token: str | None, status: int, http_server: HttpServers,
) -> None:
    seen = _Seen()
    server = http_server(mode, token=token)
    async with _manager({"web": {"url": server.url}}, seen, environ={}) as manager:
        await manager.wait_ready()
    line = f"MCP server failure (server: web; stage: initialize; category: http; HTTP status: {status})"
    assert seen.notices == [line]
    assert [str(record) for record in seen.failures] == [line]


# --- real npm servers -------------------------------------------------------------------------------------


async def test_everything_server_lists_and_calls_its_tools(
    tmp_path: Path, npm_server: Callable[..., list[str]],
) -> None:
    seen = _Seen()
    async with _manager({"ev": {"command": npm_server("everything", "stdio")}}, seen) as manager:
        await manager.wait_ready()
        [status] = manager.status()
        assert (status.state, status.tools > 5, status.line) == ("ready", True, None)
        tools = _tools(manager)
        assert tools["mcp__ev__echo"].concurrency_safe  # readOnlyHint: runs without asking
        output = await tools["mcp__ev__echo"].run({"message": "hi"}, _ctx())
        assert (output.text, output.is_error) == ("Echo: hi", False)
        image = await tools["mcp__ev__get-tiny-image"].run({}, _ctx())
        assert "[image: image/png, " in image.text and " bytes]" in image.text
    assert seen.notices == []


async def test_a_tool_that_is_not_read_only_asks_and_is_denied_without_an_approver(
    npm_server: Callable[..., list[str]],
) -> None:
    seen = _Seen()
    asked: list[object] = []

    async def approver(request: object) -> str:
        asked.append(request)
        return "no"

    async with _manager({"ev": {"command": npm_server("everything", "stdio")}}, seen) as manager:
        await manager.wait_ready()
        tool = _tools(manager)["mcp__ev__toggle-simulated-logging"]
        assert (await tool.run({}, _ctx())).text == MCP_NO_APPROVER
        assert (await tool.run({}, _ctx(approver))).text == "Error: the user denied this MCP tool call"
        assert asked == [McpCallRequest("ev", "toggle-simulated-logging", {})]
        manager.allow_mcp = True
        assert not (await tool.run({}, _ctx())).is_error


async def test_filesystem_server_lists_a_directory_and_reads_a_file(
    tmp_path: Path, npm_server: Callable[..., list[str]],
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "note.txt").write_text("the file's words\n", encoding="utf-8")
    (root / "sub").mkdir()
    seen = _Seen()
    table = {"command": npm_server("filesystem", str(root)), "env": {"HOME": str(tmp_path)}}
    async with _manager({"fs": table}, seen) as manager:
        await manager.wait_ready()
        tools = _tools(manager)
        listing = await tools["mcp__fs__list_directory"].run({"path": str(root)}, _ctx())
        assert (listing.text, listing.is_error) == ("[FILE] note.txt\n[DIR] sub", False)
        read = await tools["mcp__fs__read_text_file"].run({"path": str(root / "note.txt")}, _ctx())
        assert (read.text, read.is_error) == ("the file's words\n", False)
        outside = await tools["mcp__fs__read_text_file"].run({"path": sys.executable}, _ctx())
        assert outside.is_error and "outside allowed directories" in outside.text
        write = tools["mcp__fs__write_file"]
        assert (await write.run({"path": str(root / "x"), "content": "y"}, _ctx())).text == MCP_NO_APPROVER
        assert not (root / "x").exists()
    assert seen.notices == []


# --- configuration --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "[mcp_servers.x] needs exactly one of command (stdio) or url (streamable HTTP)"),
        ({"command": "a", "colour": 1}, "[mcp_servers.x] has unknown key 'colour' (known: command, args, env, cwd, "
                                        "url, headers, enabled, startup_timeout, call_timeout, allow, deny, approve)"),
        ({"command": "a", "startup_timeout": 0},
         "[mcp_servers.x] startup_timeout must be a number of seconds above 0 (at most a day), got 0"),
        ({"command": "a", "call_timeout": float("nan")},
         "[mcp_servers.x] call_timeout must be a number of seconds above 0 (at most a day), got nan"),
        ({"command": "a", "approve": "yes"}, '[mcp_servers.x] approve must be "ask" or "auto", got \'yes\''),
        ({"command": "a", "enabled": "no"}, "[mcp_servers.x] enabled must be true or false, got 'no'"),
        ({"command": "a", "env": {"K": "a\nb"}}, "[mcp_servers.x] env.K must be a string (no NUL or newline)"),
        ({"command": "a", "deny": "b"}, "[mcp_servers.x] deny must be a list of strings"),
        ({"command": []}, "[mcp_servers.x] command must be a program name or a non-empty list of strings"),
        ({"url": "ftp://h"}, "[mcp_servers.x] url must be an http:// or https:// URL"),
        ({"url": "http://h", "env": {}}, "[mcp_servers.x] env does not apply to a url server"),
    ],
)
def test_a_bad_table_is_a_config_error_naming_table_and_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_servers({"x": table})
    assert str(caught.value) == message


@given(st.text(max_size=20), st.lists(st.text(max_size=300), max_size=30))
def test_tool_names_are_api_safe_bounded_unique_and_deterministic(server: str, tools: list[str]) -> None:
    names = tool_names(server, tools, set())
    assert names == tool_names(server, tools, set())
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) <= MAX_NAME_CHARS and name.startswith("mcp__")
        assert all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in name)
