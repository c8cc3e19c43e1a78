"""The REPL's one trust question for a project config (docs/configuration.md, "Project config"), in a real
terminal: asked before the first prompt, listing what would run in closed words; yes runs the repository's hook
and is remembered (the next start does not ask); no leaves it out with one line, and is remembered too."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer

QUESTION = "project config ~/work/.dsh/config.toml would run: hook UserPromptSubmit (touch). Trust it? [y/N] "


def repository(root: Path, marker: str) -> Path:
    work = root / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / ".dsh").mkdir()
    (work / ".dsh" / "config.toml").write_text(
        f'[[hooks.UserPromptSubmit]]\ncommand = "touch -m {root / marker}"\n', encoding="utf-8")
    return work


def one_turn(dsh) -> None:
    dsh.prompt()
    dsh.send("hi")
    dsh.expect_exact("done\r\n")
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


def test_yes_runs_the_hook_and_is_asked_once(home: Path, spawn) -> None:  # noqa: F811
    work = repository(home, "ran")
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.expect_exact(QUESTION)
        dsh.child.send("y\r")
        one_turn(dsh)
        assert (home / "ran").exists()
        (home / "ran").unlink()
        again = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        one_turn(again)
        assert "Trust it?" not in again.raw
    assert (home / "ran").exists()


def test_no_leaves_the_hook_out_with_one_line(home: Path, spawn) -> None:  # noqa: F811
    work = repository(home, "ran")
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.expect_exact(QUESTION)
        dsh.child.send("n\r")
        dsh.expect_exact("dsh: warning: project config ~/work/.dsh/config.toml is not trusted: hook UserPromptSubmit "
                         "(touch) not run (dsh trust trusts it)\r\n")
        one_turn(dsh)
    assert not (home / "ran").exists()
