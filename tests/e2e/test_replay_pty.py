"""`dsh --record` then `dsh --replay` in a real pseudo-terminal: the interactive REPL meets the same failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_pty import KEY, Dsh

from dsh.llm.loopback.fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)

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
    srv = FaultServer(default="reset_mid_stream").start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def _turn(dsh: Dsh, line: str) -> None:
    dsh.expect(PROMPT)
    dsh.send("hello")
    dsh.expect_exact(line)
    dsh.expect(PROMPT)
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


def test_an_interactive_recording_replays_interactively_to_the_same_line(home: Path, fault: FaultServer) -> None:
    trace = home / "trace.jsonl"
    line = (f"[main turn 1] Half an answer\r\n[turn failed TRANSPORT] stream from the endpoint at {fault.url} failed: "
            "ReadError: BrokenResourceError: [Errno 104] Connection reset by peer\r\n")
    live = Dsh(home, "--record", str(trace), DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=fault.url)
    try:
        _turn(live, line)
    finally:
        live.close()
    fault.stop()  # offline from here on

    replay = Dsh(home, "--replay", str(trace))
    try:
        replay.expect_exact(f"· replaying 1 recorded exchange(s) from {trace}")
        _turn(replay, line)
    finally:
        replay.close()
