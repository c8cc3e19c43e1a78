"""Fuzzing the ACP reader: an agent process writes random garbage frames, then exits.

The agent (raw_acp_agent.py) answers the first ``k`` requests properly, then -- on the next one --
writes hypothesis-generated frames (jsonrpc_frames.py: benign, bad and raw bytes, never an answer to a
request the client has in flight) and exits with a chosen code or signal. The parent is the real ACP
provider and SDK client. Whatever arrived, the run settles ``error`` with a fixed diagnostic built only
from closed facts: the stage the exit interrupted and the observed exit code / signal. Nothing of the
garbage reaches the diagnostic or the output, and no process is left behind.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import anyio
import pytest
from dsh_harness import COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonrpc_frames import FRAMES, wire

from dsh.agent_loop.subagent.acp import from_config
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult

AGENT = str(Path(__file__).with_name("raw_acp_agent.py"))
NAME = "fuzz"
# Where an exit during the (k+1)-th request is reported: the handshake stages own theirs, then "process".
EXIT_STAGE = {0: "initialize", 1: "new-session", 2: "process"}
MARKER = "garbageMarker4af1"  # planted in every garbage batch; must never reach a diagnostic


def _exit_fact(code: int | None, sig: str | None) -> str:
    return f"signal: {sig}" if sig else f"exit code: {code}"


def expected_diagnostic(answered: int, code: int | None, sig: str | None) -> str:
    return (f"Subagent failure (provider: {NAME}; stage: {EXIT_STAGE[answered]}; category: process-exit; "
            f"{_exit_fact(code, sig)})")


async def run_agent(script: dict[str, object], workspace: str, prompt: str = "do the task") -> SubagentResult:
    provider = from_config(NAME, {
        "provider": "acp", "command": sys.executable, "args": [AGENT], "env": {"RAW_ACP": json.dumps(script)},
        "startup_timeout": 60, "prompt_timeout": 60, "eof_grace": 1.0, "term_grace": 1.0,
    })  # fmt: skip
    async with provider.run(SubagentRequest(description="fuzz", prompt=prompt, cwd=workspace)) as run:
        with anyio.fail_after(90):
            return await run.result()


_EXITS = st.one_of(st.tuples(st.integers(0, 125), st.none()), st.tuples(st.none(), st.sampled_from(
    ["SIGKILL", "SIGTERM", "SIGSEGV"])))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("acp-fuzz"))


@pytest.mark.usefixtures("no_leftover_processes")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(frames=FRAMES, answered=st.integers(0, 2), exit_=_EXITS)
def test_garbage_then_exit_settles_error_with_a_fixed_diagnostic(workspace: str, frames, answered, exit_) -> None:
    code, sig = exit_
    garbage = wire(frames) + f'{{"jsonrpc": "2.0", "method": "{MARKER}"}}\n{MARKER} not json\n'.encode()
    with tempfile.NamedTemporaryFile("wb", dir=workspace, suffix=".garbage", delete=False) as handle:
        handle.write(garbage)
    script = {"answer": answered, "garbage": handle.name, "exit_code": code, "signal": sig,
              "text": "partial", "stderr": f"stderr {MARKER}"}
    try:
        result = anyio.run(run_agent, script, workspace)
    finally:
        os.unlink(handle.name)
    assert result.stop_reason == "error"
    assert result.diagnostic == expected_diagnostic(answered, code, sig)
    assert MARKER not in result.output and MARKER not in (result.diagnostic or "")
    COUNTS["ACP garbage agents survived"] += 1


@pytest.mark.usefixtures("no_leftover_processes")
def test_a_huge_garbage_line_then_exit(workspace: str) -> None:
    path = Path(workspace) / "huge.garbage"
    path.write_bytes(b"\xff" * (12 * 1024 * 1024) + b"\n")  # over the SDK reader's limit, not a frame
    result = anyio.run(run_agent, {"answer": 1, "garbage": str(path), "exit_code": 7}, workspace)
    assert (result.stop_reason, result.diagnostic) == ("error", expected_diagnostic(1, 7, None))


@pytest.mark.usefixtures("no_leftover_processes")
def test_the_raw_agent_completes_when_it_is_not_told_to_fail(workspace: str) -> None:
    # The control: the same agent, answering everything, is a completed run with its text.
    result = anyio.run(run_agent, {"text": "all fine here"}, workspace)
    assert (result.stop_reason, result.diagnostic, result.output) == ("completed", None, "all fine here")
