"""``!command`` in a real terminal (docs/prompt.md, "Running a command: !"): the output and its status line, the next
prompt prefilled with ``@!`` that sends it (the request body holds it), ``!!``, and Ctrl-C killing a command that
would never end, the prompt usable after."""

from __future__ import annotations

import time
from pathlib import Path

from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer


def _user_prompts(server: FaultServer) -> list[str]:
    return [[m["content"] for m in r.json["messages"] if m["role"] == "user"][-1] for r in server.requests
            if r.path.endswith("/chat/completions")]


def test_bang_shows_the_output_and_the_prefilled_marker_sends_it(home: Path, spawn) -> None:  # noqa: F811
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("!echo hello")
        dsh.expect_exact("hello\r\n[exit code: 0]\r\n@! in your next prompt sends this output with it\r\n")
        dsh.wait_screen("> @!")
        dsh.send("explain")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.send("!!")
        dsh.expect_exact("hello\r\n[exit code: 0]\r\n")
        dsh.wait_screen("> @!")
        dsh.send("!sleep 60")  # the prefilled marker before a command is dropped
        time.sleep(1.0)
        dsh.child.send("\x03")
        dsh.expect_exact("[cancelled; the command was killed]")
        dsh.prompt()
        dsh.send("again")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert _user_prompts(server) == ["@! explain\n\n!echo hello (1 line of output, exit code: 0):\n```\nhello\n```",
                                     "again"]  # a cancelled run offers nothing
