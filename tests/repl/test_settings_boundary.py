"""Settings parsed at the boundary (agent_loop/settings.py, repl/config.py): every table's bad value stops the real
dsh with one line of one form, naming the file, the table and the key (exit status 2); a good table reaches the
session as a frozen dataclass, not a dict (docs/configuration.md)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.agent_loop.mcp.config import McpServerConfig
from dsh.agent_loop.settings import SettingsError
from dsh.llm.models import ModelSettings
from dsh.repl.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-testSettingsBoundary0001112"


def _dsh(home: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = home / "config" / "dsh" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    return subprocess.run([sys.executable, "-m", "dsh.repl", "--demo", "-p", "hello"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[mcp_servers.fx]\ncommand = "x"\nstartup_timeout = "ten"\n',
         "[mcp_servers.fx] startup_timeout must be a number of seconds above 0 (at most a day), got 'ten'"),
        ('[mcp_servers.fx]\ncommand = "x"\nenabled = "no"\n',
         "[mcp_servers.fx] enabled must be true or false, got 'no'"),
        ('[models."m"]\noutput = -1\n',
         "[models.m] output must be a price of zero or more (USD per 1M tokens), got -1"),
        ('[models."m"]\ncontext_window = 1.5\n', "[models.m] context_window must be a positive integer, got 1.5"),
        ('[models."m"]\nwindow = 3\n',
         "[models.m] has unknown key 'window' (known: context_window, input_cache_hit, input_cache_miss, output, "
         "images)"),
        ("[subagents]\nprobe = 3\n", "[subagents.probe] must be a table"),
        ("max_tokens = 'lots'\n", "max_tokens must be a positive integer, got 'lots'"),
    ],
)
def test_a_bad_value_in_any_table_stops_dsh_with_one_line_naming_file_table_and_key(
        tmp_path: Path, text: str, line: str) -> None:
    result = _dsh(tmp_path, text)
    path = tmp_path / "config" / "dsh" / "config.toml"
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"dsh: failed to start: config file {path}: {line}\n")


def test_the_tables_reach_the_session_as_frozen_dataclasses(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[models."m"]\ncontext_window = 1000\noutput = 2\n'
                    '[mcp_servers.fx]\ncommand = ["prog", "-v"]\nargs = ["a"]\nstartup_timeout = 5\n', encoding="utf-8")
    config = load_config({}, {"HOME": str(tmp_path), "DEEPSEEK_API_KEY": KEY}, config_path=path)
    assert config.models == {"m": ModelSettings(context_window=1000, output=2.0)}
    assert config.models["m"].keys() == ("context_window", "output")
    server = config.mcp_servers["fx"]
    assert isinstance(server, McpServerConfig)
    assert (server.command, server.startup_timeout, server.keys()) == (
        ("prog", "-v", "a"), 5.0, ("command", "args", "startup_timeout"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.models["m"].output = 0.0  # type: ignore[misc]


def test_the_config_error_is_the_one_settings_error() -> None:
    assert ConfigError is SettingsError
