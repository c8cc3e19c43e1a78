"""agent_loop/prompt_shell.py with real children: a command that never ends is killed at its timeout (its group
too), a cancel kills it at once, the prefilled marker is dropped before a command, and ``@!`` is a word."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from dsh.agent_loop.prompt_shell import PromptShell, has_marker, unmarked
from dsh.llm.redact import Redactor

pytestmark = pytest.mark.anyio


async def test_a_command_that_never_ends_is_killed_at_its_timeout(tmp_path: Path) -> None:
    shell = PromptShell(sandbox=None, network=False, timeout=0.5)
    started = time.monotonic()
    ran, event = await shell.run("echo before; sleep 60 & sleep 60", cwd=str(tmp_path), redactor=Redactor(()))

    assert time.monotonic() - started < 10
    assert ran.output == "before\n" and ran.status == "[timed out after 0.5s; the command was killed]"
    assert event is not None and event.timed_out and shell.kept is ran


async def test_a_cancel_kills_it_at_once(tmp_path: Path) -> None:
    shell = PromptShell(sandbox=None, network=False)
    started = time.monotonic()
    with anyio.move_on_after(0.5):
        await shell.run("sleep 60", cwd=str(tmp_path), redactor=Redactor(()))
    assert time.monotonic() - started < 5 and shell.kept is None


async def test_a_command_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    shell = PromptShell(sandbox=None, network=False, shell=str(tmp_path / "no-such-shell"))
    ran, event = await shell.run("true", cwd=str(tmp_path), redactor=Redactor(()))
    assert event is None and ran.status.startswith("[not run: ") and "\n" not in ran.status


def test_the_marker() -> None:
    assert unmarked("@! !ls") == "!ls" and unmarked("@!   /help") == "/help" and unmarked("@! why") == "@! why"
    assert has_marker("@! why") and has_marker("see @!") and not has_marker("a@!") and not has_marker("@!x")
