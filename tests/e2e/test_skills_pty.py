"""Skills and custom commands in a real terminal (docs/extending.md): a repository laid out for Claude Code, the
completion menu offering a custom command with its description, and ``/skill`` listing and sending a skill."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer


def claude_repository(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".claude/commands").mkdir(parents=True)
    (root / ".claude/commands/review-pr.md").write_text(
        "---\ndescription: Review one pull request\nargument-hint: \"[number]\"\n---\nReview pull request $1.\n",
        encoding="utf-8")
    (root / ".claude/skills/pdf").mkdir(parents=True)
    (root / ".claude/skills/pdf/SKILL.md").write_text(
        "---\nname: pdf\ndescription: Extract text from PDF files\n---\nUse pdftotext.\n", encoding="utf-8")
    return root


def test_completion_offers_a_custom_command_and_skill_sends_a_skill(home: Path, spawn) -> None:  # noqa: F811
    work = claude_repository(home / "work")
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.child.send("/revi")
        dsh.wait_screen("Review one pull request")  # the menu, with the file's description
        dsh.child.send("\t")
        dsh.wait_screen("> /review-pr")
        dsh.child.send(" 7\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.send("/skill")
        dsh.expect_exact("skills (/skill NAME [request] sends one's instructions):\r\n")
        dsh.expect_exact("  pdf  Extract text from PDF files\r\n")
        dsh.prompt()
        dsh.send("/skill pdf summarize a.pdf")
        dsh.expect_exact("skill pdf: its instructions (≈")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    prompts = [[m["content"] for m in r.json["messages"] if m["role"] == "user"][-1] for r in server.requests]
    assert prompts[0] == "Review pull request 7."
    assert prompts[1].endswith("Use pdftotext.\n\nsummarize a.pdf")


def test_hooks_lists_a_claude_settings_hook_and_it_refuses_in_a_terminal(home: Path, spawn) -> None:  # noqa: F811
    """``/hooks`` in a real terminal, then a PreToolUse hook from .claude/settings.json refusing the model's call."""
    work = claude_repository(home / "work")
    check = work / "check.sh"
    check.write_text("#!/bin/sh\ncat >/dev/null\necho 'not in this repository' >&2\nexit 2\n", encoding="utf-8")
    check.chmod(0o755)
    (work / ".claude/settings.json").write_text(
        '{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "' + str(check)
        + '", "timeout": 5}]}]}}', encoding="utf-8")
    config = home / "config" / "dsh" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("claude_settings = true\n", encoding="utf-8")
    call = Behaviour("tool_call", name="run_shell", arguments='{"command": "touch made"}', reasoning="")
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        server.push(call)
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url,
                    XDG_CONFIG_HOME=str(home / "config"))
        dsh.prompt()
        dsh.send("/hooks")
        dsh.expect_exact("PreToolUse  matcher: Bash  hook: check.sh  timeout: 5s  (.claude/settings.json)\r\n")
        dsh.prompt()
        dsh.send("make a file")
        dsh.expect_exact("  [tool result] Error: not in this repository\r\n")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert not (work / "made").exists()
