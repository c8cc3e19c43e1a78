"""``/report`` in the interactive REPL, in a real pseudo-terminal, after a real failed turn (docs/reporting.md)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_pty import KEY, Dsh

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

pytestmark = pytest.mark.timeout(90)

PROMPT = r"\x1b\[0m>(?:\x1b|\s)"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for name in ("state", "config", "cache"):
        (tmp_path / name).mkdir()
    (tmp_path / "config" / "dsh").mkdir()
    (tmp_path / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    return tmp_path


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    srv = FaultServer(default="text").start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def test_report_after_a_failed_turn_says_where_and_writes_the_turn_the_fix_the_chain_and_the_exchange(
    home: Path, fault: FaultServer
) -> None:
    capsule = home / "capsule.jsonl"
    link = home / "link.jsonl"
    os.symlink(home / "elsewhere", link)
    dsh = Dsh(home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=fault.url)
    try:
        dsh.expect(PROMPT)
        dsh.send("/report")
        dsh.expect_exact("no failed turn to report yet\r\n")
        dsh.expect(PROMPT)
        fault.push(Behaviour("http_500"))
        dsh.send("hello")
        line = "[turn failed SERVER] Internal Server Error"
        fix = f"  fix: the endpoint at {fault.url.removeprefix('http://')} is having trouble; retry later"
        dsh.expect_exact(f"{line}\r\n{fix}\r\n")
        dsh.expect(PROMPT)
        dsh.send(f"/report {link}")
        dsh.expect_exact(f"/report failed: report file {link} cannot be written: it is a symbolic link, "
                         "not a regular file\r\n")
        dsh.expect(PROMPT)
        dsh.send(f"/report {capsule}")
        dsh.expect_exact("report: running dsh doctor's steps again for it…\r\n")
        dsh.expect_exact("✓ configuration: ")  # the doctor's progress, step by step
        dsh.expect_exact(f"report written to {capsule} (it holds this turn's requests, like --record: read it "
                         "before you share it)\r\n")
        dsh.expect(PROMPT)
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    finally:
        dsh.close()
    assert not (home / "elsewhere").exists()
    assert stat.S_IMODE(capsule.stat().st_mode) == 0o600
    text = capsule.read_text(encoding="utf-8")
    assert KEY not in text
    records = [json.loads(row) for row in text.splitlines()]
    report = records[1]
    assert (report["turn"], report["fix"]) == (line, fix.strip())
    assert report["why"] == ["last failure (SERVER, HTTP 500, request id fault-0001):",
                             "  dsh.llm.errors.LlmError: Internal Server Error"]
    assert [(r["type"], r["n"]) for r in records[2:]] == [("request", 1), ("response", 1), ("data", 1), ("end", 1)]
    assert records[3]["status"] == 500
