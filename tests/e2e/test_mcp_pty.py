"""MCP tools in a real terminal (issue 24 items 3 and 6): the inline approval of a tool that is not read-only
(server, tool, the whole arguments), and Ctrl-C during the fixture's slow tool: the turn is aborted, the call
cancelled (the server receives ``notifications/cancelled``), the server itself keeps running for the session's
next calls, and its whole process group is gone once dsh exits."""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.mcp_servers import read_record, received, stdio_command


def _config(root: Path, record: Path) -> None:
    argv = stdio_command("ok", "--record", str(record))
    (root / "config" / "dsh").mkdir(parents=True, exist_ok=True)
    (root / "config" / "dsh" / "config.toml").write_text(
        f"max_retries = 0\n[mcp_servers.fx]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n",
        encoding="utf-8")


def _call(tool: str, arguments: str) -> Behaviour:
    return Behaviour("tool_call", name=f"mcp__fx__{tool}", arguments=arguments, id=f"call_{tool}")


def _alive(pid: int, *, group: bool = False) -> bool:
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_mcp_approval_inline_then_ctrl_c_cancels_the_slow_call(home: Path, spawn) -> None:  # noqa: F811
    record = home / "fx.jsonl"
    _config(home, record)
    script = [_call("add", '{"a": 2, "b": 3}'), Behaviour("text", text="added\n"), _call("slow", "{}")]
    with FaultServer(script=script, default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("add two and three")
        question = '  [approve] MCP tool add (server fx): {"a": 2, "b": 3}  (y / n / a)'
        dsh.wait_screen(question)
        dsh.child.send("y")
        dsh.expect_exact(question + " yes\r\n")
        dsh.expect_exact("  [tool result] 5\r\n")
        dsh.expect_exact("added\r\n")
        dsh.prompt()
        dsh.send("now the slow one")
        dsh.expect_exact("  [approve] MCP tool slow (server fx): {}  (y / n / a)")
        dsh.child.send("a")
        dsh.expect_exact("(y / n / a) always\r\n")
        dsh._wait(lambda: record.exists() and any(e["event"] == "tool-started" for e in read_record(record)),
                  "the slow tool to start", 30)
        dsh.child.sendintr()
        dsh.expect_exact("[turn aborted] cancelled\r\n", timeout=20)
        dsh.prompt()
        dsh._wait(lambda: received(record, "notifications/cancelled"), "the server to hear the cancel", 20)
        dsh.send("/mcp")
        dsh.expect_exact("  fx  ready with 7 tools\r\n")  # the server carries on: only the call was cancelled
        [pid] = {e["pid"] for e in read_record(record) if e["event"] == "started"}
        assert _alive(pid) and os.getpgid(pid) == pid  # running, the leader of a process group of its own
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert not _alive(pid, group=True)  # reaped with its whole group before dsh exited
    assert [e["event"] for e in read_record(record) if e["event"] in ("tool-started", "cancelled")][-2:] == [
        "tool-started", "cancelled"]
