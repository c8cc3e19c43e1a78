"""Hooks in Claude Code's protocol (docs/hooks.md): real scripts in tmp, run as a session runs them, and a real
turn through the fault server whose tool call a hook refuses."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.hook_run import STDOUT_LIMIT, Hooks, run_hook
from dsh.agent_loop.hooks import HookSpec, claude_settings_hooks, hook_name, parse_hooks
from dsh.agent_loop.session import Session
from dsh.agent_loop.settings import SettingsError
from dsh.agent_loop.tool_hooks import ToolHooks
from dsh.llm import ToolCall
from dsh.llm.loopback.fault_server import Behaviour
from tests.agent_loop.session_configs import StubConfig
from tests.session_log_invariants import read_log

pytestmark = pytest.mark.anyio


def script(tmp_path: Path, name: str, text: str, *, mode: int = 0o755) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


BLOCK_RM = """#!/bin/sh
payload=$(cat)
case "$payload" in
  *'rm -rf'*) echo "no rm -rf here, use trash" >&2; exit 2 ;;
esac
exit 0
"""

DENY_JSON = f"""#!{sys.executable}
import json, sys
event = json.load(sys.stdin)
if "secret" in event["tool_input"].get("file_path", ""):
    print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse", "permissionDecision": "deny",
                      "permissionDecisionReason": "secrets stay unread"}}}}))
"""


def hooks_of(tmp_path: Path, toml: str) -> Hooks:
    import tomllib  # the test's own parse of the config text, as repl/config.py does

    specs = parse_hooks(tomllib.loads(toml)["hooks"], "config file test.toml")
    return Hooks(specs, cwd=str(tmp_path), redact=lambda text: text.replace("hunter2hunter2", "***"))


class Ctx:
    """The parts of a ToolContext a refused call never reaches."""

    approver = None


async def before(hooks: Hooks, name: str, arguments: dict[str, Any]) -> Any:
    call = ToolCall("c1", name, json.dumps(arguments))
    return await ToolHooks(hooks).before_tool(call, arguments, Ctx())  # type: ignore[arg-type]


async def test_a_shell_script_blocks_rm_rf_with_exit_2_and_its_stderr_is_the_models(tmp_path: Path) -> None:
    check = script(tmp_path, "check-cmd", BLOCK_RM)
    hooks = hooks_of(tmp_path, f'[[hooks.PreToolUse]]\nmatcher = "run_shell"\ncommand = "{check}"\n')
    refused = await before(hooks, "run_shell", {"command": "rm -rf /"})
    assert refused.is_error and refused.text == "no rm -rf here, use trash"
    assert await before(hooks, "run_shell", {"command": "ls"}) is None
    assert await before(hooks, "read_file", {"path": "x"}) is None  # the matcher names run_shell only
    assert [(r.outcome, r.exit_code) for r in hooks.recent] == [("block", 2), ("go", 0)]


async def test_a_python_hook_answers_json_deny(tmp_path: Path) -> None:
    deny = script(tmp_path, "deny.py", DENY_JSON)
    hooks = hooks_of(tmp_path, f'[[hooks.PreToolUse]]\ncommand = "{deny} --strict"\n')
    refused = await before(hooks, "read_file", {"path": "secret.txt"})
    assert refused.text == "secrets stay unread"
    assert await before(hooks, "read_file", {"path": "notes.txt"}) is None
    assert hooks.recent[0].hook == "deny.py"  # the script's name, never its arguments


@pytest.mark.parametrize(("body", "mode", "category"), [
    ("#!/bin/sh\nsleep 30\n", 0o755, "timeout"),
    ("#!/bin/sh\nexit 0\n", 0o644, "not-found"),  # not executable: the shell's 126
    (None, 0o755, "not-found"),  # missing: the shell's 127
    ("#!/bin/sh\necho 'token hunter2hunter2 leaked' >&2\nkill -9 $$\n", 0o755, "crash"),
])
async def test_a_guarding_hook_that_cannot_run_refuses_the_call(tmp_path: Path, body: str | None, mode: int,
                                                                 category: str) -> None:
    path = tmp_path / "check-cmd"
    if body is not None:
        script(tmp_path, "check-cmd", body, mode=mode)
    hooks = hooks_of(tmp_path, f'[[hooks.PreToolUse]]\ncommand = "{path} --token abc"\ntimeout = 1\n')
    refused = await before(hooks, "run_shell", {"command": "ls"})
    after = "1s" if category == "timeout" else refused.text.split("after: ")[1].split(")")[0]
    line = (f"hook failed (event: PreToolUse; hook: check-cmd; category: {category}; after: {after}); "
            "run_shell refused")
    assert refused.is_error and refused.text == line and refused.diagnostic == line
    assert "abc" not in line
    why = refused.cause.word_lines()
    if category == "crash":  # its stderr goes to /why, masked
        assert any("token *** leaked" in text for text in why) and not any("hunter2" in text for text in why)
    assert hooks.recent[-1].outcome == "refused" and hooks.recent[-1].category == category


async def test_an_other_exit_is_shown_and_the_call_goes_on(tmp_path: Path) -> None:
    check = script(tmp_path, "lint", "#!/bin/sh\nexit 1\n")
    hooks = hooks_of(tmp_path, f'[[hooks.PreToolUse]]\ncommand = "{check}"\n')
    assert await before(hooks, "run_shell", {"command": "ls"}) is None
    assert hooks.recent[-1].outcome == "error" and hooks.recent[-1].exit_code == 1


async def test_a_hook_printing_a_gigabyte_is_drained_and_its_kept_output_capped(tmp_path: Path) -> None:
    before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = await run_hook("head -c 1073741824 /dev/zero", b"{}", cwd=str(tmp_path), timeout=120)
    assert run.exit_code == 0 and run.stdout_bytes == 1 << 30 and len(run.stdout) == STDOUT_LIMIT
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_rss < 200 * 1024  # KiB: not a gigabyte


async def test_the_hook_gets_the_event_and_the_environment_allowlist(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-not-for-hooks-0000000000")
    dump = script(tmp_path, "dump", f"#!/bin/sh\ncat > {tmp_path}/event.json\nenv > {tmp_path}/env.txt\n")
    hooks = hooks_of(tmp_path, f'[[hooks.PreToolUse]]\ncommand = "{dump}"\n')
    assert await before(hooks, "edit_file", {"path": "a.py", "old_string": "x", "new_string": "y"}) is None
    event = json.loads((tmp_path / "event.json").read_text())
    assert event["hook_event_name"] == "PreToolUse" and event["tool_name"] == "edit_file"
    assert event["cwd"] == str(tmp_path) and event["tool_use_id"] == "c1"
    assert event["tool_input"]["file_path"] == str(tmp_path / "a.py") and event["tool_input"]["old_string"] == "x"
    env = (tmp_path / "env.txt").read_text()
    assert "sk-not-for-hooks" not in env and f"CLAUDE_PROJECT_DIR={tmp_path}" in env


def test_config_errors_name_the_file_and_the_key() -> None:
    with pytest.raises(SettingsError, match=r"config file c.toml: \[hooks.PreToolUse\] timeout must be"):
        parse_hooks({"PreToolUse": [{"command": "x", "timeout": -1}]}, "config file c.toml")
    with pytest.raises(SettingsError, match=r"\[hooks.Whenever\] is not a hook event"):
        parse_hooks({"Whenever": [{"command": "x"}]}, "config file c.toml")
    with pytest.raises(SettingsError, match=r"matcher is not a regular expression"):
        parse_hooks({"PreToolUse": [{"command": "x", "matcher": "("}]}, "config file c.toml")


def test_a_hooks_name_is_its_scripts_basename_never_its_arguments_or_assignments() -> None:
    assert hook_name("~/bin/check-cmd --token sk-abc") == "check-cmd"
    assert hook_name("TOKEN=sk-abc python3 .claude/hooks/guard.py") == "guard.py"
    assert hook_name('"$CLAUDE_PROJECT_DIR"/.claude/hooks/x\x1b[31m.sh') == "x__31m.sh"


def claude_repo(tmp_path: Path, check: Path) -> Path:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": str(check), "timeout": 5}]}]}}))
    return tmp_path


def test_claude_settings_map_bash_onto_run_shell(tmp_path: Path) -> None:
    check = script(tmp_path, "block.sh", BLOCK_RM)
    (spec,) = claude_settings_hooks(claude_repo(tmp_path, check))
    assert spec == HookSpec("PreToolUse", str(check), "Bash", 5.0, ".claude/settings.json", True)
    assert spec.matches("run_shell") and not spec.matches("read_file")


async def test_a_real_turn_a_claude_hook_refuses_a_run_shell_call(tmp_path: Path, server: Any) -> None:
    """The model calls run_shell; the project's .claude/settings.json hook blocks it: the model is told the
    hook's words, the command never runs, and the session log records the run."""
    check = script(tmp_path, "block.sh", BLOCK_RM)
    (tmp_path / "repo").mkdir()
    repo = claude_repo(tmp_path / "repo", check)
    marker = repo / "kept"
    marker.write_text("x")
    server.push(Behaviour("parallel_tool_calls", calls=[["s1", "run_shell", {"command": f"rm -rf {marker}"}]]))
    approved: list[object] = []

    async def approve(request: object) -> str:
        approved.append(request)
        return "yes"

    config = StubConfig(base_url=server.url, claude_settings=True)
    session = Session(config, sessions_root=tmp_path / "sessions", project_context=False, approve=approve,
                      cwd=str(repo))
    await session.start()
    try:
        await session.run_turn("clean up")
    finally:
        await session.aclose()
    assert marker.exists() and approved == []  # refused before the approval was asked
    sent = server.requests[-1].json["messages"]
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["no rm -rf here, use trash"]
    log_path = next((tmp_path / "sessions").rglob("*.jsonl"))
    _, records = read_log(log_path)
    ran = [r["data"] for r in records if r["type"] == "hook/run"]
    assert ran == [{"event": "PreToolUse", "hook": "block.sh", "outcome": "block", "category": None,
                    "exit_code": 2, "duration_s": ran[0]["duration_s"], "tool": "run_shell"}]
    assert "use trash" not in json.dumps(ran)  # its words are the model's, never the record's


async def test_doctor_runs_each_hook_once_on_a_sample(tmp_path: Path) -> None:
    from dsh.agent_loop.hook_run import doctor_checks  # beside its test: the doctor's one entry

    good = script(tmp_path, "check-cmd", BLOCK_RM)
    specs = parse_hooks({"PreToolUse": [{"command": str(good)}, {"command": str(tmp_path / "gone"), "timeout": 2}]},
                        "config file c.toml")
    (ok, line), (bad, failed) = await doctor_checks(specs, cwd=str(tmp_path), redact=str)
    assert ok and line.startswith("hook check-cmd (PreToolUse): answered go (exit code 0) in ")
    assert not bad and failed.startswith("hook failed (event: PreToolUse; hook: gone; category: not-found; after: ")


async def test_hooks_lists_each_hook_with_its_source(tmp_path: Path) -> None:
    from dsh.agent_loop.hooks import hook_lines  # beside its test

    path = tmp_path / "config.toml"
    path.write_text('model = "x"\n\n[[hooks.PreToolUse]]\nmatcher = "run_shell|edit_file"\ncommand = "~/bin/check-cmd'
                    ' --key sk-abc"\ntimeout = 10\n')
    import tomllib  # the test's own parse, as repl/config.py does

    specs = parse_hooks(tomllib.loads(path.read_text())["hooks"], f"config file {path}", path)
    assert hook_lines(specs) == [
        f"PreToolUse  matcher: run_shell|edit_file  hook: check-cmd  timeout: 10s  ({path}, line 3)"]
