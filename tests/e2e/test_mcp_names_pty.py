"""An MCP "always" in a real terminal (issue 35 §3): it holds for the server's own tool it was given to, not
for dsh's name of it, which a re-listing may give another tool of the server (fixtures/mcp_servers.py,
mode relist-clash: the re-listing's "look!" gets the name its first tool had)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.agent_loop.mcp.tools import tool_names
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.mcp_servers import CLASH_OTHER, CLASH_SAFE, received, stdio_command


def test_always_covers_the_tool_it_was_given_to_not_the_one_that_takes_its_name(home: Path, spawn) -> None:  # noqa: F811
    record = home / "s.jsonl"
    argv = stdio_command("relist-clash", "--record", str(record))
    (home / "config" / "dsh").mkdir(parents=True, exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text(
        f"max_retries = 0\n[mcp_servers.s]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n",
        encoding="utf-8")
    [name] = tool_names("s", [CLASH_SAFE], set())
    assert tool_names("s", [CLASH_OTHER], set()) == [name]  # the clash the fixture is built on
    call = Behaviour("tool_call", name=name, arguments="{}", id="call_look")
    script = [call, Behaviour("text", text="looked\n"), call]
    with FaultServer(script=script, default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("look")
        question = f"  [approve] MCP tool {CLASH_SAFE} (server s): {{}}  (y / n / a)"
        dsh.wait_screen(question)
        dsh.child.send("a")
        dsh.expect_exact(question + " always\r\n")
        dsh.expect_exact(f"  [tool result] ran {CLASH_SAFE}\r\n")
        dsh.prompt()
        # The call made the server re-list ("look!" and "extra"): wait until dsh has the new listing.
        while True:
            dsh.send("/mcp")
            if dsh.expect(re.compile(r"  s  ready with (\d) tools?\r\n")).group(1) == "2":
                break
            dsh.prompt()
        dsh.prompt()
        dsh.send("look again")
        other = f"  [approve] MCP tool {CLASH_OTHER} (server s): {{}}  (y / n / a)"
        dsh.wait_screen(other)  # asked: the "always" was for the other tool
        dsh.child.send("n")
        dsh.expect_exact(other + " no\r\n")
        dsh.expect_exact("  [tool result] Error: the user denied this MCP tool call\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert [call["params"]["name"] for call in received(record, "tools/call")] == [CLASH_SAFE]
