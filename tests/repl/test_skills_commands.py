"""Skills and custom slash commands (docs/extending.md) in a real repository laid out for Claude Code, through the
shell, against the loopback fault server: the exact lines, what the model is sent, what is left out."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.config import Config
from dsh.repl.shell import Shell
from tests.repl.test_shell_commands import KEY, ListFrontEnd, ListSink

pytestmark = pytest.mark.anyio

REVIEW = """---
description: Review a pull request
argument-hint: "[pr-number] [focus]"
---
Review pull request $1, focusing on $2. Everything typed: $ARGUMENTS.
"""
PDF = """---
name: pdf
description: >
  Extract text and tables from PDF files.
  Use when the user mentions a PDF.
---
# PDF

Run scripts/extract.py on the file.
"""


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default="text", models=None).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    write(root / ".claude/commands/review.md", REVIEW)
    write(root / ".claude/skills/pdf/SKILL.md", PDF)
    write(root / ".agents/skills/changelog/SKILL.md",
          "---\nname: changelog\ndescription: 'Write the changelog entry for a change'\n---\nKeep a Changelog style.\n")
    monkeypatch.chdir(root)
    return root


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


async def make_shell(tmp_path: Path, server: FaultServer) -> tuple[Shell, ListSink]:
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PATH": os.environ["PATH"]}
    sink = ListSink()
    shell = Shell(Config(api_key=KEY, base_url=server.url, max_retries=0), ListFrontEnd(sink), color=False, env=env)
    await shell.start()
    return shell, sink


def system_prompt(body: dict) -> str:
    return body["messages"][0]["content"]


async def test_the_skill_tool_returns_the_body_and_the_skills_block_never_changes(
        tmp_path: Path, repo: Path, server: FaultServer) -> None:
    server.push(Behaviour("tool_call", name="skill", arguments='{"name": "pdf"}'), "text", "text")
    shell, sink = await make_shell(tmp_path, server)
    try:
        await shell.handle_line("read report.pdf")
        await shell.handle_line("and again")
    finally:
        await shell.aclose()
    first, after_tool, later = (request.json for request in server.requests)
    block = ("# Skills\n\nEach skill below is a set of instructions for one kind of task. When a task matches a "
             "skill's description, call the skill tool with the skill's name to read its instructions before you "
             "start.\n\n- changelog: Write the changelog entry for a change\n"
             "- pdf: Extract text and tables from PDF files. Use when the user mentions a PDF.")
    assert block in system_prompt(first)
    assert system_prompt(first) == system_prompt(after_tool) == system_prompt(later)  # byte for byte
    assert "skill" in [tool["function"]["name"] for tool in first["tools"]]
    tool_message = next(m for m in after_tool["messages"] if m["role"] == "tool")
    assert tool_message["content"] == (f"# Skill pdf (its folder: {repo / '.claude/skills/pdf'})\n\n"
                                       "# PDF\n\nRun scripts/extract.py on the file.")
    assert "[context]" not in sink.text


async def test_a_custom_command_sends_its_body_with_the_arguments(
        tmp_path: Path, repo: Path, server: FaultServer) -> None:
    shell, sink = await make_shell(tmp_path, server)
    try:
        await shell.handle_line("/review 42 tests $1")
        await shell.handle_line("/help")
    finally:
        await shell.aclose()
    prompt = [m for m in server.requests[0].json["messages"] if m["role"] == "user"][-1]["content"]
    assert prompt == "Review pull request 42, focusing on tests. Everything typed: 42 tests $1."
    assert "  /review [pr-number] [focus] Review a pull request\n" in sink.text
    assert "custom commands (docs/extending.md):\n" in sink.text


async def test_skill_command_sends_the_instructions_and_context_shows_each_skill(
        tmp_path: Path, repo: Path, server: FaultServer) -> None:
    shell, sink = await make_shell(tmp_path, server)
    try:
        await shell.handle_line("/skill pdf report.pdf please")
        await shell.handle_line("/skill pfd")
        await shell.handle_line("/context")
    finally:
        await shell.aclose()
    prompt = [m for m in server.requests[0].json["messages"] if m["role"] == "user"][-1]["content"]
    assert prompt.endswith("Run scripts/extract.py on the file.\n\nreport.pdf please")
    lines = sink.text.splitlines()
    assert "skill pdf: its instructions (≈42 tokens) are sent with this prompt" in lines
    assert "no skill 'pfd': did you mean pdf? (/skill lists them)" in lines
    assert "skills (each one's line is in every request; its instructions only when used):" in lines
    assert "  pdf        ≈ 20 in the prompt, ≈ 11 when used" in lines


async def test_hostile_and_clashing_files_each_get_one_line(
        tmp_path: Path, repo: Path, server: FaultServer) -> None:
    commands = repo / ".claude/commands"
    write(commands / "help.md", "shadow the built-in\n")
    write(repo / ".dsh/commands/review.md", "---\ndescription: the project's own\n---\nmine: $ARGUMENTS\n")
    write(commands / "broken.md", "---\ndescription: [unclosed\n---\nbody\n")
    write(commands / "binary.md", b"\x7fELF\x00\x01")
    (commands / "leak.md").symlink_to("/etc/passwd")
    os.mkfifo(commands / "fifo.md")
    with open(commands / "huge.md", "wb") as huge:
        huge.truncate(1 << 30)  # sparse: a gigabyte on the file's word, nothing on disk
    write(commands / "ansi.md", "---\ndescription: \"red \\u001b[31m\\ud800 text\\nnext\"\n---\nhi\n")
    write(repo / ".claude/skills/nodesc/SKILL.md", "---\nname: nodesc\n---\nbody\n")
    shell, sink = await make_shell(tmp_path, server)
    try:
        await shell.handle_line("/review x")
        await shell.handle_line("/help")
    finally:
        await shell.aclose()
    lines = sink.text.splitlines()
    c = commands
    for line in (
        f"[context] {repo / '.claude/skills/nodesc/SKILL.md'} left out: its front matter has no description",
        f"[context] {c / 'binary.md'} left out: it is binary (it holds a NUL byte)",
        f"[context] {c / 'broken.md'} left out: its front matter is not valid (line 2: a '[' list that does not "
        "end on its line)",
        f"[context] {c / 'fifo.md'} left out: it is a FIFO, not a regular file",
        f"[context] {c / 'huge.md'} left out: it is 1.0 GiB, over the 64 KiB cap",
        f"[context] {c / 'leak.md'} left out: it is a symlink to a path outside the repository",
        f"[context] {c / 'review.md'} skipped: /review is read from {repo / '.dsh/commands/review.md'}",
        f"[context] {c / 'help.md'} skipped: /help is a built-in command",
        "  /ansi              red [31m\ufffd text next",  # ESC a space, the lone surrogate U+FFFD
    ):
        assert line in lines, line
    assert "\x1b" not in sink.text
    prompt = [m for m in server.requests[0].json["messages"] if m["role"] == "user"][-1]["content"]
    assert prompt == "mine: x"
    assert json.dumps(server.requests[0].json).count("root:") == 0  # /etc/passwd was never read


async def test_without_skills_no_tool_and_no_block(tmp_path: Path, server: FaultServer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shell, sink = await make_shell(tmp_path, server)
    try:
        await shell.handle_line("hi")
        await shell.handle_line("/skill")
    finally:
        await shell.aclose()
    body = server.requests[0].json
    assert "skill" not in [tool["function"]["name"] for tool in body["tools"]]
    assert "# Skills" not in system_prompt(body)
    assert "no skills (folders: .agents/skills/, .claude/skills/, ~/.config/dsh/skills/; docs/extending.md)" in (
        sink.text.splitlines())
