"""The banner and prompt drawn before prompt_toolkit runs (dsh.repl.first_prompt), in a real pty.

A wrapper holds start-up right after that early draw until the test opens a FIFO, so that the window in
which prompt_toolkit is still loading is as long as the test needs: keys typed there are not shown, then
shown once, at the prompt, and sent; Ctrl-C or SIGTERM there ends dsh with the terminal as it was found
(``stty -a`` before and after, from the same shell) and the prompt line erased.

:class:`HeldDsh` also runs dsh unheld (``held=False``) for the tests of the signals that end dsh once
prompt_toolkit owns the terminal (test_ending_signals_pty.py); the ``held_dsh`` fixture ends whatever a
failed test left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from pty_screen import Screen
from test_pty import home, prompts_in_log, pty_env  # noqa: F401  (fixture: home)

from dsh.llm.loopback.fault_server import closed_port
from tests.waiting import PROMPTLY, wait_until

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-firstPromptPty00000000000000000"
ROWS, COLS = 24, 160

# The pid written first; start-up held after the early draw until the gate FIFO is opened for writing (no
# gate: not held), the gate's ".drawn" file written once the draw returned.
WRAPPER = """
import os, sys
gate, pid_file = sys.argv.pop(1), sys.argv.pop(1)
with open(pid_file + ".tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.replace(pid_file + ".tmp", pid_file)
if gate:
    from dsh.repl.first_prompt import FirstPrompt
    early_draw = FirstPrompt.draw
    def held(self):
        drawn = early_draw(self)
        open(gate + ".drawn", "w").close()
        with open(gate) as handle:
            handle.read()
        return drawn
    FirstPrompt.draw = held
sys.argv[0] = "dsh"
from dsh.repl.cli import main
main()
"""


class HeldDsh:
    """``stty -a``; dsh held after its early draw; ``rc=STATUS``; ``stty -a`` again, in one shell on a pty.

    ``ignored``: signals the shell ignores, and dsh inherits ignored (``trap '' INT QUIT``: what a
    non-interactive shell does to a background job, and what some CI runners do to every step).
    """

    def __init__(self, home: Path, *args: str, held: bool = True, ignored: str = "", **env: str) -> None:  # noqa: F811
        self.home = home
        self.gate = home / "gate"
        self.finished = False
        if held:
            os.mkfifo(self.gate)
        dsh = shlex.join([sys.executable, "-c", WRAPPER, str(self.gate) if held else "", str(home / "pid"), *args])
        # The trap keeps the shell alive through a Ctrl-C or Ctrl-\ (its child gets the default action back).
        traps = "trap : INT QUIT; " + (f"trap '' {ignored}; " if ignored else "")
        script = f"{traps}stty -a > {home}/before; {dsh}; echo rc=$?; stty -a > {home}/after; echo done"
        self.child = pexpect.spawn("/bin/sh", ["-c", script], cwd=str(REPO), env=pty_env(home, **env),
                                   encoding="utf-8", timeout=20, dimensions=(ROWS, COLS))
        self.screen = Screen(ROWS, COLS)
        self.raw = ""

    def pump(self, until: str | None = None, timeout: float = 20.0) -> None:
        """Read what dsh wrote, until ``until`` is on the screen (or for ``timeout`` seconds if None)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (until is None or until not in self.screen.text()):
            try:
                data = self.child.read_nonblocking(65536, timeout=0.05)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                break
            self.raw += data
            self.screen.feed(data)
        if until is not None:
            assert until in self.screen.text(), f"{until!r} not on the screen:\n{self.screen.text()}\n{self.raw!r}"

    def release(self) -> None:
        with open(self.gate, "w"):
            pass

    def pid(self) -> int:
        """dsh's pid (written before it starts)."""
        path = self.home / "pid"
        return int(wait_until(lambda: path.exists() and path.read_text(), PROMPTLY, "dsh's pid"))

    def drawn(self) -> None:
        """Returns once the early draw returned (held start-up waits at the gate now)."""
        marker = self.gate.with_name(self.gate.name + ".drawn")
        wait_until(marker.exists, PROMPTLY, "the early draw")

    def finish(self) -> None:
        self.pump("done")
        self.child.expect(pexpect.EOF)
        self.child.close()
        self.finished = True

    def close(self) -> None:
        """A failed test's leftovers ended: dsh by its pid (it may ignore the hangup), then the shell."""
        if self.finished:
            return
        path = self.home / "pid"
        if path.exists() and path.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(path.read_text()), signal.SIGKILL)
        self.child.close(force=True)

    def lines(self) -> list[str]:
        return self.screen.text().splitlines()

    def terminal_as_found(self) -> bool:
        return (self.home / "before").read_text() == (self.home / "after").read_text()


StartDsh = Callable[..., HeldDsh]  # the held_dsh fixture


@pytest.fixture
def held_dsh(home: Path) -> Iterator[StartDsh]:  # noqa: F811
    """``HeldDsh(home, ...)``; whatever a failed test left running is ended after it."""
    started: list[HeldDsh] = []

    def start(*args: str, **kwargs: Any) -> HeldDsh:
        started.append(HeldDsh(home, *args, **kwargs))
        return started[-1]

    yield start
    for dsh in started:
        dsh.close()


def _banner_then_prompt(dsh: HeldDsh) -> str:
    """The screen's first two lines once the early draw is done: the banner, and the prompt."""
    dsh.pump("Ctrl-D exits")
    dsh.drawn()
    dsh.pump(timeout=0.2)
    banner, prompt = dsh.lines()[:2]
    assert banner.startswith("dsh ") and banner.endswith(" · /help · Ctrl-D exits")
    assert prompt == ">"  # "> ", trailing space stripped by the screen
    return banner


def test_keys_typed_before_prompt_toolkit_runs_are_shown_once_at_the_prompt_and_sent(
    home: Path, held_dsh: StartDsh  # noqa: F811
) -> None:
    (home / "config" / "dsh").mkdir(parents=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    with closed_port() as port:
        dsh = held_dsh(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}")
        banner = _banner_then_prompt(dsh)
        dsh.child.send("hello\r")
        dsh.pump(timeout=0.5)
        assert "hello" not in dsh.screen.text()  # no echo from the terminal while prompt_toolkit loads
        dsh.release()
        dsh.pump("[main turn 1] [turn failed TRANSPORT]")  # the typed line was sent: a turn to the closed port
        text = dsh.screen.text()
        assert text.count("> hello") == 1 and text.count("hello") == 1, text
        assert text.count("Ctrl-D exits") == 1 and dsh.lines()[0] == banner  # drawn once, never redrawn
        dsh.pump("(environment)\n>")  # the next prompt
        dsh.child.sendeof()
        dsh.finish()
    assert "rc=0" in dsh.screen.text()
    assert dsh.terminal_as_found()
    assert prompts_in_log(home) == ["hello"]
    # The banner named the session that was then created.
    [log] = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    session_id = json.loads(log.read_text().splitlines()[0])["id"]
    assert f"· session {session_id} ·" in banner


def test_ctrl_c_while_prompt_toolkit_loads_exits_130_and_leaves_the_terminal_as_found(held_dsh: StartDsh) -> None:
    dsh = held_dsh(DEEPSEEK_API_KEY=KEY)
    _banner_then_prompt(dsh)
    dsh.child.send("typed")
    dsh.child.sendintr()
    dsh.finish()
    lines = dsh.lines()
    assert lines[1] == "rc=130", lines  # the prompt line erased, the shell's output where it was
    assert "typed" not in dsh.screen.text()
    assert dsh.terminal_as_found()


def test_sigterm_while_prompt_toolkit_loads_exits_143_and_leaves_the_terminal_as_found(held_dsh: StartDsh) -> None:
    dsh = held_dsh(DEEPSEEK_API_KEY=KEY)
    _banner_then_prompt(dsh)
    os.kill(dsh.pid(), signal.SIGTERM)
    dsh.finish()
    assert dsh.lines()[1] == "rc=143", dsh.lines()
    assert dsh.terminal_as_found()


def test_ctrl_d_typed_while_prompt_toolkit_loads_ends_dsh_at_the_prompt(held_dsh: StartDsh) -> None:
    """Typed keys reach prompt_toolkit byte for byte: a Ctrl-D is not taken by the terminal's line editing."""
    dsh = held_dsh(DEEPSEEK_API_KEY=KEY)
    _banner_then_prompt(dsh)
    dsh.child.sendeof()
    dsh.release()
    dsh.finish()
    assert "rc=0" in dsh.screen.text()
    assert dsh.terminal_as_found()


def test_the_early_banner_is_sanitized_like_every_other_line(held_dsh: StartDsh) -> None:
    """A model name with an OSC title sequence (DSH_MODEL is the user's, but the rule has no exceptions)."""
    dsh = held_dsh(DEEPSEEK_API_KEY=KEY, DSH_MODEL="evil\x1b]0;pwned\x07model")
    banner = _banner_then_prompt(dsh)
    assert "· evil␛]0;pwned␇model ·" in banner
    assert "\x1b]0;" not in dsh.raw
    dsh.child.sendeof()
    dsh.release()
    dsh.finish()
    assert "rc=0" in dsh.screen.text()
