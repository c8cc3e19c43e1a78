"""A failed child's first stderr lines are kept with its last ones: the reason an agent gives before a long usage
text or trace (gemini-cli's ``Unknown arguments: …`` above 45 lines of help) reaches ``/why`` and dsh.log, masked,
inert and bounded, never the model (docs/subagents.md, "The agent's own words")."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from dsh.agent_loop.process import ManagedProcess
from dsh.agent_loop.subagent import acp
from dsh.agent_loop.subagent.result import (
    STDERR_HEAD_BYTES,
    STDERR_HEAD_LINES,
    STDERR_TAIL_BYTES,
    STDERR_TAIL_LINES,
    SubagentFailure,
    SubagentResult,
)
from dsh.agent_loop.subagent.tool import foreground_output
from fixtures.fake_gemini import GEMINI_CLI_INSTALL, FakeGemini, gemini_cli, gemini_cli_env
from tests.agent_loop.subagent.product_support import request
from tests.real_parts import missing

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

SECRET = "tokenValue-0d9c4ab7e2"  # the value of a secret-named variable in the subagent's env
WORDS_HEAD = "the agent's own words (host-side only, masked):"


def _record(result: SubagentResult) -> SubagentFailure:
    assert isinstance(result.cause, SubagentFailure), result.cause
    return result.cause


async def _failing_start(command: list[str], cwd: Path, **env: str) -> SubagentResult:
    table = {"command": command, "env": {"AGENT_TOKEN": SECRET, **env}, "startup_timeout": 60}
    async with acp.from_config("probe", table).run(request(cwd)) as run:
        return await run.result()


@pytest.mark.real_product
async def test_gemini_cli_with_an_unknown_flag_keeps_its_reason_above_the_usage_text(
        tmp_path: Path, workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    agent = gemini_cli()
    if not agent.exists():
        missing("gemini-cli (npm)", GEMINI_CLI_INSTALL)
    with FakeGemini() as api, caplog.at_level(logging.INFO):
        env = gemini_cli_env(api, tmp_path / "gemini-home", key=None)
        result = await _failing_start([str(agent), "--acp", "--bogus-flag"], workdir, **env)
    assert result.diagnostic == (
        "Subagent failure (provider: probe; stage: initialize; category: process-exit; exit code: 1)")
    words = _record(result).words
    assert words.stderr_head[0] == "Unknown arguments: bogus-flag, bogusFlag"  # 45 lines of usage follow it
    assert words.stderr[-1] == "  -h, --help                      Show help  [boolean]"
    lines = words.lines()
    assert lines[:3] == [WORDS_HEAD, f"  stderr (first {len(words.stderr_head)} lines):",
                         "    Unknown arguments: bogus-flag, bogusFlag"]
    assert f"  stderr (last {len(words.stderr)} lines):" in lines
    logged = "\n".join(r.getMessage() for r in caplog.records if WORDS_HEAD in r.getMessage())
    assert "    Unknown arguments: bogus-flag, bogusFlag" in logged  # dsh.log has the same lines
    assert "Unknown arguments" not in foreground_output(result).text  # never the model's


async def test_the_first_lines_survive_a_stderr_longer_than_the_ring(tmp_path: Path) -> None:
    # What a Node agent says when it dies at start, then a trace far longer than the 64 KiB ring.
    script = tmp_path / "agent.py"
    script.write_text(
        "import sys\n"
        f"sys.stderr.write('Error: the reason, token {SECRET}\\n\\x1b[31mcolour\\x1b[0m \\u202eevil\\n')\n"
        "sys.stderr.write(''.join(f'    at frame {n:05} ' + 'x' * 300 + '\\n' for n in range(400)))\n"
        "sys.stderr.write('the last line\\n')\n"
        "sys.exit(3)\n", encoding="utf-8")
    result = await _failing_start([sys.executable, str(script)], tmp_path)
    assert result.diagnostic == (
        "Subagent failure (provider: probe; stage: initialize; category: process-exit; exit code: 3)")
    words = _record(result).words
    assert words.stderr_head[:2] == ("Error: the reason, token ***", "\\x1b[31mcolour\\x1b[0m \\u202eevil")
    assert len(words.stderr_head) <= STDERR_HEAD_LINES
    assert sum(len(line.encode()) + 1 for line in words.stderr_head) <= STDERR_HEAD_BYTES
    assert words.stderr[-1] == "the last line"
    assert len(words.stderr) <= STDERR_TAIL_LINES
    assert sum(len(line.encode()) + 1 for line in words.stderr) <= STDERR_TAIL_BYTES
    assert SECRET not in "\n".join(words.lines())


async def test_a_short_stderr_is_shown_once_in_order() -> None:
    code = "import sys; sys.stderr.write('first\\n\\nsecond\\nthird\\n'); sys.exit(1)"
    result = await _failing_start([sys.executable, "-c", code], Path.cwd())
    words = _record(result).words
    assert (words.stderr_head, words.stderr) == ((), ("first", "second", "third"))
    assert words.lines()[1:] == ["  stderr (last 3 lines):", "    first", "    second", "    third"]


async def test_the_head_is_only_what_the_ring_lost_in_whole_lines() -> None:
    code = "import sys; sys.stderr.write('one\\ntwo\\n' + 'three-is-long' * 4 + '\\nfour\\nfive\\n')"
    async with ManagedProcess([sys.executable, "-c", code], stderr_limit=24) as child:
        await child.wait_exit()
    assert child.stderr_lines() == "one\ntwo\nfour\nfive\n"  # the line the ring cut, and the head's end, left out
