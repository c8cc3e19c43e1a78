"""Edits end to end: a real dsh in a pseudo-terminal (and in -p) against the fault server scripting the calls.

The diff is on the screen before the question, the file changes only after ``y``, ``n`` leaves it, a diff
taller than the screen needs ``v`` first; ``-p`` denies edits unless ``--allow-edits``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_pty import KEY, Dsh, home, pty_env, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

pytestmark = pytest.mark.timeout(60)

DENIAL = ("  [tool result] Error: file edits need approval and no one can approve them here; "
          "--allow-edits (or allow_edits = true in config.toml) allows them")


def _call(call_id: str, name: str, **arguments: object) -> Behaviour:
    return Behaviour("tool_call", id=call_id, name=name, arguments=json.dumps(arguments))


@pytest.fixture
def work(home: Path) -> Path:  # noqa: F811
    (home / "config" / "dsh").mkdir(exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    (home / "work").mkdir()
    (home / "work" / "notes.txt").write_text("remember the milk\n")
    return home / "work"


def test_the_diff_is_shown_and_the_file_changes_only_after_y(work: Path, spawn) -> None:  # noqa: F811
    notes = work / "notes.txt"
    script = [
        _call("r1", "read_file", path="notes.txt"),
        _call("e1", "edit_file", path="notes.txt", old_string="milk", new_string="oat milk"),
        Behaviour("text", text="first done\n"),
        _call("e2", "edit_file", path="notes.txt", old_string="oat milk", new_string="soy milk"),
    ]
    with FaultServer(script=script, default=Behaviour("text", text="second done\n")) as server:
        dsh: Dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("buy oat milk")
        dsh.wait_screen("  [approve] edit_file notes.txt (+1 -1)  (y / n / a)")
        for line in ("      --- notes.txt", "      +++ notes.txt", "      @@ -1 +1 @@", "      -remember the milk",
                     "      +remember the oat milk"):
            assert line in dsh.screen
        assert notes.read_text() == "remember the milk\n"  # asked, not yet written
        dsh.child.send("y")
        # committed above the prompt: coloured on a TTY (named styles), then the answer
        dsh.expect_exact("      \x1b[31m-remember the milk\x1b[0m\r\n      \x1b[32m+remember the oat milk\x1b[0m\r\n"
                         "  [approve] edit_file notes.txt (+1 -1)  (y / n / a) yes\r\n")
        dsh.expect_exact("  [tool result] edited notes.txt: 1 replacement (+1 -1)\r\n")
        dsh.expect_exact("first done\r\n")
        assert notes.read_text() == "remember the oat milk\n"
        dsh.prompt()
        dsh.send("make it soy")
        dsh.expect_exact("  [approve] edit_file notes.txt (+1 -1)  (y / n / a)")
        dsh.child.send("n")
        dsh.expect_exact("(y / n / a) no\r\n")
        dsh.expect_exact("  [tool result] Error: the user denied this edit\r\n")
        dsh.expect_exact("second done\r\n")
        dsh.prompt()
    assert notes.read_text() == "remember the oat milk\n"
    assert server.requests[-1].json["messages"][-1]["content"] == "Error: the user denied this edit"


def test_a_diff_taller_than_the_screen_must_be_viewed_before_y(work: Path, spawn) -> None:  # noqa: F811
    content = "".join(f"line {n}\n" for n in range(60))
    script = [_call("w1", "write_file", path="big.txt", content=content)]
    diff = "--- /dev/null\n+++ big.txt\n@@ -0,0 +1,60 @@\n" + "\n".join(f"+line {n}" for n in range(60))
    diff_size = f"63 lines / {len(diff)} chars"
    with FaultServer(script=script, default=Behaviour("text", text="done\n")) as server:
        dsh: Dsh = spawn(cwd=work, rows=24, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("write a big file")
        head = "  [approve] write_file big.txt (new file, +60)"
        dsh.wait_screen(f"{head}: diff is {diff_size} \u2014 v to view  (v / n)")
        dsh.child.send("y")  # not shown yet: does not count
        dsh.child.send("v")
        dsh.expect_exact(f"  [diff] write_file big.txt (new file, +60), {diff_size}:\r\n      --- /dev/null\r\n")
        dsh.expect_exact("      \x1b[32m+line 59\x1b[0m\r\n")  # the whole diff, to its last line
        dsh.wait_screen(f"{head}: the diff above ({diff_size})  (y / n / a)")
        assert not (work / "big.txt").exists()
        dsh.child.send("y")
        dsh.expect_exact(f"{head}: the diff above ({diff_size})  (y / n / a) yes\r\n")
        dsh.expect_exact("  [tool result] created big.txt (60 lines)\r\n")
        dsh.prompt()
    assert (work / "big.txt").read_text() == content


def _print_run(work: Path, home: Path, url: str, *flags: str, stdin: str | None = None  # noqa: F811
               ) -> subprocess.CompletedProcess[str]:
    """``dsh [flags] -p 'write it'``, or piped ``stdin`` when given."""
    env = pty_env(home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=url, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    prompt = ["-p", "write it"] if stdin is None else []
    # stdout and stderr together: the test pins the lines, not which stream carries them
    return subprocess.run([sys.executable, "-m", "dsh.repl", *flags, *prompt], cwd=work, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30,
                          input=stdin if stdin is not None else "")


def test_print_and_piped_runs_deny_edits_unless_allow_edits(work: Path, home: Path) -> None:  # noqa: F811
    call = _call("w1", "write_file", path="new.txt", content="hello\n")
    with FaultServer(script=[call], default=Behaviour("text", text="ok\n")) as server:
        denied = _print_run(work, home, server.url)
        assert denied.returncode == 0, denied.stdout
        assert DENIAL + "\n" in denied.stdout and denied.stdout.endswith("\nok\n")
        assert not (work / "new.txt").exists()
        sent = server.requests[-1].json["messages"][-1]
        assert sent["role"] == "tool" and sent["content"] == DENIAL.removeprefix("  [tool result] ")
        server.push(call)
        piped = _print_run(work, home, server.url, stdin="write it\n")
        assert piped.returncode == 0 and DENIAL + "\n" in piped.stdout and not (work / "new.txt").exists()
        server.push(call)
        allowed = _print_run(work, home, server.url, "--allow-edits")
        assert allowed.returncode == 0, allowed.stdout
        assert "  [tool result] created new.txt (1 line)\n" in allowed.stdout
    assert (work / "new.txt").read_text() == "hello\n"


def test_allow_edits_in_the_config_file_and_outside_paths_stay_refused(work: Path, home: Path) -> None:  # noqa: F811
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\nallow_edits = true\n")
    outside = home / "outside.txt"
    script = [_call("w1", "write_file", path="inside.txt", content="in\n"),
              _call("w2", "write_file", path=str(outside), content="out\n")]
    with FaultServer(script=script, default=Behaviour("text", text="ok\n")) as server:
        run = _print_run(work, home, server.url)
    assert run.returncode == 0, run.stdout
    assert "  [tool result] created inside.txt (1 line)\n" in run.stdout
    refused = f"  [tool result] Error: {outside} is outside the working tree; unattended edits stay inside it\n"
    assert refused in run.stdout
    assert (work / "inside.txt").read_text() == "in\n" and not outside.exists()


def test_the_demo_write_file_then_edit_file_scenarios(work: Path, spawn) -> None:  # noqa: F811
    demo = work / "dsh-demo.txt"
    dsh: Dsh = spawn("--demo", "--scenario", "write-file", cwd=work)
    dsh.prompt()
    dsh.send("write a file")
    dsh.wait_screen("  [approve] write_file dsh-demo.txt (new file, +2)  (y / n / a)")
    assert "      +Hello from the dsh demo." in dsh.screen and not demo.exists()
    dsh.child.send("y")
    dsh.expect_exact("  [tool result] created dsh-demo.txt (2 lines)\r\n")
    dsh.prompt()
    dsh.send("/scenario edit-file")
    dsh.prompt()
    dsh.send("change it")
    dsh.wait_screen("  [approve] edit_file dsh-demo.txt (+1 -1)  (y / n / a)")
    assert "      -Hello from the dsh demo." in dsh.screen
    assert "      +Hello again: edit_file changed this line." in dsh.screen
    dsh.child.send("y")
    dsh.expect_exact("  [tool result] edited dsh-demo.txt: 1 replacement (+1 -1)\r\n")
    dsh.prompt()
    assert demo.read_text() == (
        "Hello again: edit_file changed this line.\nThis file was written by the write_file tool.\n"
    )


def test_ctrl_c_at_the_edit_question_cancels_the_turn_and_leaves_the_file(work: Path, spawn) -> None:  # noqa: F811
    script = [_call("w1", "write_file", path="new.txt", content="x\n")]
    with FaultServer(script=script, default=Behaviour("text", text="done\n")) as server:
        dsh: Dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("write it")
        dsh.wait_screen("  [approve] write_file new.txt (new file, +1)  (y / n / a)")
        dsh.child.sendintr()
        dsh.expect_exact("[turn aborted] cancelled\r\n")
        dsh.prompt()
    assert not (work / "new.txt").exists()


def test_an_approved_edit_is_undone_in_the_terminal(work: Path, spawn) -> None:  # noqa: F811
    """The interactive app: ``y`` writes the edit, ``/undo`` takes it back (docs/safety.md, "Undo and rewind")."""
    notes = work / "notes.txt"
    script = [
        _call("r1", "read_file", path="notes.txt"),
        _call("e1", "edit_file", path="notes.txt", old_string="milk", new_string="oat milk"),
        Behaviour("text", text="first done\n"),
    ]
    with FaultServer(script=script, default=Behaviour("text", text="noted\n")) as server:
        dsh: Dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("buy oat milk")
        dsh.wait_screen("  [approve] edit_file notes.txt (+1 -1)  (y / n / a)")
        dsh.child.send("y")
        dsh.expect_exact("first done\r\n")
        assert notes.read_text() == "remember the oat milk\n"
        dsh.prompt()
        dsh.send("/undo")
        dsh.expect_exact("undo turn 1:\r\n")  # each line is written on its own (a wrap-mode reset before it)
        dsh.expect_exact("  reverted notes.txt\r\n")
        assert notes.read_text() == "remember the milk\n"
        dsh.prompt()
        dsh.send("/undo")
        dsh.expect_exact("nothing to undo: no turn of this session has file changes left to undo\r\n")
        dsh.prompt()
        dsh.send("what now?")
        dsh.expect_exact("noted\r\n")
    assert server.requests[-1].json["messages"][-1]["content"].startswith(
        "[the user undid file changes with /undo, back to before turn 1: notes.txt. ")
