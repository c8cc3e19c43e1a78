"""Profiles and /model (issue 39 part 6): ``[profiles.NAME]`` in real config files, ``--profile``/``DSH_PROFILE``
between the files and the environment, ``/profile`` and ``/model`` in piped dsh runs against the fault server
(its ``GET /models``), the ``model/set`` record, ``dsh sessions show`` and a resume that restores the model, and
``/cost`` split by model. Exact lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.config import ConfigError, load_config
from tests.session_log_invariants import assert_well_formed, read_log

KEY = "sk-profilesTestKey000000000000000"
CONFIG = """\
model = "deepseek-flash"
max_cost = 5.0
[profiles.deep]
model = "deepseek-v4-pro"
thinking = true
reasoning_effort = "max"
max_cost = 2.0
[profiles.fast]
max_tokens = 100
thinking = false
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + CONFIG, encoding="utf-8")
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done")).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def _env(home: Path, server: FaultServer | None = None, **more: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"), "DEEPSEEK_API_KEY": KEY}
    if server is not None:
        env["DEEPSEEK_BASE_URL"] = server.url
    return {**env, **more}


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home, env=_env(home, server, **env),
                          input=stdin, capture_output=True, text=True, timeout=120)


def _load(home: Path, flags: dict[str, object] | None = None, **env: str):  # type: ignore[no-untyped-def]
    return load_config(flags or {}, _env(home, **env), cwd=home)


def test_a_profile_sits_between_the_file_and_the_environment(home: Path) -> None:
    config = _load(home, {"profile": "deep"})
    assert (config.model, config.thinking, config.reasoning_effort, config.max_cost, config.profile) == (
        "deepseek-v4-pro", True, "max", 2.0, "deep")
    assert {key: config.sources[key] for key in ("model", "thinking", "max_cost")} == {
        "model": "profile deep", "thinking": "profile deep", "max_cost": "profile deep"}
    flagged = _load(home, {"profile": "deep", "model": "deepseek-flash"}, DSH_MAX_COST="1")
    assert (flagged.model, flagged.max_cost, flagged.sources["model"]) == ("deepseek-flash", 1.0, "--model (flag)")
    assert (_load(home, DSH_PROFILE="fast").max_tokens, _load(home).profile) == (100, None)


def test_an_unknown_or_bad_profile_is_one_line(home: Path) -> None:
    path = home / "config" / "dsh" / "config.toml"
    with pytest.raises(ConfigError) as unknown:
        _load(home, {"profile": "nope"})
    assert str(unknown.value) == f"--profile: no profile 'nope' in {path} (profiles: deep, fast)"
    with pytest.raises(ConfigError) as from_env:
        _load(home, DSH_PROFILE="x\x1b[31m")
    assert str(from_env.value).startswith("DSH_PROFILE (environment): no profile 'x\\x1b[31m'")
    path.write_text('[profiles.deep]\nmodel = "m"\ncolour = "red"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as key:
        _load(home)
    assert str(key.value) == (f"config file {path}: [profiles.deep] has unknown key 'colour' (known: model, thinking, "
                              "reasoning_effort, max_tokens, max_cost)")
    path.write_text('[profiles."a b"]\nmodel = "m"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[profiles\] has a profile name that is not letters"):
        _load(home)


def test_a_project_profile_may_lower_the_cap_never_raise_it(home: Path) -> None:
    (home / ".git").mkdir()
    (home / ".dsh").mkdir()
    (home / ".dsh" / "config.toml").write_text(
        '[profiles.deep]\nmax_cost = 100.0\n[profiles.cheap]\nmodel = "deepseek-flash"\nmax_cost = 0.5\n',
        encoding="utf-8")
    config = _load(home, {"profile": "cheap"})
    assert (config.max_cost, config.sources["max_cost"]) == (0.5, "profile cheap")
    assert config.profiles["deep"]["max_cost"] == 2.0  # the user's own profile of a name wins
    assert "project config ~/.dsh/config.toml: profiles.deep max_cost is ignored here: it may lower your cap, not " \
           "raise it" in config.warnings


def test_profile_lists_and_switches_from_the_next_turn(home: Path, server: FaultServer) -> None:
    result = dsh(home, server, stdin="/profile\none\n/profile deep\ntwo\n/profile fast\n/profile nope\n/cost\n")
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        "profiles:",
        "  deep  model deepseek-v4-pro, thinking enabled, reasoning_effort max, max_cost $2.00",
        "  fast  max_tokens 100, thinking disabled",
        "/profile NAME switches from the next turn",
    ]
    assert ("profile deep: model deepseek-flash → deepseek-v4-pro, thinking unset → enabled, reasoning_effort unset "
            "→ max, max_cost $5.00 → $2.00 (from the next turn)") in lines
    assert "profile fast: max_tokens unset → 100, thinking enabled → disabled (from the next turn)" in lines
    assert "no profile 'nope' (profiles: deep, fast; [profiles.NAME] in config.toml)" in lines
    first, second = (request.json for request in server.requests if request.path.endswith("/chat/completions"))
    assert (first["model"], "thinking" in first) == ("deepseek-flash", False)
    assert (second["model"], second["thinking"], second["reasoning_effort"]) == (
        "deepseek-v4-pro", {"type": "enabled"}, "max")
    assert "budget: " in lines[-1] and lines[-1].endswith("spent of a $2.00 cap (0%)")  # the profile's cap
    assert [line for line in lines if line.startswith("  deepseek-")] == [
        line for line in lines if line.startswith(("  deepseek-flash: 1 request: ", "  deepseek-v4-pro: 1 request: "))]
    assert sum(line.startswith("  deepseek-") for line in lines) == 2  # /cost by model: two models were used


def test_model_lists_the_endpoint_s_models_and_the_switch_is_logged_and_resumed(home: Path,
                                                                              server: FaultServer) -> None:
    result = dsh(home, server, stdin="/model\none\n/model deepseek-v4-pro\ntwo\n")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[:4] == [f"models listed by GET /models at {server.url}:", "* deepseek-flash",
                                              "  deepseek-v4-pro", "/model NAME switches from the next turn"]
    (path,) = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    _, records = read_log(path)
    assert_well_formed(records)
    assert [(r["type"], r["data"]) for r in records if r["type"] == "model/set"] == [
        ("model/set", {"model": "deepseek-v4-pro"})]
    shown = dsh(home, server, "sessions", "show", "last")
    assert "model set to deepseek-v4-pro" in shown.stdout.splitlines()
    resumed = dsh(home, server, "--resume", "last", stdin="three\n")
    assert (resumed.returncode, resumed.stderr) == (0, "")
    assert server.requests[-1].json["model"] == "deepseek-v4-pro"  # the log's last model, not the config's
    chosen = dsh(home, server, "--resume", "last", "--model", "deepseek-flash", stdin="four\n")
    assert (chosen.returncode, chosen.stderr) == (0, "")
    assert server.requests[-1].json["model"] == "deepseek-flash"  # --model on this run wins over the log's
    _, records = read_log(path)
    assert [r["data"]["model"] for r in records if r["type"] == "model/set"] == ["deepseek-v4-pro", "deepseek-flash"]
    dsh(home, server, "--resume", "last", stdin="five\n")
    assert server.requests[-1].json["model"] == "deepseek-flash"  # and is what the next resume continues with


def test_model_says_when_the_endpoint_does_not_list_its_models(home: Path) -> None:
    srv = FaultServer(default=Behaviour("text", text="done"), models=None).start_in_thread()
    try:
        result = dsh(home, srv, stdin="/model\n")
    finally:
        srv.stop()
    assert (result.returncode, result.stderr) == (0, "")
    line = f"model: deepseek-flash (the endpoint at {srv.url} does not list its models)"
    assert result.stdout.splitlines()[0] == line


def test_hostile_model_names_from_the_endpoint_are_folded_and_cut(home: Path) -> None:
    srv = FaultServer(default=Behaviour("text", text="done"),
                      models=["deepseek-flash", "evil\x1b]0;x\x07name\nnext", "m" * 200]).start_in_thread()
    try:
        result = dsh(home, srv, stdin="/model\n")
    finally:
        srv.stop()
    lines = result.stdout.splitlines()
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert lines[3] == "  " + "m" * 59 + "…"
    assert json.dumps(lines[2]).count("next") == 1 and len(lines) == 5


def test_doctor_names_the_profile_as_the_source(home: Path, server: FaultServer) -> None:
    result = subprocess.run([sys.executable, "-m", "dsh.repl", "doctor", "--profile", "deep"], cwd=home,
                            env=_env(home, server), capture_output=True, text=True, timeout=120)
    assert "model deepseek-v4-pro (profile deep)" in result.stdout
    assert "reasoning_effort max (profile deep)" in result.stdout
