"""The prompt cache on a real terminal (issue 37 part 3): each turn's dim usage line gives ``cache N%``, and a
turn whose hit rate dropped gets the line naming what changed right after its usage line."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

pytestmark = pytest.mark.timeout(90)

DIM, RESET = "\x1b[2m", "\x1b[0m"


def _answer(hit: int) -> Behaviour:
    return Behaviour("text", text="ok\n", usage={"prompt_tokens": 1000, "prompt_cache_hit_tokens": hit,
                                                 "prompt_cache_miss_tokens": 1000 - hit, "completion_tokens": 3})


def test_the_usage_line_gives_the_hit_rate_and_a_drop_is_named_after_it(home: Path, spawn) -> None:  # noqa: F811
    (home / "config" / "dsh").mkdir(exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    with FaultServer(script=[_answer(960), _answer(120)]) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("one")
        dsh.expect_exact(f"{DIM}tokens 1k in (960 cached) · 3 out · cache 96% · context 0.1% · ")
        dsh.prompt()
        dsh.send("two")
        dsh.expect_exact(f"{DIM}tokens 1k in (120 cached) · 3 out · cache 12% · context 0.1% · ")
        dsh.expect_exact("cache 12% (was 96%): nothing dsh sent before the new messages changed\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
