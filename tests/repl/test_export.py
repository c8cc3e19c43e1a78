"""Exporting a conversation: ``dsh sessions export`` and ``/export`` (docs/prompt.md, "Export").

Every run is a real ``dsh`` process against the embedded demo server; the HTML is rendered by a real
headless Chromium (Debian's ``chromium``), which must show the conversation and run none of its text.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.real_parts import missing
from tests.repl.test_cli import base_env

KEY = "sk-exportsecret0123456789abcdef"
TOKEN = "tok-0123456789abcdefghij"  # a secret of the environment (SERVICE_TOKEN): masked, not refused
HELLO = "Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1."
HOSTILE_PROMPT = 'say <img src=x onerror="document.body.appendChild(document.createElement(\'canary\'))"></pre>'
HOSTILE_ANSWER = (f"</pre><script>document.title='ran'</script>\x1b[31mred\x1b[0m \u202eevil\ud800 key {KEY} "
                  "<img src=x onerror=\"document.body.appendChild(document.createElement('canary'))\">")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for name in ("state", "config", "repo/.git"):
        (tmp_path / name).mkdir(parents=True)
    return tmp_path


def run(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home / "repo",
                          env=base_env(home, DEEPSEEK_API_KEY=KEY, SERVICE_TOKEN=TOKEN), input=stdin,
                          capture_output=True, text=True, timeout=60)


def the_log(home: Path) -> Path:
    [path] = sorted((home / "state" / "dsh" / "sessions").glob("*.jsonl"))
    return path


def append_answer(log: Path, text: str) -> None:
    """A hostile model answer appended to a real log as the next step's record (a log shared with the user)."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    last = records[-1]
    turn = records[1]["data"]["turn"]
    record = {"type": "assistant/message", "seq": last["seq"] + 1, "time": last["time"],
              "data": {"turn": turn, "step": 9, "content": text, "tool_calls": [], "finish_reason": "stop"}}
    with log.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")  # a lone surrogate as JSON writes it: \\ud800


def test_sessions_export_md_is_the_conversation_masked(home: Path) -> None:
    assert run(home, "--demo", "--scenario", "tool-call", "-p", f"list files\x1b[2J with {TOKEN}").returncode == 0
    log = the_log(home)
    result = run(home, "sessions", "export", "last")
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    assert TOKEN not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == f"# dsh session {log.stem}"
    assert lines[2:4] == [f"- project: {home}/repo", lines[3]] and lines[3].startswith("- created: ")
    assert "- reasoning omitted (37 characters; --reasoning keeps it)" in lines
    turn = lines[lines.index("## Turn 1"):]
    assert turn[2] == "> list files\u241b[2J with ***"
    assert turn[4:9] == ["**Tool call** `list_dir`", "", "```json", '{"path": "."}', "```"]
    assert turn[10:13] == ["```text", "  [tool result] .git/", "```"]
    assert turn[14].startswith("That was a real tool round trip")
    assert turn[16].startswith("*tokens ") and turn[16].endswith("*")
    with_reasoning = run(home, "sessions", "export", "last", "--reasoning").stdout
    assert "> Let me look at the working directory." in with_reasoning


def test_sessions_export_json_is_one_versioned_object(home: Path) -> None:
    assert run(home, "--demo", "--scenario", "tool-call", "-p", "list files").returncode == 0
    out = home / "export.json"
    result = run(home, "sessions", "export", "last", "--format", "json", "-o", str(out))
    assert result.returncode == 0
    assert result.stderr == (f"dsh sessions: exported to {out} (secrets masked; it holds the conversation: read it "
                             "before you share it)\n")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    exported = json.loads(out.read_text())
    assert (exported["format"], exported["version"], exported["reasoning"]) == ("dsh-export", 1, "omitted")
    [turn] = exported["turns"]
    assert turn["prompt"] == "list files" and turn["end"] == []
    assert [item["type"] for item in turn["items"]] == ["tool_call", "tool_result", "answer"]
    assert turn["items"][1] == {"type": "tool_result", "name": "list_dir", "error": False,
                                "shown": ["  [tool result] .git/"]}
    usage = run(home, "sessions", "export", "last", "--format", "pdf")
    assert (usage.returncode, usage.stdout) == (2, "")
    assert usage.stderr == ("dsh sessions: usage: dsh sessions export ID [--format md|json|html] [-o FILE] "
                            "[--reasoning]\n")


def test_repl_export_goes_to_the_state_dir_0600_and_never_through_a_link(home: Path) -> None:
    target = home / "precious.txt"
    target.write_text("keep me")
    (home / "repo" / "link.md").symlink_to(target)
    (home / "repo" / "old.md").write_text("old")
    result = run(home, "--demo", stdin="/export\nhello\n/export\n/export link.md\n/export old.md\n")
    lines = result.stdout.splitlines()
    assert lines[0] == "nothing to export yet: this session has no turns"
    assert lines[1] == f"[main turn 1] {HELLO}"
    [written] = (home / "state" / "dsh" / "exports").iterdir()
    assert written.name.startswith(the_log(home).stem + "-") and written.suffix == ".md"
    assert lines[2] == (f"exported to {written} (secrets masked; it holds the conversation: read it before you "
                        "share it)")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "state" / "dsh" / "exports").stat().st_mode) == 0o700
    assert "> hello" in written.read_text()
    assert lines[3] == ("/export failed: export file link.md cannot be written: it is a symbolic link, "
                        "not a regular file")
    assert target.read_text() == "keep me" and (home / "repo" / "link.md").is_symlink()
    assert lines[4].startswith("exported to old.md ")  # an existing file is replaced whole, 0600
    old = home / "repo" / "old.md"
    assert old.read_text().startswith("# dsh session ") and stat.S_IMODE(old.stat().st_mode) == 0o600
    assert [name for name in os.listdir(home / "repo") if name.endswith(".tmp")] == []


class _Dom(html.parser.HTMLParser):
    """The dumped DOM's elements and its text (the text a person sees, scripts and styles aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._skip += tag in ("script", "style", "title")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style", "title")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        missing("chromium (a headless browser)", "apt-get install chromium")
    return found


def test_the_html_shows_the_conversation_in_a_real_browser_and_runs_nothing(home: Path) -> None:
    browser = chromium()
    assert run(home, "--demo", "-p", HOSTILE_PROMPT).returncode == 0
    append_answer(the_log(home), HOSTILE_ANSWER)
    page = home / "export.html"
    assert run(home, "sessions", "export", "last", "--format", "html", "-o", str(page)).returncode == 0
    source = page.read_text()
    assert ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
            "'unsafe-inline'\">") in source
    assert "<script" not in source and "<img" not in source and KEY not in source
    dumped = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={home / 'chromium'}", "--dump-dom", page.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    assert "canary" not in dom.tags and "img" not in dom.tags and "script" not in dom.tags
    assert f"<title>dsh session {the_log(home).stem}</title>" in dumped.stdout  # no script changed it
    text = "".join(dom.text)
    assert HOSTILE_PROMPT in text  # shown as text, not markup
    assert HELLO in text
    # escapes and the bidi override as pictures; the log's reader made the lone surrogate U+FFFD
    assert "</pre><script>document.title='ran'</script>\u241b[31mred\u241b[0m <U+202E>evil\ufffd key *** " in text
    assert KEY not in text
