"""Permission modes in a real terminal (docs/safety.md, "Permission modes"): Shift+Tab cycles the mode at the
prompt and during a turn, the toolbar shows it, and the next tool call gets it: an edit inside the tree in
accept-edits applies without a question, a shell command in plan is refused with the line the model gets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_pty import KEY, Dsh, home, spawn  # noqa: F401  (fixtures)

from dsh.agent_loop.permissions import PLAN_REFUSAL
from dsh.agent_loop.sandbox import sandbox_problem
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.real_parts import missing

pytestmark = pytest.mark.timeout(90)

SHIFT_TAB = "\x1b[Z"


def _call(call_id: str, name: str, **arguments: object) -> Behaviour:
    return Behaviour("tool_call", id=call_id, name=name, arguments=json.dumps(arguments))


@pytest.fixture
def work(home: Path) -> Path:  # noqa: F811
    (home / "config" / "dsh").mkdir(exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    (home / "work").mkdir()
    return home / "work"


def test_shift_tab_during_a_turn_and_at_the_prompt_changes_what_the_next_call_may_do(
        work: Path, spawn) -> None:  # noqa: F811
    script = [
        _call("s1", "run_shell", command="echo one > one.txt"),
        _call("w1", "write_file", path="new.txt", content="written unasked\n"),
        Behaviour("text", text="first done\n"),
        _call("s2", "run_shell", command="echo two > two.txt"),
    ]
    with FaultServer(script=script, default=Behaviour("text", text="second done\n")) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("write two files")
        question = "  [approve] run_shell: echo one > one.txt  (y / n / a)"
        dsh.wait_screen(question)
        assert "· mode: default ·" in dsh.screen.text()  # the turn's toolbar, while it asks
        dsh.child.send(SHIFT_TAB)  # while the question waits: it applies to the next call
        dsh.wait_screen("· mode: accept-edits ·")
        dsh.child.send("y")
        dsh.expect_exact(question + " yes\r\n")
        dsh.expect_exact("  [tool result] (no output)\r\n")
        dsh.expect_exact("    [exit code: 0]\r\n")
        # accept-edits: the write inside the tree is not asked.
        dsh.expect_exact('  [tool call] write_file({"path": "new.txt", "content": "written unasked\\n"})\r\n')
        dsh.expect_exact("  [tool result] created new.txt (1 line)\r\n")
        dsh.expect_exact("first done\r\n")
        dsh.prompt()
        dsh.child.send(SHIFT_TAB)  # at the prompt: accept-edits -> plan
        dsh.send("and the next")
        dsh.expect_exact('  [tool call] run_shell({"command": "echo two > two.txt"})\r\n')
        dsh.expect_exact(f"  [tool result] {PLAN_REFUSAL}\r\n")
        dsh.expect_exact("second done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert (work / "one.txt").read_text() == "one\n" and (work / "new.txt").read_text() == "written unasked\n"
    assert not (work / "two.txt").exists()
    assert "(y / n / a)" not in dsh.raw.split("first done")[0].split(question + " yes")[1]  # no second question
    # The session log: the first turn started in default (no field), the second in plan.
    modes = []
    for path in sorted((work.parent / "state" / "dsh" / "sessions").glob("*.jsonl")):
        for line in path.read_text().splitlines()[1:]:
            record = json.loads(line)
            if record["type"] == "turn/start":
                modes.append(record["data"].get("mode"))
    assert modes == [None, "plan"]


class _AnsweringDsh(Dsh):
    """A dsh whose terminal answers prompt_toolkit's cursor-position requests, as a real one does: only then is
    the toolbar under the prompt drawn (the other tests run with PROMPT_TOOLKIT_NO_CPR=1)."""

    answered = 0

    def _pump(self, timeout: float) -> None:
        super()._pump(timeout)
        while self.answered < self.raw.count("\x1b[6n"):
            self.answered += 1
            self.child.send(f"\x1b[{self.screen.row + 1};{self.screen.col + 1}R")


def _prompt_toolbar(dsh: Dsh, url: str, mode: str) -> None:
    row = f" deepseek-flash · {url} · mode: {mode} · /help"
    dsh._wait(lambda: row in dsh.screen.text().split("\n"), repr(row), 20)


@pytest.mark.parametrize("sandbox", [False, True], ids=["no sandbox", "sandbox"])
def test_the_prompt_toolbar_shows_each_mode_as_shift_tab_cycles(home: Path, work: Path, sandbox: bool  # noqa: F811
                                                              ) -> None:
    if sandbox:
        if shutil.which("bwrap") is None:
            missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
        if (problem := sandbox_problem()) is not None:
            missing("a working bubblewrap", problem)
        (home / "config" / "dsh" / "config.toml").write_text('max_retries = 0\nsandbox = "bwrap"\n')
    cycle = ["accept-edits", "plan", *(["auto"] if sandbox else []), "default"]
    with FaultServer(script=[], default=Behaviour("text", text="hi\n")) as server:
        dsh = _AnsweringDsh(home, cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url,
                            PROMPT_TOOLKIT_NO_CPR="0")
        try:
            dsh.prompt()
            _prompt_toolbar(dsh, server.url, "default")
            for mode in cycle:
                dsh.child.send(SHIFT_TAB)
                _prompt_toolbar(dsh, server.url, mode)
            dsh.child.sendeof()
            assert dsh.wait_exit() == 0
        finally:
            dsh.close()
