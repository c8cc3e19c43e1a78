"""Every scenario the scripted Claude Code CLI and Codex app-server play settles as the user reads it.

One test over both products' tables (tests/agent_loop/subagent/product_support.py): the stop reason, the
diagnostic to the letter, the partial output kept, no canary in the diagnostic, and no process left behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dsh.agent_loop.subagent import Provider
from tests.agent_loop.subagent.product_support import (
    CLAUDE_SCENARIOS,
    CODEX_SCENARIOS,
    assert_no_canary,
    fake_claude,
    fake_codex,
    request,
    run_once,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

CASES = [
    *(pytest.param(fake_claude, *row, id=f"claude-code-{row[0]}") for row in CLAUDE_SCENARIOS),
    *(pytest.param(fake_codex, *row, id=f"codex-{row[0]}") for row in CODEX_SCENARIOS),
]


@pytest.mark.parametrize(("fake", "scenario", "stop_reason", "diagnostic", "output"), CASES)
async def test_a_scripted_scenario_settles_with_its_stop_reason_diagnostic_and_output(
    tmp_path: Path,
    fake: Callable[[str], Provider],
    scenario: str,
    stop_reason: str,
    diagnostic: str | None,
    output: str,
) -> None:
    result = await run_once(fake(scenario), request(tmp_path))
    assert (result.stop_reason, result.diagnostic, result.output) == (stop_reason, diagnostic, output)
    assert_no_canary(result)
