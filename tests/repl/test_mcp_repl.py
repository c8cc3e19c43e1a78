"""MCP servers in the front ends (issue 24 items 3-5): ``/why`` shows a server's own words masked, ``/mcp``,
``/mcp restart``, the approval question, ``-p`` with and without ``--allow-mcp``, ``dsh doctor``'s step per
server. Real dsh processes, real fixture servers (fixtures/mcp_servers.py) over stdio, exact lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.approvals import mcp_approval, mcp_arguments
from dsh.repl.sanitize import sanitize
from dsh.repl.styles import terminal_text
from fixtures.mcp_servers import read_record, received, stdio_command
from tests.canaries import CHILD_ENV, CHILD_STDERR

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-mcpReplTestKey000000000000000000"
PY = json.dumps(sys.executable)
# A server that dies at start, telling why on stderr with a secret from its own env and a canary of its words.
EXIT_CODE = (
    "import os, sys; sys.stderr.write('cannot start: token ' + os.environ['MCP_CANARY_TOKEN'] + "
    f"' {CHILD_STDERR}\\n'); sys.exit(3)"
)
BAD_LINE = "MCP server failure (server: bad; stage: initialize; category: process-exit; exit code: 3)"
DENIED = ("  [tool result] Error: this MCP tool needs approval and no one is available to approve it here "
          '(run dsh with --allow-mcp, or set approve = "auto" for the server)')


def _tables(record: Path) -> str:
    ok = stdio_command("ok", "--record", str(record))
    return f"""
[mcp_servers.bad]
command = {PY}
args = ["-c", {json.dumps(EXIT_CODE)}]
env = {{ MCP_CANARY_TOKEN = "{CHILD_ENV}" }}

[mcp_servers.fx]
command = {json.dumps(ok[0])}
args = {json.dumps(ok[1:])}

[mcp_servers.off]
command = "not-started"
enabled = false
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    yield tmp_path
    # The user's own config holds the canary on purpose (the server's env); the suite's leak scan is for
    # what dsh wrote.
    (tmp_path / "config" / "dsh" / "config.toml").unlink(missing_ok=True)


@pytest.fixture
def add_call() -> Iterator[FaultServer]:
    """The model calls fx's ``add`` (not read-only: it asks), then answers with text."""
    call = Behaviour("tool_call", name="mcp__fx__add", arguments='{"a": 2, "b": 3}')
    server = FaultServer(script=[call], default=Behaviour("text", text="done")).start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "", tables: str = "",
        launcher: tuple[str, ...] = ("-m", "dsh.repl")) -> subprocess.CompletedProcess[str]:
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + tables, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url}
    return subprocess.run([sys.executable, *launcher, *args], cwd=REPO, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_piped_why_shows_the_server_s_words_masked_and_mcp_lists_every_state(home: Path, add_call: FaultServer
                                                                           ) -> None:
    record = home / "fx.jsonl"
    result = dsh(home, add_call, stdin="hello\n/mcp\n/why\n/mcp restart nope\n/mcp restart\n/mcp restart off\n",
                 tables=_tables(record))
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines == [
        BAD_LINE,  # announced once, the closed line only
        "[main turn 1] Need the weather; call it.",
        '  [tool call] mcp__fx__add({"a": 2, "b": 3})',
        DENIED,  # piped: nobody at the keys
        "done",
        "MCP servers:",
        f"  bad  failed: {BAD_LINE}",
        "  fx   ready with 7 tools",
        "  off  disabled",
        "last failure (MCP):",
        f"  dsh.agent_loop.mcp.diagnostics.McpServerFailure: {BAD_LINE}",
        "  mcp.shared.exceptions.MCPError: Connection closed",
        "  the server's own words (host-side only, masked):",
        "    error: Connection closed",
        "    stderr (last 1 line):",
        f"      cannot start: token *** {CHILD_STDERR}",
        "no MCP server 'nope' (servers: bad, fx, off)",
        "usage: /mcp [restart NAME]",
        "MCP server off is disabled (enabled = false in [mcp_servers.off])",
    ]
    assert CHILD_ENV not in result.stdout
    assert result.stdout.index(CHILD_STDERR) > result.stdout.index("last failure")  # only /why shows the words
    assert _calls(record) == []  # denied: the server never got the call


def test_without_the_mcp_extra_the_servers_are_not_started_and_the_line_says_what_to_install(
        home: Path, add_call: FaultServer) -> None:
    # ``sys.modules["mcp"] = None`` makes the SDK unimportable, as in an install without the extra.
    without_sdk = ("-c", "import runpy, sys; sys.modules['mcp'] = None; "
                         "runpy.run_module('dsh.repl', run_name='__main__', alter_sys=True)")
    record = home / "fx.jsonl"
    result = dsh(home, add_call, stdin="/mcp\n/mcp restart fx\n", tables=_tables(record), launcher=without_sdk)
    assert (result.returncode, result.stderr) == (0, "")
    hint = "MCP servers need the mcp extra: pip install 'dsh-agent[mcp]'"
    assert result.stdout.splitlines() == [
        f"{hint} (not started: bad, fx)",
        "MCP servers:",
        f"  bad  failed: {hint}",
        f"  fx   failed: {hint}",
        "  off  disabled",
        hint,
    ]
    assert not record.exists()  # nothing was spawned


def _calls(record: Path) -> list[dict[str, object]]:
    return received(record, "tools/call") if record.exists() else []


def test_mcp_restart_starts_the_server_again(home: Path, add_call: FaultServer) -> None:
    record = home / "fx.jsonl"
    add_call.clear_script()  # plain answers: each turn waits for fx to be ready, and nothing asks
    # The first turn waits until the first fx is up (it has recorded its start), so the restart stops a server
    # that started, whatever the load; the second waits for the new one.
    result = dsh(home, add_call, stdin="hello\n/mcp restart fx\nhello\n/mcp\n", tables=_tables(record))
    assert result.returncode == 0, result.stderr
    assert "MCP server fx restarting (/mcp shows when it is ready)\n" in result.stdout
    assert "  fx   ready with 7 tools\n" in result.stdout  # the turn waited for it
    started = [event["pid"] for event in read_record(record) if event["event"] == "started"]
    assert len(set(started)) == 2  # a second process


def test_print_denies_mcp_tools_that_ask_unless_allow_mcp(home: Path, add_call: FaultServer) -> None:
    record = home / "fx.jsonl"
    denied = dsh(home, add_call, "-p", "add them", tables=_tables(record))
    assert (denied.returncode, denied.stdout) == (0, "done\n")
    assert denied.stderr.splitlines() == [
        BAD_LINE, "Need the weather; call it.", '  [tool call] mcp__fx__add({"a": 2, "b": 3})', DENIED,
    ]
    assert _calls(record) == []
    add_call.push(Behaviour("tool_call", name="mcp__fx__add", arguments='{"a": 2, "b": 3}'))
    allowed = dsh(home, add_call, "-p", "add them", "--allow-mcp", tables=_tables(record))
    assert (allowed.returncode, allowed.stdout) == (0, "done\n")
    assert allowed.stderr.splitlines()[-1] == "  [tool result] 5"
    assert [call["params"] for call in _calls(record)] == [{"name": "add", "arguments": {"a": 2, "b": 3}}]
    assert CHILD_ENV not in denied.stderr + allowed.stderr


def test_mcp_without_servers_and_in_help(home: Path, add_call: FaultServer) -> None:
    result = dsh(home, add_call, stdin="/mcp\n/mcp list\n/help\n")
    lines = result.stdout.splitlines()
    assert lines[:2] == ["no MCP servers configured ([mcp_servers.NAME] in config.toml; docs/mcp.md)",
                         "usage: /mcp [restart NAME]"]
    assert "  /mcp [restart NAME] list MCP servers and their state, or restart one" in lines


def test_doctor_has_a_step_per_server(home: Path, add_call: FaultServer) -> None:
    (home / "config" / "dsh" / "config.toml").write_text(_tables(home / "fx.jsonl"), encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": add_call.url}
    result = subprocess.run([sys.executable, "-m", "dsh.repl", "doctor"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    mcp = [line for line in result.stdout.splitlines() if "MCP server " in line and not line.startswith("doctor")]
    assert mcp == [
        f"✗ MCP server bad: {BAD_LINE}",
        "✓ MCP server fx: started, initialize answered, 7 tools listed",
        "– MCP server off: disabled (enabled = false)",
    ]
    assert result.stdout.splitlines()[-1] == "doctor: failed at MCP server bad"
    assert result.returncode == 1
    assert CHILD_ENV not in result.stdout + result.stderr and CHILD_STDERR not in result.stdout


# --- the approval question ---------------------------------------------------------------------------------


def test_the_approval_shows_server_tool_and_the_whole_arguments() -> None:
    approval = mcp_approval("fx", "add", {"a": 2, "b": "x\ty"})
    assert approval.question == '  [approve] MCP tool add (server fx): {"a": 2, "b": "x\\ty"}  (y / n / a) '
    assert (approval.must_view, approval.noun, approval.always) == (False, "arguments", True)
    long = mcp_approval("fx", "add", {"text": "z" * 3000})
    assert long.must_view
    head = "  [approve] MCP tool add (server fx): "
    assert long.question == head + "arguments are 1 line / 3012 chars — v to view  (v / n) "
    assert long.view == ("  [arguments] MCP tool add (server fx), 1 line / 3012 chars:\n"
                         f'      {{"text": "{"z" * 3000}"}}\n')
    assert long.viewed_question == head + "the arguments above (1 line / 3012 chars)  (y / n / a) "


def test_hostile_names_and_arguments_are_inert_on_the_way_out() -> None:
    approval = mcp_approval("fx", "evil\x1b[2J\x1b]0;pwned\x07", {"t": "bidi\u202egnp.exe\ud800"})
    shown = terminal_text(approval.question)
    assert "\x1b" not in shown and "\u202e" not in shown and "\ud800" not in shown and "\x07" not in shown
    assert shown == sanitize(approval.question)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20),
       st.integers(min_value=5, max_value=80), st.integers(min_value=20, max_value=200))
def test_the_arguments_are_never_cut(arguments: object, rows: int, cols: int) -> None:
    approval = mcp_approval("fx", "tool", {"v": arguments}, rows=rows, cols=cols)
    text = mcp_arguments({"v": arguments})
    shown = approval.view if approval.must_view else approval.question
    flat = shown.replace("\n      ", "")  # the whitespace rule may count blank runs; JSON has no raw newline
    assert text in flat or "\u2420" in flat or "\u2409" in flat
    assert terminal_text(shown) == sanitize(shown)
