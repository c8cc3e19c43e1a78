"""Sessions from the command line: created at the first turn only, scoped to the project, and
``dsh sessions list|show|rm``. Every run is a real ``dsh`` process against the embedded demo server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.repl.test_cli import base_env

HELLO = "Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1."
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for name in ("state", "config", "repo/.git", "repo/src", "plain"):
        (tmp_path / name).mkdir(parents=True)
    return tmp_path


def run(home: Path, *args: str, cwd: Path | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=cwd or home / "repo", env=base_env(home),
                          input=stdin, capture_output=True, text=True, timeout=60)


def session_files(home: Path) -> list[Path]:
    root = home / "state" / "dsh" / "sessions"
    return sorted(root.glob("*.jsonl")) if root.is_dir() else []


def header(path: Path) -> dict[str, str]:
    return json.loads(path.read_text().splitlines()[0])


def test_a_session_file_is_created_at_the_first_turn_only(home: Path) -> None:
    assert run(home, "--demo").returncode == 0  # piped, EOF at once
    assert run(home, "--demo", stdin="/help\n/sessions\n/new\n/jobs\n").returncode == 0
    assert session_files(home) == []
    assert (home / "state" / "dsh" / "sessions").is_dir()  # the directory is made (and checked) at launch
    result = run(home, "--demo", "-p", "hello")
    assert result.returncode == 0 and result.stdout.endswith(f"{HELLO}\n")
    [first] = session_files(home)
    assert header(first)["project"] == str(home / "repo") and header(first)["cwd"] == str(home / "repo")
    result = run(home, "--demo", stdin="one\n/new\n", cwd=home / "repo" / "src")
    [_, second] = sorted(session_files(home), key=lambda p: p.stat().st_mtime)
    assert second != first and header(second)["project"] == str(home / "repo")  # the git root, not src
    assert header(second)["cwd"] == str(home / "repo" / "src")


def test_resume_last_and_the_listing_are_scoped_to_the_project(home: Path) -> None:
    assert run(home, "--demo", "-p", "in the repo").returncode == 0
    assert run(home, "--demo", "-p", "in the plain dir", cwd=home / "plain").returncode == 0
    assert run(home, "--demo", cwd=home / "plain").returncode == 0  # no turn: no session
    [repo_id] = [p.stem for p in session_files(home) if header(p)["project"] == str(home / "repo")]
    [plain_id] = [p.stem for p in session_files(home) if header(p)["project"] == str(home / "plain")]

    resumed = run(home, "--demo", "--resume", "last", stdin="and again\n")
    lines = resumed.stdout.splitlines()
    assert lines[:3] == [f"resumed session {repo_id} (1 turn)", "  turn 1 > in the repo", f"         < {HELLO}"]
    assert lines[3] == f"[main turn 2] {HELLO}"
    resumed = run(home, "--demo", "--resume", "last", cwd=home / "plain")
    assert resumed.stdout.splitlines()[0] == f"resumed session {plain_id} (1 turn)"

    listing = run(home, "sessions", "list")
    assert listing.returncode == 0 and listing.stderr == ""
    lines = listing.stdout.splitlines()
    assert lines[0] == "sessions of ~/repo (newest last; --all for every project):"
    assert len(lines) == 2 and re.fullmatch(rf"  {DATE}  {repo_id}  2 turns    in the repo", lines[1]), lines
    lines = run(home, "sessions", "list", "--all").stdout.splitlines()
    assert lines[0] == "sessions of every project (newest last):"
    assert re.fullmatch(rf"  {DATE}  {plain_id}  1 turn     ~/plain  in the plain dir", lines[1]), lines
    assert re.fullmatch(rf"  {DATE}  {repo_id}  2 turns    ~/repo  in the repo", lines[2]), lines  # newest last
    nothing = run(home, "--demo", "--resume", "last", cwd=home)
    assert nothing.returncode == 1
    assert nothing.stderr == (
        f"dsh: failed to start: no session with turns to resume of project {home} in {home}/state/dsh/sessions\n"
    )


def test_sessions_show_prints_a_sanitized_transcript(home: Path) -> None:
    assert run(home, "--demo", "--scenario", "tool-call", "-p", "list \x1b[31mfiles\x1b[0m\nplease").returncode == 0
    [path] = session_files(home)
    result = run(home, "sessions", "show", path.stem[:15])  # a unique prefix is enough
    assert result.returncode == 0 and result.stderr == ""
    assert "\x1b" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"session {path.stem} · project ~/repo · created ")
    assert lines[1:3] == ["> list \u241b[31mfiles\u241b[0m", "  please"]
    assert lines[3].startswith("[main turn 1] ")
    assert any(line.startswith("  [tool call] ") for line in lines)
    assert any(line.startswith("  [tool result] ") for line in lines)
    missing = run(home, "sessions", "show", "nope")
    assert missing.returncode == 1
    assert missing.stderr == f"dsh sessions: no session 'nope' in {home}/state/dsh/sessions\n"
    usage = run(home, "sessions", "frobnicate")
    assert (usage.returncode, usage.stderr) == (2, "dsh sessions: usage: dsh sessions list [--all] | show ID | "
                                                   "export ID [--format md|json|html] [-o FILE] | rm ID\n")


def test_sessions_rm_removes_a_session_and_refuses_one_open_in_another_dsh(home: Path) -> None:
    assert run(home, "--demo", "-p", "first").returncode == 0
    assert run(home, "--demo", "-p", "second").returncode == 0
    first, second = sorted(session_files(home), key=lambda p: p.stat().st_mtime)
    holder = subprocess.Popen([sys.executable, "-m", "dsh.repl", "--demo", "--resume", second.stem],
                              cwd=home / "repo", env=base_env(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == f"resumed session {second.stem} (1 turn)\n"  # it holds the lock now
        refused = run(home, "sessions", "rm", second.stem)
        assert refused.returncode == 1
        assert refused.stderr == f"dsh sessions: session {second.stem} is open in another dsh process\n"
        assert second.exists()
    finally:
        holder.communicate("", timeout=30)
    removed = run(home, "sessions", "rm", first.stem)
    assert (removed.returncode, removed.stdout) == (0, f"removed session {first.stem}\n")
    assert session_files(home) == [second]
