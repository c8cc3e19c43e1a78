"""``!command`` through piped stdin (docs/prompt.md, "Running a command: !"): real dsh processes against the loopback
fault server. The output is shown sanitized and bounded with its status line, ``@!`` sends it with a prompt (the
request body holds it), ``!!`` runs the last command again, ``\\!`` sends ``!`` as a prompt, plan mode still runs
it, and each run is a ``shell/run`` record in the session log that ``dsh sessions show`` prints, never the output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.real_parts import missing

KEY = "sk-bangCliKey00000000000000000000000"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done"), models=None).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "", config: str = "",
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + config, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url, "CI": os.environ.get("CI", "")}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home / "work", env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def _user_messages(server: FaultServer) -> list[str]:
    return [[m["content"] for m in r.json["messages"] if m["role"] == "user"][-1]
            for r in server.requests if r.path.endswith("/chat/completions")]


def _records(home: Path, kind: str) -> list[dict]:
    [log] = (home / "state" / "dsh" / "sessions").rglob("*.jsonl")
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()[1:]]
    return [record["data"] for record in records if record["type"] == kind]


def test_piped_bang_shows_the_output_and_at_bang_sends_it(home: Path, server: FaultServer) -> None:
    stdin = (f"!printf 'hi\\n\\033]0;pwned\\007 {KEY}\\n'; exit 3\n"
             "@! why did it fail?\n!!\n\\!not a command\n")
    result = dsh(home, server, stdin=stdin)

    assert result.returncode == 0, result.stderr
    ran = ("hi\n␛]0;pwned␇ ***\n[exit code: 3]\n@! in your next prompt sends this output with it\n")
    assert result.stdout == ran + "[main turn 1] done\n" + ran + "[main turn 2] done\n"
    command = "printf 'hi\\n\\033]0;pwned\\007 ***\\n'; exit 3"
    assert _user_messages(server) == [
        f"@! why did it fail?\n\n!{command} (2 lines of output, exit code: 3):\n```\nhi\n\x1b]0;pwned\x07 ***\n```",
        "!not a command",
    ]
    runs = _records(home, "shell/run")
    assert [(run["command"], run["exit_code"], run["output_bytes"]) for run in runs] == [(command, 3, 51)] * 2
    assert all(set(run) == {"command", "exit_code", "signal", "timed_out", "duration_s", "output_bytes",
                            "sandboxed"} for run in runs)  # the output never: the model saw it in the message
    shown = dsh(home, server, "sessions", "show", "last")
    assert shown.returncode == 0 and KEY not in shown.stdout and "\x1b" not in shown.stdout
    assert f"! {command}  [exit code: 3] (" in shown.stdout and "s, 51 bytes of output)" in shown.stdout


def test_plan_mode_still_runs_it_and_nothing_is_sent_without_at_bang(home: Path, server: FaultServer) -> None:
    result = dsh(home, server, "--permission-mode", "plan", stdin="!echo planned > made.txt; echo ok\nthanks\n")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok\n[exit code: 0]\n")
    assert (home / "work" / "made.txt").read_text() == "planned\n"  # the user typed it: no approval asked
    assert _user_messages(server) == ["thanks"]
    assert "!!: no ! command has run yet" in dsh(home, server, stdin="!!\n").stdout


def test_a_gigabyte_of_output_is_cut_to_its_start_and_end(home: Path, server: FaultServer) -> None:
    result = dsh(home, server, stdin="!head -c 1000000000 /dev/zero | tr '\\0' a; echo; echo END\n")

    assert result.returncode == 0, result.stderr
    omitted = 1_000_000_005 - 32 * 1024
    assert f"[… {omitted} bytes of output omitted …]" in result.stdout
    assert result.stdout.endswith("END\n[exit code: 0]\n@! in your next prompt sends this output with it\n")
    assert len(result.stdout) < 40_000
    [run] = _records(home, "shell/run")
    assert run["output_bytes"] == 1_000_000_005


def test_in_the_sandbox_when_one_is_configured(home: Path, server: FaultServer) -> None:
    if shutil.which("bwrap") is None:
        missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
    subprocess.run(["git", "init", "-q", str(home / "work")], check=True)
    outside = home / "outside.txt"
    result = dsh(home, server, stdin=f"!echo in > inside.txt; echo out > {outside}; echo $?\n",
                 config='sandbox = "bwrap"\n')

    assert result.returncode == 0, result.stderr
    assert "[exit code: 0] (sandboxed)\n" in result.stdout
    assert (home / "work" / "inside.txt").read_text() == "in\n"  # the tree is writable, the rest is not
    assert not outside.exists()
    [run] = _records(home, "shell/run")
    assert run["sandboxed"] is True
