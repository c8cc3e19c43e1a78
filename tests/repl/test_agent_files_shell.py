"""Subagents defined in files (docs/extending.md, "Subagent files") through the shell, in a real repository laid out
for Claude Code: a ``.dsh/agents/helper.md`` child dsh run for real against the loopback fault server, with its body
as its system prompt; the lines the user sees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.repl.test_skills_commands import make_shell, server, write  # noqa: F401  (server: a fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REVIEWER = "---\nname: reviewer\ndescription: Reviews code\ntools: Read, Grep\nprovider: claude\n---\nReview.\n"
HELPER = "---\ndescription: Answers questions about this repository\ntools: [read_file]\n---\nYou are the helper.\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    write(root / ".claude/agents/reviewer.md", REVIEWER)
    write(root / ".dsh/agents/helper.md", HELPER)
    monkeypatch.chdir(root)
    return root


async def test_a_helper_file_runs_a_child_dsh_with_its_system_prompt(
        tmp_path: Path, repo: Path, server: FaultServer) -> None:  # noqa: F811
    delegate = json.dumps({"description": "ask", "prompt": "What is here?", "provider": "helper"})
    server.push(Behaviour("tool_call", name="subagent", arguments=delegate),
                Behaviour("text", text="Only a README."), Behaviour("text", text="done"))
    shell, sink = await make_shell(tmp_path, server)
    try:
        await shell.handle_line("ask the helper")
    finally:
        await shell.aclose()
    parent, child, after = (request.json for request in server.requests)
    (tool,) = [tool for tool in parent["tools"] if tool["function"]["name"] == "subagent"]
    assert tool["function"]["description"].endswith(
        "Subagents: helper, reviewer. What each is for:\n- helper: Answers questions about this repository\n"
        "- reviewer: Reviews code")
    assert child["messages"][0] == {"role": "system", "content": "You are the helper."}
    assert child["messages"][1] == {"role": "user", "content": "What is here?"}
    assert [m["content"] for m in after["messages"] if m["role"] == "tool"] == ["Only a README."]
    helper = repo / ".dsh/agents/helper.md"
    assert f"[context] {helper}: its tools are ignored: a child dsh has no tool allowlist (docs/extending.md)\n" \
        in sink.text
