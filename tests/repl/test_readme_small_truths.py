"""What README.md says of dsh.log and of the claude extra, checked against what is true (issue 42 item 9).

dsh.log: a real ``dsh -p`` against the loopback fault server (a 503, retried, then an answer), whose host log
holds one INFO line per HTTP request; the README's row must show that line's form. The claude extra's size
drifts with each release of claude-agent-sdk, so the README states none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import FaultServer
from tests.reliability.dsh_harness import config_text, make_home, run_dsh

README = Path(__file__).resolve().parents[2] / "README.md"
REQUEST_LINE = re.compile(
    r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO httpx: HTTP Request: (GET|POST) (\S+) "HTTP/1\.1 (\d{3}) '
)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    started = FaultServer().start_in_thread()
    try:
        yield started
    finally:
        started.stop()


def _readme_row(what: str) -> str:
    (row,) = [line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {what}")]
    return row


def test_dsh_log_holds_one_info_line_per_request_as_the_readme_says(server: FaultServer, tmp_path: Path) -> None:
    server.push("http_503")
    home = make_home(tmp_path, config_text(max_retries=1))
    run = run_dsh(home, ["-p", "hi"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    lines = home.host_log.read_text(encoding="utf-8").splitlines()
    requests = [match.group(1, 2, 3) for match in map(REQUEST_LINE.match, lines) if match]
    chat = f"{server.url}/chat/completions"
    assert [request for request in requests if request[0] == "POST"] == [("POST", chat, "503"), ("POST", chat, "200")]
    assert len(requests) == len(lines)  # nothing else on a run with no warning
    row = _readme_row("the host log")
    assert 'INFO httpx: HTTP Request: POST <url> "HTTP/1.1 200 OK"' in row
    assert row.index("one line per HTTP request") < row.index("warnings")


def test_the_readme_states_no_size_for_the_claude_extra() -> None:
    text = README.read_text(encoding="utf-8").replace("\n", " ")
    assert "`claude` extra" in text and "claude-agent-sdk" in text
    sized = re.findall(r"(?:`claude` extra|`claude-agent-sdk`|`claude` CLI)[^.;()`]{0,40} \(\d[\d.]* [MG]B\)", text)
    assert sized == []
