"""Every signal that ends the interactive dsh gives the terminal back as it was found, in a real pty.

Three moments own the terminal differently: the early prompt (echo and line editing off, signals on:
dsh.repl.first_prompt), prompt_toolkit's prompt (raw mode: Ctrl-C and Ctrl-\\ are keys there, so those
signals come from ``kill``), and a turn's live view. A hangup (SIGHUP) or a quit (SIGQUIT, Ctrl-\\) at
any of them ends dsh with 128 + the signal's number, as SIGTERM does (143), and the same shell's
``stty -a`` afterwards is what it was before dsh started. A runner that starts dsh with SIGINT and SIGQUIT
ignored (a background job of a non-interactive shell, some CI steps) does not take Ctrl-C from the user.
"""

from __future__ import annotations

import os
import signal
import termios

import pytest
from test_first_prompt_pty import KEY, HeldDsh, StartDsh, _banner_then_prompt, held_dsh  # noqa: F401
from test_pty import home  # noqa: F401  (fixture: home, which held_dsh uses)

from tests.waiting import PROMPTLY, wait_until

pytestmark = pytest.mark.timeout(90)

ENDING = [pytest.param(signal.SIGHUP, 129, id="SIGHUP"), pytest.param(signal.SIGQUIT, 131, id="SIGQUIT")]


def _prompt_toolkit_owns_the_terminal(dsh: HeldDsh) -> None:
    """Its raw mode is on: signal keys off (the early prompt leaves them on, cooked mode too)."""

    def raw() -> bool:
        dsh.pump(timeout=0.05)
        return not termios.tcgetattr(dsh.child.child_fd)[3] & termios.ISIG  # the pty's own flags

    wait_until(raw, PROMPTLY, "prompt_toolkit's raw mode")


def _ended(dsh: HeldDsh, status: int) -> None:
    """dsh exited with ``status``, the prompt line erased (the shell wrote where it was) and the terminal as found."""
    dsh.finish()
    assert f"rc={status}" in dsh.lines(), dsh.lines()
    assert dsh.terminal_as_found(), ((dsh.home / "before").read_text(), (dsh.home / "after").read_text())


def test_ctrl_backslash_while_prompt_toolkit_loads_exits_131_and_leaves_the_terminal_as_found(
    held_dsh: StartDsh,  # noqa: F811
) -> None:
    dsh = held_dsh(DEEPSEEK_API_KEY=KEY)
    _banner_then_prompt(dsh)
    dsh.child.send("typed\x1c")  # Ctrl-\: the terminal's quit key, a SIGQUIT to the foreground group
    _ended(dsh, 131)
    assert dsh.lines()[1] == "rc=131"  # the prompt line erased
    assert "typed" not in dsh.screen.text()


@pytest.mark.parametrize(("signum", "status"), ENDING)
def test_a_signal_while_prompt_toolkit_loads_ends_dsh_and_leaves_the_terminal_as_found(
    held_dsh: StartDsh, signum: int, status: int  # noqa: F811
) -> None:
    dsh = held_dsh(DEEPSEEK_API_KEY=KEY)
    _banner_then_prompt(dsh)
    os.kill(dsh.pid(), signum)
    _ended(dsh, status)
    assert dsh.lines()[1] == f"rc={status}"


@pytest.mark.parametrize(("signum", "status"), ENDING)
def test_a_signal_at_prompt_toolkits_prompt_ends_dsh_and_leaves_the_terminal_as_found(
    held_dsh: StartDsh, signum: int, status: int  # noqa: F811
) -> None:
    dsh = held_dsh(held=False, DEEPSEEK_API_KEY=KEY)
    dsh.pump("Ctrl-D exits")
    _prompt_toolkit_owns_the_terminal(dsh)
    os.kill(dsh.pid(), signum)
    _ended(dsh, status)


def test_sighup_during_a_turn_cancels_it_and_leaves_the_terminal_as_found(held_dsh: StartDsh) -> None:  # noqa: F811
    dsh = held_dsh("--demo", "--scenario", "stall", held=False)
    _prompt_toolkit_owns_the_terminal(dsh)
    dsh.child.send("wait\r")
    dsh.pump("waiting for first token")  # the live view owns the terminal
    os.kill(dsh.pid(), signal.SIGHUP)
    _ended(dsh, 129)
    assert "[main turn 1] [turn aborted] cancelled" in dsh.screen.text()


@pytest.mark.parametrize(("key", "status"), [("\x03", 130), ("\x1c", 131)], ids=["ctrl-c", "ctrl-backslash"])
def test_keys_end_the_early_prompt_when_the_runner_started_dsh_with_them_ignored(
    held_dsh: StartDsh, key: str, status: int  # noqa: F811
) -> None:
    """``trap '' INT QUIT`` before dsh: it sets its own handling at start, and the user's key still ends it."""
    dsh = held_dsh(ignored="INT QUIT", DEEPSEEK_API_KEY=KEY)
    _banner_then_prompt(dsh)
    dsh.child.send(key)
    _ended(dsh, status)
    assert dsh.lines()[1] == f"rc={status}"
