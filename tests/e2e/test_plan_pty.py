"""The plan in a real terminal (docs/tools.md, "The plan: todo_write"): while it has open items the toolbar has a
line of its own for it, during the turn and at the prompt, cut to the terminal's width; the completed turn says how
many items are open; /plan shows the whole plan; /new leaves no plan and no line."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_modes_pty import _AnsweringDsh
from test_pty import KEY, home  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

pytestmark = pytest.mark.timeout(90)

LONG = "Fixing the off-by-one in the tokenizer's line counter, then the column counter beside it"
TODOS = [{"content": "Read the parser", "status": "completed"},
         {"content": "Fix the off-by-one", "status": "in_progress", "activeForm": LONG},
         {"content": "Run the tests\x1b]0;pwned\x07", "status": "pending"}]


def test_the_toolbar_shows_the_plan_while_items_are_open_and_plan_shows_it_whole(home: Path) -> None:  # noqa: F811
    (home / "config" / "dsh").mkdir()
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    script = [Behaviour("tool_call", id="call_p", name="todo_write", arguments={"todos": TODOS}, reasoning=""),
              Behaviour("slow_text", text="working on it|.|.|.|.|.|.|.|.|.", cut="|", delay=0.3)]
    with FaultServer(script=script, default=Behaviour("text", text="done")) as server:
        # A terminal that answers the cursor-position requests: only then is the prompt's toolbar drawn.
        dsh = _AnsweringDsh(home, cols=60, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url,
                            PROMPT_TOOLKIT_NO_CPR="0")
        try:
            _session(dsh)
        finally:
            dsh.close()
    assert "\x1b]0;pwned" not in dsh.raw  # the model's escape never reached the terminal


def _session(dsh: _AnsweringDsh) -> None:
    """The turn, the prompt, /plan, /new: the plan line is there while items are open, and only then."""
    dsh.prompt()
    line = " plan 1/3 ▸ Fixing the off-by-one in the tokenizer's line c…"  # 60 cells: cut to fit
    assert line not in dsh.screen
    dsh.send("fix it")
    dsh.wait_screen(line)  # during the turn, under the turn's toolbar
    dsh.expect_exact("[turn completed] 2 of 3 plan items still open\r\n")
    dsh.prompt()
    dsh.wait_screen(line)  # at the prompt, under its toolbar
    dsh.send("/plan")
    dsh.expect_exact("plan: 2 of 3 items open\r\n")
    dsh.expect(r"  \[x\] Read the parser\r?\n(?:\x1b\[\?7h)?  \[>\] Fix the off-by-one\r?\n(?:\x1b\[\?7h)?"
               r"  \[ \] Run the tests␛\]0;pwned␇\r?\n")
    dsh.prompt()
    dsh.send("/new")
    dsh.expect_exact("new session ")
    dsh.prompt()
    dsh.send("/plan")
    dsh.expect_exact("no plan yet (the model keeps one with todo_write)")
    dsh.prompt()
    assert line not in dsh.screen
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0
