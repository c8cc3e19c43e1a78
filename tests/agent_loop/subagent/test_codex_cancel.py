"""Ctrl-C during a Codex run ends the app-server on a short ladder, whatever the binary does with its stdin.

A Codex app-server that does not exit when its stdin closes (openai-codex-cli-bin 0.163 was measured taking
3.9-4.0 s to end after a Ctrl-C) must not hold a cancel for the 2 s stdin grace and the 2 s SIGTERM grace of a
normal end: a cancelled run goes to SIGTERM after a fraction of a second (docs/subagents.md, "Codex"). The
app-server here is the scripted one (repl/demo/fake_codex_app_server.py), a real child that lingers after EOF.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dsh.agent_loop.subagent import codex
from dsh.agent_loop.subagent.codex import CodexRun
from tests.agent_loop.subagent.product_support import FAKE_CODEX_SERVER, request

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]


async def _cancelled(tmp_path: Path, linger: float, **config: float) -> CodexRun:
    """A run whose backend hangs (Codex never confirms the interrupt), cancelled once its turn started; the
    app-server still runs ``linger`` seconds after its stdin closed."""
    env = {"FAKE_CODEX_SCENARIO": "deaf_to_interrupt", "FAKE_CODEX_LINGER": str(linger)}
    provider = codex.from_config("codex", {"command": [sys.executable, FAKE_CODEX_SERVER], "env": env, **config})
    async with provider.run(request(tmp_path)) as run:
        assert isinstance(run, CodexRun)
        await run.turn_started.wait()
        await run.dispose()
    return run


async def test_a_cancel_does_not_wait_out_the_stdin_grace_of_an_app_server_deaf_to_eof(tmp_path: Path) -> None:
    # It would exit by itself 1.5 s after EOF: within a normal end's 2 s grace, never within a cancel's.
    run = await _cancelled(tmp_path, linger=1.5)
    assert (await run.result()).stop_reason == "aborted"
    assert run.process is not None and run.process.exited  # reaped before dispose returned
    assert run.teardown is not None and run.teardown.tier == "sigterm"


async def test_graces_set_in_the_table_still_hold_for_a_cancel(tmp_path: Path) -> None:
    run = await _cancelled(tmp_path, linger=0.2, eof_grace=60)
    assert (await run.result()).stop_reason == "aborted"
    assert run.teardown is not None and run.teardown.tier == "eof"  # the table's 60 s, not the cancel's

