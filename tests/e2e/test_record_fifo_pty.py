"""`dsh --record FIFO` on a terminal: one line and exit 2 before any prompt, where it used to block for good.

The open of a FIFO for writing waits for a reader, and Ctrl-C could not end it: the REPL never drew its
prompt (docs/record-replay.md, "What a recording holds").
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_pty import KEY, Dsh

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("target", ["--record", "--replay"])
def test_a_fifo_for_record_or_replay_fails_before_the_prompt_with_one_line(tmp_path: Path, target: str) -> None:
    for name in ("state", "config", "cache"):
        (tmp_path / name).mkdir()
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    dsh = Dsh(tmp_path, target, str(fifo), DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL="http://127.0.0.1:1")
    try:
        line = (f"dsh: failed to start: record file {fifo} cannot be written: it is a FIFO, not a regular file"
                if target == "--record" else
                f"dsh: failed to start: replay file {fifo} cannot be read: it is a FIFO, not a regular file")
        dsh.expect_exact(line + "\r\n")
        assert dsh.rest() == ""  # no banner, no prompt
        assert dsh.wait_exit() == 2
    finally:
        dsh.close()
