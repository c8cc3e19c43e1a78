"""Durability: a process running a turn is SIGKILLed; reopening its log repairs it exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from dsh.agent_loop import SessionLog
from dsh.agent_loop.session_log import INTERRUPTED_TOOL_OUTPUT
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.agent_loop.agent_support import assert_well_formed, durable_types, read_log

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("agent_child_turn.py")


async def run_child_until(server: FaultServer, root: Path, mode: str, marker: str) -> Path:
    """Start the child, wait for ``marker`` on its stdout, SIGKILL it, reap it; returns the log path."""
    process = await anyio.open_process(
        [sys.executable, str(CHILD), str(REPO), server.url, str(root), mode],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    try:
        with anyio.fail_after(30):
            buffer = b""
            assert process.stdout is not None
            async for chunk in process.stdout:
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                lines += [line.decode() for line in complete]
                if marker in lines:
                    break
        assert marker in lines, lines
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()
    return Path(lines[0])


async def test_sigkill_mid_stream_then_reopen_repairs_once(tmp_path):
    async with FaultServer(script=["text", Behaviour("slow_text", text="a b c d e f g h i j " * 50)]) as server:
        path = await run_child_until(server, tmp_path, "stream", "streaming")
    before = path.read_bytes()
    _, records = read_log(path)  # every record the dead process wrote is intact and whole
    assert durable_types(records) == ["turn/start", "step/start", "assistant/message", "turn/end",
                                      "turn/start", "step/start"]
    assert [r["seq"] for r in records] == list(range(1, 7))

    log = SessionLog.open(path)
    assert log.repaired_turn == 2
    log.close()
    after = path.read_bytes()
    assert after.startswith(before)
    _, records = read_log(path)
    assert durable_types(records)[6:] == ["turn/end"]
    assert records[-1]["data"] == {"turn": 2, "reason": {"kind": "interrupted"}}
    assert_well_formed(records)

    again = SessionLog.open(path)  # the closer is appended once, not on every open
    assert again.repaired_turn is None and again.last_turn == 2
    again.close()
    assert path.read_bytes() == after


async def test_sigkill_while_tools_run_gives_pending_calls_failed_results(tmp_path):
    calls = [["t1", "quick", {}], ["t2", "block", {}]]
    async with FaultServer(script=["text", Behaviour("parallel_tool_calls", calls=calls)]) as server:
        path = await run_child_until(server, tmp_path, "tool", "tool running")
    _, records = read_log(path)
    assert durable_types(records)[4:] == ["turn/start", "step/start", "assistant/message", "tool/call",
                                          "tool/result", "tool/call"]
    log = SessionLog.open(path)
    assert log.repaired_turn == 2
    log.close()
    _, records = read_log(path)
    assert [(r["type"], r["data"].get("id"), r["data"].get("output")) for r in records[-2:]] == [
        ("tool/result", "t2", INTERRUPTED_TOOL_OUTPUT), ("turn/end", None, None)]
    assert records[-1]["data"]["reason"] == {"kind": "interrupted"}
    assert_well_formed(records)
