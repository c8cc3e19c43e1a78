"""Permission modes in real runs (docs/safety.md, "Permission modes"): the same scripted turn under each mode.

A real ``dsh -p`` against the fault server, in a git work tree, with the fixture MCP server over stdio: the
model asks in one message for read_file, write_file inside the tree, write_file outside it, run_shell and an
MCP tool that is not read-only, the MCP tool that is, and a delegation to a subagent (the scripted child dsh,
which answers without touching anything). What ran is on disk and in the server's record; what each call answered is in
the follow-up request. ``auto`` runs under real bubblewrap. The table these tests pin is the one in
docs/safety.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.agent_loop.permissions import PLAN_REFUSAL, Action, Mode, Permissions, Refuse, decide, parse_mode
from dsh.agent_loop.sandbox import sandbox_problem
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.config import ConfigError, load_config
from fixtures.mcp_servers import read_record, stdio_command
from tests.real_parts import missing

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-permissionModesKey000000000000000"

EDIT_NO_APPROVER = ("Error: file edits need approval and no one can approve them here; --allow-edits (or "
                    "allow_edits = true in config.toml) allows them")
SHELL_NO_APPROVER = "Error: shell commands need approval and no one is available to approve them here"
MCP_NO_APPROVER = ("Error: this MCP tool needs approval and no one is available to approve it here (run dsh with "
                   '--allow-mcp, or set approve = "auto" for the server)')
READ = "remember the milk\n"
CREATED = "created new.txt (1 line)"
SHELL_RAN = "(no output)\n[exit code: 0] (sandboxed)"
MCP_RAN = "5"
ECHOED = "hi"  # the fixture's read-only echo tool
DELEGATED = "delegated"


# --- the decision table -------------------------------------------------------------------------------


def test_the_decision_table() -> None:
    ask, run = "ask", "run"
    table = {
        Mode.DEFAULT: (ask, ask, ask, ask, ask, run, run),
        Mode.ACCEPT_EDITS: (ask, run, ask, ask, ask, run, run),
        Mode.AUTO: (run, run, ask, ask, ask, run, run),
    }
    actions = (Action.SHELL, Action.EDIT, Action.EDIT_OUTSIDE, Action.EDIT_GIT, Action.MCP, Action.MCP_TRUSTED,
               Action.SUBAGENT)
    for mode, expected in table.items():
        assert tuple(decide(mode, action) for action in actions) == expected, mode
    assert {decide(Mode.PLAN, action) for action in Action} == {Refuse(PLAN_REFUSAL)}


def test_shift_tab_cycles_and_skips_auto_without_a_sandbox() -> None:
    bare = Permissions()
    assert [bare.cycle() for _ in range(3)] == [Mode.ACCEPT_EDITS, Mode.PLAN, Mode.DEFAULT]
    assert bare.set(Mode.AUTO) == 'auto needs a sandbox: set sandbox = "bwrap" in config.toml (docs/safety.md)'
    assert bare.mode is Mode.DEFAULT
    sandboxed = Permissions(auto_allowed=True)
    assert [sandboxed.cycle() for _ in range(4)] == [Mode.ACCEPT_EDITS, Mode.PLAN, Mode.AUTO, Mode.DEFAULT]
    with pytest.raises(ValueError):
        Permissions(Mode.AUTO)


# --- the config key and the flag ------------------------------------------------------------------------


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_permission_mode_from_the_file_and_the_flag_which_wins(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert load_config({}, env, require_key=False).permission_mode == "default"
    path = _file(tmp_path, 'permission_mode = "plan"\n')
    assert load_config({}, env, require_key=False, config_path=path).permission_mode == "plan"
    flag = load_config({"permission_mode": "accept-edits"}, env, require_key=False, config_path=path)
    assert flag.permission_mode == "accept-edits" and flag.sources["permission_mode"] == "--permission-mode (flag)"


def test_a_bad_permission_mode_names_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, 'permission_mode = "yolo"\n')
    with pytest.raises(ConfigError) as caught:
        load_config({}, {"HOME": str(tmp_path)}, require_key=False, config_path=path)
    assert str(caught.value) == (f"config file {path}: permission_mode must be one of default, plan, accept-edits, "
                                 "auto, got 'yolo'")


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), st.integers(), st.booleans(), st.none(), st.lists(st.text(max_size=5))))
def test_any_other_value_is_refused_in_one_bounded_line(tmp_path_factory: pytest.TempPathFactory, value: object
                                                        ) -> None:
    """Whatever a config file holds: a mode, or one ConfigError line that shows at most 40 characters of it."""
    mode = parse_mode(value)
    if isinstance(value, str) and value in ("default", "plan", "accept-edits", "auto"):
        assert mode == value
        return
    assert mode is None
    with pytest.raises(ConfigError) as caught:
        load_config({}, {"HOME": "/nonexistent"}, require_key=False,
                    config_path=_file(tmp_path_factory.mktemp("c"), f"permission_mode = {_toml(value)}\n"))
    message = str(caught.value)
    assert "\n" not in message and len(message) < 200 + len(str(tmp_path_factory.getbasetemp()))


def _toml(value: object) -> str:
    if value is None:
        return '""'  # TOML has no null: the empty string stands for it
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def test_auto_without_a_sandbox_names_where_auto_came_from(tmp_path: Path) -> None:
    path = _file(tmp_path, 'permission_mode = "auto"\n')
    with pytest.raises(ConfigError) as caught:
        load_config({}, {"HOME": str(tmp_path)}, require_key=False, config_path=path)
    assert str(caught.value) == (f'config file {path}: permission_mode = "auto" needs a sandbox: set sandbox = '
                                 '"bwrap" in it (docs/safety.md)')
    with pytest.raises(ConfigError) as caught:
        load_config({"permission_mode": "auto"}, {"HOME": str(tmp_path)}, require_key=False,
                    config_path=_file(tmp_path, "max_retries = 0\n"))
    assert str(caught.value) == (f'--permission-mode auto needs a sandbox: set sandbox = "bwrap" in {path} '
                                 "(docs/safety.md)")


# --- real runs ------------------------------------------------------------------------------------------


def _env(home: Path, server: FaultServer | None = None, path: str | None = None) -> dict[str, str]:
    env = {"PATH": path or os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"), "DEEPSEEK_API_KEY": KEY}
    if server is not None:
        env["DEEPSEEK_BASE_URL"] = server.url
    return env


def _write_config(home: Path, text: str) -> None:
    (home / "config" / "dsh").mkdir(parents=True, exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + text, encoding="utf-8")


def _dsh(home: Path, work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=100)


def _needs_bwrap() -> None:
    if shutil.which("bwrap") is None:
        missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
    if (problem := sandbox_problem()) is not None:
        missing("a working bubblewrap", problem)


def _turn(home: Path, mode: str, *flags: str, sandbox: bool = False) -> tuple[dict[str, str], Path, list[str]]:
    """One -p run of the scripted turn: {tool: its result}, the work tree, and the MCP server's calls."""
    work, outside, record = home / "work", home / "outside.txt", home / "fx.jsonl"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=60)
    (work / "notes.txt").write_text("remember the milk\n")
    argv = stdio_command("ok", "--record", str(record))
    child = [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"]
    _write_config(home, ('sandbox = "bwrap"\n' if sandbox else "")
                  + f"[mcp_servers.fx]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n"
                  f"cwd = {json.dumps(str(REPO))}\n"
                  f'[subagents.helper]\nprovider = "dsh"\ncommand = {json.dumps(child)}\n'
                  f"env = {{ DSH_SCRIPTED_CHILD = {json.dumps(json.dumps({'text': DELEGATED}))}, "
                  f"PYTHONPATH = {json.dumps(str(REPO))} }}\n")
    calls = [
        ("read_file", {"path": "notes.txt"}),
        ("write_file", {"path": "new.txt", "content": "inside\n"}),
        ("write_file", {"path": str(outside), "content": "outside\n"}),
        ("run_shell", {"command": "echo ran > shell.txt"}),
        ("mcp__fx__add", {"a": 2, "b": 3}),
        ("mcp__fx__echo", {"text": ECHOED}),
        ("subagent", {"description": "d", "prompt": "look around"}),
    ]
    script = [Behaviour("parallel_tool_calls", calls=[
        {"id": f"call_{index}", "name": name, "arguments": arguments} for index, (name, arguments) in enumerate(calls)
    ])]
    with FaultServer(script=script, default=Behaviour("text", text="done")) as server:
        result = _dsh(home, work, _env(home, server), "-p", "go", "--permission-mode", mode, *flags)
        assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr
        follow_up = server.requests[1].json["messages"]
    answers = {message["tool_call_id"]: message["content"] for message in follow_up if message["role"] == "tool"}
    names = ("read", "write inside", "write outside", "shell", "mcp", "mcp read-only", "subagent")
    results = {name: answers[f"call_{index}"] for index, name in enumerate(names)}
    mcp_calls = [entry["tool"] for entry in read_record(record) if entry["event"] == "tool-started"] \
        if record.exists() else []
    return results, work, mcp_calls


def _on_disk(home: Path, work: Path) -> tuple[bool, bool, bool]:
    return (work / "new.txt").exists(), (home / "outside.txt").exists(), (work / "shell.txt").exists()


def test_default_mode_under_p_is_today_s_behaviour(tmp_path: Path) -> None:
    results, work, mcp_calls = _turn(tmp_path, "default")
    assert results == {"read": READ, "write inside": EDIT_NO_APPROVER, "write outside": EDIT_NO_APPROVER,
                       "shell": SHELL_NO_APPROVER, "mcp": MCP_NO_APPROVER, "mcp read-only": ECHOED,
                       "subagent": DELEGATED}
    assert _on_disk(tmp_path, work) == (False, False, False) and mcp_calls == ["echo"]


def test_plan_mode_refuses_every_change_even_with_allow_edits_and_allow_mcp(tmp_path: Path) -> None:
    results, work, mcp_calls = _turn(tmp_path, "plan", "--allow-edits", "--allow-mcp")
    assert results == {"read": READ, "write inside": PLAN_REFUSAL, "write outside": PLAN_REFUSAL,
                       "shell": PLAN_REFUSAL, "mcp": PLAN_REFUSAL, "mcp read-only": ECHOED,
                       "subagent": PLAN_REFUSAL}
    assert _on_disk(tmp_path, work) == (False, False, False) and mcp_calls == ["echo"]


def test_accept_edits_writes_inside_the_tree_without_asking_and_nothing_else(tmp_path: Path) -> None:
    results, work, mcp_calls = _turn(tmp_path, "accept-edits")
    assert results == {"read": READ, "write inside": CREATED, "write outside": EDIT_NO_APPROVER,
                       "shell": SHELL_NO_APPROVER, "mcp": MCP_NO_APPROVER, "mcp read-only": ECHOED,
                       "subagent": DELEGATED}
    assert _on_disk(tmp_path, work) == (True, False, False) and mcp_calls == ["echo"]
    assert (work / "new.txt").read_text() == "inside\n"


def test_auto_runs_sandboxed_commands_and_edits_inside_but_mcp_tools_still_ask(tmp_path: Path) -> None:
    _needs_bwrap()
    results, work, mcp_calls = _turn(tmp_path, "auto", sandbox=True)
    assert results == {"read": READ, "write inside": CREATED, "write outside": EDIT_NO_APPROVER,
                       "shell": SHELL_RAN, "mcp": MCP_NO_APPROVER, "mcp read-only": ECHOED,
                       "subagent": DELEGATED}
    assert _on_disk(tmp_path, work) == (True, False, True) and mcp_calls == ["echo"]
    assert (work / "shell.txt").read_text() == "ran\n"


def test_auto_with_allow_mcp_runs_the_mcp_tool_too(tmp_path: Path) -> None:
    _needs_bwrap()
    results, _, mcp_calls = _turn(tmp_path, "auto", "--allow-mcp", sandbox=True)
    assert results["mcp"] == MCP_RAN and sorted(mcp_calls) == ["add", "echo"]


def test_auto_without_a_sandbox_does_not_start(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _write_config(tmp_path, "")
    config = tmp_path / "config" / "dsh" / "config.toml"
    result = _dsh(tmp_path, work, _env(tmp_path), "-p", "hello", "--permission-mode", "auto")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f'dsh: failed to start: --permission-mode auto needs a sandbox: set sandbox = "bwrap" '
                             f"in {config} (docs/safety.md)\n")


def test_auto_with_a_sandbox_that_cannot_run_says_the_sandbox_s_own_line(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _write_config(tmp_path, 'sandbox = "bwrap"\npermission_mode = "auto"\n')
    config = tmp_path / "config" / "dsh" / "config.toml"
    env = _env(tmp_path, path="/nowhere")
    result = subprocess.run([sys.executable, "-m", "dsh.repl", "-p", "hello"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=100)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f'dsh: failed to start: config file {config}: sandbox = "bwrap" but bwrap is not '
                             "installed: install Debian's bubblewrap package (sudo apt-get install bubblewrap)\n")
