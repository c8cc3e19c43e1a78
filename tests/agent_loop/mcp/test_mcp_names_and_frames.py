"""Names and frames from the outside (issue 35 §3): what an MCP server names and sends is bounded where it
enters dsh. Real dsh processes (piped and ``-p``), real fixture servers over stdio (fixtures/mcp_servers.py),
the fault server as the model; exact lines (docs/mcp.md, "Limits")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.mcp import McpManager, parse_servers
from dsh.agent_loop.mcp.stdio import read_lines
from dsh.agent_loop.tools.registry import ToolContext
from dsh.llm.loopback.fault_server import Behaviour, FaultServer, RecordedRequest
from fixtures.mcp_servers import HttpServer, received, stdio_command
from tests.canaries import CHILD_ENV

REPO = Path(__file__).resolve().parents[3]
KEY = "sk-mcpNamesFramesKey0000000000000000"
PROTOCOL_LINE = "MCP server failure (server: fx; stage: call; category: protocol)"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    yield tmp_path
    (tmp_path / "config" / "dsh" / "config.toml").unlink(missing_ok=True)  # may hold the canary on purpose


def _table(name: str, mode: str, *options: str, env: dict[str, str] | None = None) -> str:
    argv = stdio_command(mode, *options)
    table = f"[mcp_servers.{name}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n"
    if env:
        table += "env = { " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in env.items()) + " }\n"
    return table


def _dsh(home: Path, server: FaultServer, *args: str, stdin: str = "",
         tables: str = "") -> subprocess.CompletedProcess[str]:
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + tables, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=REPO, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def model() -> Iterator[FaultServer]:
    """The fault server as the model: each test pushes its script; plain text after it."""
    server = FaultServer(default=Behaviour("text", text="done")).start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def _call(server: str, tool: str, arguments: str = "{}") -> Behaviour:
    return Behaviour("tool_call", name=f"mcp__{server}__{tool}", arguments=arguments, reasoning="Call it.")


# --- item 1: server names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a__b", "a_"])
def test_a_server_name_that_could_run_into_a_tool_name_is_a_config_error_naming_the_file(
        name: str, home: Path, model: FaultServer) -> None:
    # mcp__a__b__x is server a's tool b__x and server a__b's tool x: a name holding "__" (or ending in "_") is
    # refused, so every dsh-side name has one server.
    result = _dsh(home, model, "-p", "hello", tables=_table("a", "ok") + _table(name, "ok"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"dsh: failed to start: config file {home}/config/dsh/config.toml: [mcp_servers.{name}] the server name "
        "must not contain '__' or end with '_' (dsh names its tools mcp__<server>__<tool>)\n")


# --- item 2: names that would draw lines ---------------------------------------------------------------


def test_a_tool_name_with_a_newline_is_left_out_with_one_line(home: Path, model: FaultServer) -> None:
    model.push(_call("fx", "tidy____tool_result__nothing_to_tidy_117bf46d"), Behaviour("text", text="ok"))
    result = _dsh(home, model, "-p", "tidy up", "--allow-mcp", tables=_table("fx", "forged-name"))
    assert (result.returncode, result.stdout) == (0, "ok\n")
    lines = result.stderr.splitlines()
    assert lines[0] == "MCP server fx: 1 of 2 tools left out (names with control characters)"
    assert "nothing to tidy" not in result.stderr  # the name never reaches the screen, the model or the log
    tools = [tool["function"]["name"] for tool in model.requests[0].json["tools"]]
    assert [name for name in tools if name.startswith("mcp__")] == ["mcp__fx__add"]


# --- item 3: how much of a server's listing goes to the model -------------------------------------------------


def _request_sizes(requests: list[RecordedRequest]) -> list[int]:
    return [len(json.dumps(request.json)) for request in requests if request.path.endswith("/chat/completions")]


@pytest.mark.parametrize(
    ("mode", "line", "kept"),
    # tools10000: ~2 KiB of description and schema each (20 MB in all): 127 fit in 256 KiB.
    [("tools10000", "MCP server many: 9873 of 10000 tools left out (past the limit of 256 KiB of schemas per "
                    "server)", 127),
     ("tools200", "MCP server many: 72 of 200 tools left out (past the limit of 128 tools per server)", 128)],
    ids=["bytes", "count"])
def test_a_server_with_too_many_tools_offers_what_fits_and_says_what_was_left_out(
        mode: str, line: str, kept: int, home: Path, model: FaultServer) -> None:
    result = _dsh(home, model, stdin="hello\n/mcp\n", tables=_table("many", mode))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        line, "[main turn 1] done", "MCP servers:", f"  many  ready with {kept} tools"]
    tools = model.requests[0].json["tools"]
    assert [tool["function"]["name"] for tool in tools if tool["function"]["name"].startswith("mcp__")] == [
        f"mcp__many__tool_{i:0{5 if mode == 'tools10000' else 3}d}" for i in range(kept)]
    [size] = _request_sizes(model.requests)
    assert size < 300 * 1024  # 256 KiB of MCP tools and dsh's own; 21 MB before the cap


# --- item 4: a message larger than a server may send ------------------------------------------------------


def test_a_result_over_the_message_limit_fails_that_call_and_the_server_answers_the_next(
        home: Path, model: FaultServer, tmp_path: Path) -> None:
    record = tmp_path / "fx.jsonl"
    model.push(_call("fx", "big"), _call("fx", "echo", '{"text": "after"}'), Behaviour("text", text="ok"))
    tables = _table("fx", "ok", "--big-bytes", str(30_000_000), "--record", str(record))
    result = _dsh(home, model, "-p", "read it", "--allow-mcp", tables=tables)
    assert (result.returncode, result.stdout) == (0, "ok\n")
    assert result.stderr.splitlines() == [
        "Call it.",
        "  [tool call] mcp__fx__big({})",
        "  [tool result] Error: the MCP server fx failed the call",
        f"    {PROTOCOL_LINE}",
        "Call it.",
        '  [tool call] mcp__fx__echo({"text": "after"})',
        "  [tool result] after",
    ]
    assert len(received(record, "initialize")) == 1  # the same server answered: its session survived


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"x", b"\n")), max_size=30),
       st.integers(min_value=1, max_value=20))
def test_the_line_reader_gives_each_line_within_the_limit_and_one_none_for_each_longer(
        chunks: list[bytes], limit: int) -> None:
    pieces = b"".join(chunks).split(b"\n")
    if not pieces[-1]:
        pieces.pop()  # a last piece is a line only when it holds something (no newline at the end)
    expected = [piece if len(piece) <= limit else None for piece in pieces]
    feed = iter([chunk for chunk in chunks if chunk])  # b"" is the end of the stream

    async def receive(size: int) -> bytes:
        return next(feed, b"")

    async def lines() -> list[bytes | None]:
        return [line async for line in read_lines(receive, limit)]

    assert anyio.run(lines) == expected


# --- item 5: a stray line on stdout --------------------------------------------------------------------------


def test_a_stray_stdout_line_is_skipped_counted_and_shown_by_why_masked_and_inert(
        home: Path, model: FaultServer) -> None:
    model.push(_call("g", "echo", '{"text": "still here"}'))
    tables = _table("g", "garbage-stdout", "--garbage", "before", env={"MCP_CANARY_TOKEN": CHILD_ENV})
    result = _dsh(home, model, "--allow-mcp", stdin="echo it\n/mcp\n/why\n", tables=tables)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "[main turn 1] Call it.",
        '  [tool call] mcp__g__echo({"text": "still here"})',
        "  [tool result] still here",
        "done",
        "MCP servers:",
        "  g  ready with 7 tools",
        "last failure (MCP):",
        "  dsh.agent_loop.mcp.diagnostics.McpStrayLines: MCP server g wrote a stdout line that is not JSON-RPC: "
        "skipped",
        "  the server's own words (host-side only, masked):",
        "    first stdout line that is not JSON-RPC: this is not JSON-RPC \\x1b[31m{oops ***",
        "    stdout lines skipped: 1",
    ]
    assert CHILD_ENV not in result.stdout


@pytest.mark.anyio
@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_over_http_a_result_over_the_message_limit_fails_that_call_and_the_server_stays(
        json_response: bool) -> None:
    seen: list[str] = []
    failures: list[BaseException] = []
    with HttpServer("ok", big_bytes=30_000_000, json_response=json_response) as server:
        manager = McpManager(parse_servers({"fx": {"url": server.url, "approve": "auto"}}), environ={}, mask=str,
                             notice=seen.append, on_failure=failures.append)
        async with manager:
            await manager.wait_ready()
            tools = {tool.name: tool for tool in manager.tools()}
            context = ToolContext(cwd=Path("."), turn=1, notify=lambda event: None)
            output = await tools["mcp__fx__big"].run({}, context)
            failed = f"Error: the MCP server fx failed the call\n{PROTOCOL_LINE}"
            assert (output.text, output.is_error) == (failed, True)
            assert [row.state for row in manager.status()] == ["ready"]
            assert (await tools["mcp__fx__echo"].run({"text": "after"}, context)).text == "after"
    assert seen == [] and [str(failure) for failure in failures] == [PROTOCOL_LINE]
