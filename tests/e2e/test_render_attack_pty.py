"""Attacks on the renderer and usage in a real pseudo-terminal (docs/reliability.md, "Attacks on the renderer
and usage").

A model that streams fences in slow languages and lines of 3 999 ``[`` used to freeze the REPL (lilypond: 100 s
for one line of 2 000 ``a``, with Ctrl-C ignored); a usage chunk with ``prompt_tokens = 10**400`` ended it
with ``dsh: internal error``. How fast Ctrl-C answers is measured by ``python -m bench --only ctrl_c_hostile``;
here the test waits for each line with the suite's usual timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

pytestmark = pytest.mark.timeout(90)

LILYPOND = "a" * 2000
BRACKETS = "[" * 3999
HOSTILE = (f"```lilypond\n{LILYPOND}\n```\n```systemd\n{'[A]=' * 500}\n```\n```maple\n{'a(' * 1000}\n```\n"
           + f"{BRACKETS}\n" * 600)
CODE, DIM, RESET = "\x1b[36m", "\x1b[2m", "\x1b[0m"


def _no_retry_config(home: Path) -> None:  # noqa: F811
    (home / "config" / "dsh").mkdir(exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")


def test_ctrl_c_cancels_while_a_hostile_answer_renders_and_the_next_turn_works(home: Path, spawn) -> None:  # noqa: F811
    _no_retry_config(home)
    slow = Behaviour("slow_text", text=HOSTILE, delay=0.01)  # about 6 s of stream unless cancelled
    with FaultServer(script=[slow], default=Behaviour("text", text="ok\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("render this")
        # Each slow fence's line is plain code, shown whole; then the [ runs, as written. Line by line, in
        # order: on a loaded machine the toolbar is redrawn between two lines (its bytes, not on the screen).
        for line in (f"{DIM}```lilypond{RESET}", f"{CODE}{LILYPOND}{RESET}", f"{DIM}```{RESET}",
                     f"{CODE}{'[A]=' * 500}{RESET}", f"{CODE}{'a(' * 1000}{RESET}", BRACKETS, BRACKETS):
            dsh.expect_exact(f"{line}\r\n")
        dsh.child.sendintr()
        dsh.expect_exact("[turn aborted] cancelled\r\n")
        dsh.prompt()
        dsh.send("again")
        dsh.expect_exact("[main turn 2] ok")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert len(server.requests) == 2


def test_absurd_usage_counts_show_as_zero_in_the_usage_line_and_cost(home: Path, spawn) -> None:  # noqa: F811
    _no_retry_config(home)
    huge = Behaviour("text", text="big\n", usage=dict.fromkeys(("prompt_tokens", "completion_tokens"), 10**400))
    negative = Behaviour("text", text="small\n", usage={"prompt_tokens": -95_400_000, "completion_tokens": -5,
                                                        "prompt_cache_hit_tokens": -1})
    with FaultServer(script=[huge, negative]) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("one")
        dsh.expect_exact(f"{DIM}tokens 0 in (8 cached) · 0 out · cache 67% · context 0.0% · <$0.0001{RESET}\r\n")
        dsh.prompt()
        dsh.send("two")
        dsh.expect_exact(f"{DIM}tokens 0 in · 0 out · cache 0% · context 0.0% · <$0.0001{RESET}\r\n")
        dsh.prompt()
        dsh.send("/cost")
        dsh.expect_exact("2 requests: tokens 0 in (8 cached) · 0 out · cache 50% · context 0.0% · <$0.0001")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
