"""``dsh doctor`` says when the ``dsh`` that PATH finds first is another program (DeepSeek's own harness installs
one named so, npm's @deepseek-ai/dsh), and how to run this one: ``dsh-agent`` (docs/doctor.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dsh.repl.config import load_config
from dsh.repl.doctor_environment import EnvironmentChecks

pytestmark = pytest.mark.anyio


class _NotATerminal:
    def isatty(self) -> bool:
        return False


async def _environment_line(tmp_path: Path, path: str) -> str:
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "dumb", "PATH": path}
    config = load_config({"base_url": "http://127.0.0.1:9"}, env, require_key=False)
    step = await EnvironmentChecks(config, env, stdout=_NotATerminal(), clock=lambda: 0.0).environment()
    return step.lines()[0]


async def test_another_dsh_first_on_path_is_named(tmp_path: Path) -> None:
    other = tmp_path / "node-bin"
    other.mkdir()
    (other / "dsh").write_text("#!/usr/bin/env node\nrequire('@deepseek-ai/dsh')\n")
    (other / "dsh").chmod(0o755)
    ours = Path(sys.executable).parent  # the venv's bin: pip's `dsh` launcher is there
    line = await _environment_line(tmp_path, f"{other}:{ours}")
    assert f"; dsh on PATH is another program ({other}/dsh): run this one as dsh-agent;" in line
    assert "another program" not in await _environment_line(tmp_path, f"{ours}:{other}")
    assert "dsh on PATH" not in await _environment_line(tmp_path, str(tmp_path / "nowhere"))
