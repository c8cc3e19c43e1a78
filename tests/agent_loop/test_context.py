"""The project context: the built-in prompt, the environment block and AGENTS.md, read from real files and git."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dsh.agent_loop.context import (
    BASE_SYSTEM_PROMPT,
    INSTRUCTIONS_CAP_BYTES,
    SYSTEM_PROMPT_VERSION,
    gather_project_context,
)
from tests.real_parts import missing

pytestmark = pytest.mark.anyio

NOW = dt.datetime(2026, 12, 3, 9, 30, tzinfo=dt.UTC)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        missing("git", "apt-get install git")
    root = tmp_path / "project"
    (root / "src" / "pkg").mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    for argv in (["git", "init", "-q", "-b", "feature-x"], ["git", "-c", "user.email=a@b", "-c", "user.name=a",
                                                           "commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(argv, cwd=root, check=True, env=env)
    return root


async def test_the_environment_block_names_the_directory_shell_date_and_git_state(repo: Path) -> None:
    cwd = repo / "src" / "pkg"
    context = await gather_project_context(cwd, env={"SHELL": "/bin/zsh"}, user_dir=None, now=NOW)
    prompt = context.system_prompt()
    assert prompt.startswith(BASE_SYSTEM_PROMPT)
    assert context.sources[0].label == f"system prompt (built-in v{SYSTEM_PROMPT_VERSION})"
    assert f"- working directory: {cwd}" in prompt
    assert "- shell: /bin/zsh" in prompt and "- date: 2026-12-03" in prompt
    assert f"- git: repository root {repo}, branch feature-x, clean" in prompt
    (repo / "new.txt").write_text("x")
    changed = await gather_project_context(cwd, env={}, user_dir=None, now=NOW)
    assert f"- git: repository root {repo}, branch feature-x, has uncommitted changes" in changed.system_prompt()


async def test_agents_files_come_from_the_user_then_the_root_down_to_the_working_directory(
    repo: Path, tmp_path: Path
) -> None:
    user_dir = tmp_path / "config" / "dsh"
    user_dir.mkdir(parents=True)
    (user_dir / "AGENTS.md").write_text("Prefer tabs.\n")
    (repo / "AGENTS.md").write_text("Run make test before committing.\n")
    (repo / "src" / "AGENTS.md").write_bytes(b"Sources use \xff type hints.\n")  # not UTF-8: replaced
    (tmp_path / "AGENTS.md").write_text("above the repository: never read\n")
    context = await gather_project_context(repo / "src" / "pkg", env={}, user_dir=user_dir, now=NOW)
    agents = [source for source in context.sources if source.kind == "AGENTS.md"]
    expected = [user_dir / "AGENTS.md", repo / "AGENTS.md", repo / "src" / "AGENTS.md"]
    assert [source.path for source in agents] == expected
    prompt = context.system_prompt()
    assert prompt.index("Prefer tabs.") < prompt.index("Run make test") < prompt.index("Sources use \ufffd type")
    assert f"# Instructions from {repo / 'AGENTS.md'}" in prompt
    assert "never read" not in prompt and context.notices == ()


async def test_instructions_over_the_cap_are_cut_with_one_notice(repo: Path) -> None:
    (repo / "AGENTS.md").write_text("é" * INSTRUCTIONS_CAP_BYTES)  # two bytes each: twice the cap
    context = await gather_project_context(repo, env={}, user_dir=None, now=NOW)
    [source] = [source for source in context.sources if source.kind == "AGENTS.md"]
    assert source.truncated and len(source.text.encode()) < INSTRUCTIONS_CAP_BYTES + 200
    assert context.notices == (f"{repo / 'AGENTS.md'} cut to 32 KiB: project instructions are capped at 32 KiB",)


async def test_a_fifo_or_a_symlink_to_a_device_named_agents_md_is_skipped_without_blocking(repo: Path) -> None:
    os.mkfifo(repo / "AGENTS.md")  # nobody writes it: an open() that blocks would hang this test
    (repo / "src" / "AGENTS.md").symlink_to("/dev/zero")
    context = await gather_project_context(repo / "src", env={}, user_dir=None, now=NOW)
    assert [source.kind for source in context.sources] == ["system prompt", "environment"]


async def test_a_hostile_repository_cannot_run_its_fsmonitor(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "monitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "config", "core.fsmonitor", str(hook)], cwd=repo, check=True)
    context = await gather_project_context(repo, env={}, user_dir=None, now=NOW)
    assert context.git is not None and context.git.changes is False
    assert not marker.exists()


async def test_config_replaces_or_extends_the_built_in_prompt(tmp_path: Path) -> None:
    context = await gather_project_context(tmp_path, env={}, user_dir=None, replace="Be terse.",
                                           append="Answer in French.", now=NOW)
    prompt = context.system_prompt()
    assert prompt.startswith("Be terse.\n\n# Environment") and prompt.endswith("Answer in French.")
    assert BASE_SYSTEM_PROMPT not in prompt and "- git: not a git repository" in prompt
