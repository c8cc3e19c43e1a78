"""``@path`` mentions through ``-p`` and piped stdin (docs/prompt.md): real dsh processes against the loopback fault
server; the user message the server received holds the file, the system prompt does not, and a mention that
cannot be read is one line on stderr while the turn still runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

KEY = "sk-mentionsCliKey0000000000000000000"
APP = "def main():\n    return 1\n"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "work" / "src").mkdir(parents=True)
    (tmp_path / "work" / "src" / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done"), models=None).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n", encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home / "work", env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def _messages(server: FaultServer) -> list[dict[str, str]]:
    (request,) = [request for request in server.requests if request.path.endswith("/chat/completions")]
    return request.json["messages"]


def test_dash_p_sends_the_mentioned_file_in_the_user_message_not_the_system_prompt(
        home: Path, server: FaultServer) -> None:
    result = dsh(home, server, "-p", "explain @src/app.py")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    system, user = _messages(server)
    assert system["role"] == "system" and "return 1" not in system["content"]
    assert user == {"role": "user", "content": f"explain @src/app.py\n\n@src/app.py (2 lines):\n```\n{APP}```"}
    # The session log holds the message as sent.
    (log,) = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    assert "@src/app.py (2 lines)" in log.read_text(encoding="utf-8")


def test_an_unreadable_mention_is_one_line_and_the_turn_runs_with_the_text_as_typed(
        home: Path, server: FaultServer) -> None:
    result = dsh(home, server, "-p", "fix @nope.py and mail me@example.com")

    assert result.returncode == 0
    assert "@nope.py: no such file in this tree" in result.stderr.splitlines()
    assert _messages(server)[-1]["content"] == "fix @nope.py and mail me@example.com"


def test_piped_stdin_expands_mentions_the_same_way(home: Path, server: FaultServer) -> None:
    result = dsh(home, server, stdin="what is in @src/\n")

    assert result.returncode == 0, result.stderr
    assert _messages(server)[-1]["content"] == "what is in @src/\n\n@src/ (directory, 1 entry):\n```\napp.py\n```"
