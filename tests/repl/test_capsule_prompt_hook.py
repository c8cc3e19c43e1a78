"""A capsule shows ``prompt_hook`` by its shape, never its words (docs/reporting.md, "What a capsule holds").

A hook's arguments (or its shell command line) are where a user puts a token for the checking service: the
real ``dsh -p … --report`` writes the capsule of a failed turn, and neither a canary secret (not configured
as one, not key-shaped) nor a key shape may be in it. The config file that holds them is removed after dsh
ran, so the suite-end canary scan covers everything else dsh wrote too (its session log, dsh.log).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import closed_port
from tests import canaries
from tests.repl.test_cli import dsh, write_config

AWS_SHAPE = "AKIAABCDEFGHIJKLMNOP"  # a key shape: masked anywhere, whatever its source
ARGV = ["/bin/true", "--password", canaries.CHILD_ENV, f"--aws={AWS_SHAPE}"]
COMMAND = f"/bin/true --password={canaries.CHILD_ENV} --aws={AWS_SHAPE}"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for name in ("state", "config", "cache"):
        (tmp_path / name).mkdir()
    return tmp_path


@pytest.mark.parametrize(("hook", "shown"), [
    pytest.param(ARGV, {"program": "/bin/true", "arguments": 3}, id="argv"),
    pytest.param(COMMAND, {"chars": len(COMMAND)}, id="shell-command"),
])
def test_the_capsule_shows_prompt_hook_by_its_shape_and_never_its_arguments(home: Path, hook: object,
                                                                              shown: dict) -> None:
    write_config(home, f"max_retries = 0\nprompt_hook = {json.dumps(hook)}\n")
    capsule = home / "capsule.jsonl"
    try:
        with closed_port() as port:
            result = dsh(home, "-p", "hello", "--report", str(capsule), timeout=90,
                         DEEPSEEK_API_KEY=canaries.API_KEY, DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}")
    finally:
        (home / "config" / "dsh" / "config.toml").unlink()  # the user's own file: the scan covers the rest
    assert result.returncode == 1, result.stderr  # the hook let the prompt through; the closed port failed it
    assert result.stderr.endswith(f"dsh: report written to {capsule}\n")
    text = capsule.read_text(encoding="utf-8")
    assert canaries.CHILD_ENV not in text and AWS_SHAPE not in text and "--password" not in text
    report = next(record for record in map(json.loads, text.splitlines()) if record["type"] == "report")
    assert report["settings"]["prompt_hook"]["value"] == shown
    assert report["settings"]["prompt_hook"]["source"].startswith("prompt_hook in ")
