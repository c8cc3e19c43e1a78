"""The first prompt is drawn with only what it needs: no shell, no session, no HTTP client, no agent, no session log,
no anyio backend; and the banner and ``> `` before that, without prompt_toolkit, asyncio or the session
(dsh.repl.first_prompt).

dsh runs in a real pty under a small wrapper that records ``sys.modules`` when start-up draws the banner and
prompt, when prompt_toolkit first draws the prompt over it, and again when the process exits (by then the agent
has been built behind the prompt, so the check cannot pass by accident). This pins the import set loosely, not
a time.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
import pytest

from dsh.llm.loopback.fault_server import closed_port
from fixtures.mcp_servers import stdio_command

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-firstPromptKey0000000000000000"

# Recorded when start-up draws the banner and prompt (dsh.repl.first_prompt), at prompt_toolkit's first draw of
# the prompt over it (not its final "done" redraw), and at exit. prompt_toolkit is patched only after the early
# draw, so that the wrapper itself imports nothing before it.
WRAPPER = """
import atexit, json, sys

out = sys.argv.pop(1)
seen = {}
def record(when):
    if when not in seen:
        seen[when] = sorted(sys.modules)
        with open(out, "w") as handle:
            json.dump(seen, handle)

def patch_prompt_toolkit():
    from prompt_toolkit.application import Application
    draw = Application._redraw
    def redraw(self, render_as_done=False):
        draw(self, render_as_done)
        if not render_as_done:
            record("first_prompt")
    Application._redraw = redraw

from dsh.repl.first_prompt import FirstPrompt
early_draw = FirstPrompt.draw
def draw(self):
    drawn = early_draw(self)
    record("early_prompt")
    patch_prompt_toolkit()
    return drawn
FirstPrompt.draw = draw
atexit.register(record, "exit")
sys.argv[0] = "dsh"
from dsh.repl.cli import main
main()
"""

# Not needed to draw the banner and the prompt: prompt_toolkit and its loop, the renderer, the session.
NOT_BEFORE_THE_EARLY_PROMPT = {
    "prompt_toolkit",
    "asyncio",
    "anyio",
    "dsh.repl.app",
    "dsh.repl.activity",
    "dsh.repl.approvals",
    "dsh.repl.renderer",
    "dsh.repl.styles",
    "dsh.repl.shell",
    "dsh.agent_loop.events",
    "dsh.agent_loop.session",
}

# prompt_toolkit takes the keys before the shell is open: the session, its event vocabulary, the renderer and the
# commands are imported behind the prompt too (docs/performance.md, "A live prompt sooner").
NOT_BEFORE_THE_LIVE_PROMPT = {
    "dsh.repl.shell",
    "dsh.repl.commands",
    "dsh.repl.renderer",
    "dsh.repl.prompt_parts",
    "dsh.agent_loop.session",
    "dsh.agent_loop.events",
    # prompt_toolkit uses only wcwidth's wcwidth(); from 0.3 on the package imports its text wrapping, line breaking
    # and grapheme tables with it, ~40 ms (pyproject.toml holds it below 0.3; docs/performance.md).
    "wcwidth.textwrap",
}

# Only needed once a turn runs (or for a config file, of which there is none here).
NOT_BEFORE_THE_PROMPT = {
    "httpx",
    "httpcore",
    "tomllib",
    "anyio._backends._asyncio",
    "dsh.llm.deepseek",
    "dsh.agent_loop.agent",
    "dsh.agent_loop.tools",
    "dsh.agent_loop.guard",
    "dsh.agent_loop.subagent",
    "dsh.agent_loop.session_log",
}


def _modules_seen(tmp_path: Path, config: str | None = None) -> tuple[set[str], set[str], set[str]]:
    """The modules loaded at the early draw of the prompt, at prompt_toolkit's first draw, and at exit (after
    Ctrl-D at that prompt)."""
    record = tmp_path / "modules.json"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "LANG": "C.UTF-8",
        "DEEPSEEK_API_KEY": KEY,
    }
    if config is not None:
        (tmp_path / "config" / "dsh").mkdir(parents=True)
        (tmp_path / "config" / "dsh" / "config.toml").write_text(config, encoding="utf-8")
    with closed_port() as port:
        env["DEEPSEEK_BASE_URL"] = f"http://127.0.0.1:{port}"
        child = pexpect.spawn(
            sys.executable, ["-c", WRAPPER, str(record)], env=env, cwd=str(REPO), timeout=20, dimensions=(24, 120)
        )
        try:
            child.expect_exact("Ctrl-D exits")
            child.expect_exact(">")
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert child.exitstatus == 0, child.before
    seen = json.loads(record.read_text())
    return set(seen["early_prompt"]), set(seen["first_prompt"]), set(seen["exit"])


@pytest.mark.timeout(60)
def test_the_first_prompt_is_drawn_before_the_client_and_the_agent_are_imported(tmp_path: Path) -> None:
    early, first, last = _modules_seen(tmp_path)

    assert "dsh.repl.first_prompt" in early and "dsh.repl.config" in early
    assert not (NOT_BEFORE_THE_EARLY_PROMPT | NOT_BEFORE_THE_PROMPT) & early, sorted(
        (NOT_BEFORE_THE_EARLY_PROMPT | NOT_BEFORE_THE_PROMPT) & early)
    assert "prompt_toolkit.shortcuts.prompt" in first and "dsh.repl.app" in first
    assert not (NOT_BEFORE_THE_LIVE_PROMPT | NOT_BEFORE_THE_PROMPT) & first, sorted(
        (NOT_BEFORE_THE_LIVE_PROMPT | NOT_BEFORE_THE_PROMPT) & first)
    # Behind the prompt the shell was opened, the agent built and anyio's backend loaded; the HTTP client waits for a
    # request.
    behind = {"dsh.repl.shell", "dsh.agent_loop.agent", "dsh.agent_loop.session_log", "dsh.llm.deepseek",
              "anyio._backends._asyncio"}
    assert behind <= last, sorted(behind - last)
    assert "httpx" not in last


@pytest.mark.timeout(60)
def test_configured_mcp_servers_start_behind_the_first_prompt(tmp_path: Path) -> None:
    """The config file's check reads the tables (dsh.agent_loop.mcp.config); the manager, its tools and the
    SDK wait until the prompt is drawn (docs/mcp.md, bench: mcp_first_prompt_ms)."""
    command = json.dumps(stdio_command("ok"))  # a JSON array of strings is a TOML array
    config = "".join(f"[mcp_servers.s{i}]\ncommand = {command}\ncwd = {json.dumps(str(REPO))}\n\n" for i in range(3))
    early, first, last = _modules_seen(tmp_path, config)

    assert "dsh.agent_loop.mcp.config" in first
    later = {"dsh.agent_loop.mcp.manager", "dsh.agent_loop.mcp.tools", "dsh.agent_loop.build"}
    assert not (NOT_BEFORE_THE_PROMPT - {"tomllib"} | later | {"mcp"}) & first
    assert not NOT_BEFORE_THE_EARLY_PROMPT & early, sorted(NOT_BEFORE_THE_EARLY_PROMPT & early)
    assert later <= last, sorted(later - last)
