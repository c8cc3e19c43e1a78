"""``dsh doctor`` runs each hook once on a sample payload (docs/hooks.md): one line a hook, whether it answered and
where it is configured, or its closed failure line; never the hook's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import FaultServer
from dsh.repl.config import load_config
from dsh.repl.doctor import Doctor

pytestmark = pytest.mark.anyio

GOOD = "#!/bin/sh\ncat >/dev/null\necho 'secret words of the hook' >&2\nexit 0\n"


class _NotATerminal:
    def isatty(self) -> bool:
        return False


async def test_doctor_runs_each_hook_and_fails_on_one_that_cannot_run(tmp_path: Path, fault_server: FaultServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    good = tmp_path / "check-cmd"
    good.write_text(GOOD)
    good.chmod(0o755)
    config_path = tmp_path / "config.toml"
    config_path.write_text(f'[[hooks.PreToolUse]]\ncommand = "{good} --token sk-abc"\n\n'
                           f'[[hooks.Stop]]\ncommand = "{tmp_path}/gone"\ntimeout = 2\n')
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "dumb",
           "DEEPSEEK_API_KEY": "sk-0123456789abcdef0123456789abcdef"}
    config = load_config({"base_url": fault_server.url}, env, require_key=False, config_path=config_path)
    report = await Doctor(config, env, stdout=_NotATerminal()).run()
    hooks = [line for line in report.lines() if " hook" in line.split(":")[0]]
    assert len(hooks) == 2, report.lines()
    assert hooks[0].startswith("✓ hook: hook check-cmd (PreToolUse): answered go (exit code 0) in ")
    assert hooks[0].endswith(f"; {config_path}, line 1")
    assert hooks[1].startswith("✗ hook: hook failed (event: Stop; hook: gone; category: not-found; after: ")
    assert hooks[1].endswith("s); the sample went on")
    assert not report.ok
    text = "\n".join(report.lines())
    assert "secret words" not in text and "sk-abc" not in text
