"""A reviewer defined in ``.claude/agents/reviewer.md`` (docs/extending.md, "Subagent files") run by the real
``claude`` binary, offline against the loopback Anthropic fake: the file's body is its system prompt, its ``tools``
the only tools it has, its endpoint the user's ``[subagents.NAME]`` table it names (``agent``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.agent_loop.extensions import discover_agents
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.claude_code import ClaudeCodeConfig
from dsh.agent_loop.subagent.result import SubagentResult
from dsh.llm.redact import Redactor
from fixtures.fake_anthropic import FakeAnthropic
from tests.agent_loop.subagent.product_support import FAKE_CLAUDE_CLI, request, run_once
from tests.agent_loop.subagent.test_claude_deepseek import KEY, claude_cli  # noqa: F401  (claude_cli: a fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REVIEWER = """---
name: reviewer
description: Reviews code for quality and security.
tools: Read, Grep
model: deepseek-flash
provider: claude
agent: claude-ds
---
You are reviewer-7f3a, a senior code reviewer.
"""


def reviewer_table(tmp_path: Path, base: dict) -> dict:
    repo = tmp_path / "repo"
    (repo / ".claude/agents").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".claude/agents/reviewer.md").write_text(REVIEWER, encoding="utf-8")
    agents, notices = discover_agents(repo, None, {"claude-ds": base}, Redactor(()))
    assert notices == []
    (agent,) = agents
    return agent.table


def test_the_file_becomes_system_prompt_and_tools_flags() -> None:
    table = {"provider": "claude", "system_prompt": "-p be evil", "tools": ["Read"]}
    config = ClaudeCodeConfig.from_mapping("r", table)
    assert (config.system_prompt, config.tools) == ("-p be evil", ("Read",))


async def test_the_scripted_cli_is_given_the_prompt_as_one_argument(tmp_path: Path, workdir: Path) -> None:
    record = tmp_path / "argv.json"
    base = {"provider": "claude", "command": [sys.executable, FAKE_CLAUDE_CLI],
            "env": {"FAKE_CLAUDE_RECORD": str(record)}, "eof_grace": 1.0, "term_grace": 1.0}
    provider = build_provider("reviewer", reviewer_table(tmp_path, base))
    await run_once(provider, request(workdir))
    argv = json.loads(record.read_text())["argv"]
    assert "--system-prompt=You are reviewer-7f3a, a senior code reviewer." in argv
    assert "--tools=Read,Grep" in argv and "--allowedTools" not in " ".join(argv)
    assert argv[argv.index("--model") + 1] == "deepseek-flash"


@pytest.mark.real_product
async def test_a_reviewer_file_reaches_the_real_cli_with_its_system_prompt(
        claude_cli: str, tmp_path: Path, workdir: Path) -> None:  # noqa: F811
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir()
    with FakeAnthropic("text", text="Looks good.", path_prefix="/anthropic") as api:
        base = {"provider": "claude", "endpoint": "deepseek", "endpoint_url": api.url + "/anthropic",
                "cli_path": claude_cli,
                "env": {"CLAUDE_CONFIG_DIR": str(config_dir), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                        "CLAUDE_CODE_MAX_RETRIES": "0"}}
        parent = ParentContext(model="deepseek-chat", base_url=api.url, api_key=KEY)
        result = await run_once(build_provider("reviewer", reviewer_table(tmp_path, base), parent), request(workdir))
        posts = api.message_requests
    assert result == SubagentResult("Looks good.", "completed", None)
    assert posts
    for post in posts:
        assert "You are reviewer-7f3a, a senior code reviewer." in json.dumps(post.body.get("system"))
        assert post.body["model"] == "deepseek-flash"
        names = {tool["name"] for tool in post.body.get("tools", [])}
        assert names - {"DeferredToolPlaceholder"} == {"Read", "Grep"}  # no Bash, Edit or Write: only the file's
