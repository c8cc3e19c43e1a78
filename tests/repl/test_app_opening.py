"""The first prompt reads keys before the shell is open (InteractiveApp.run_opening, docs/architecture.md, "Start-up and
lazy imports"): what is typed meanwhile is kept and acted on once it is, and a failure to open it ends the prompt.

The app runs in process over a pipe for its input; the test holds the shell's opening until it has typed.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from dsh.repl.app import InteractiveApp
from dsh.repl.config import Config
from dsh.repl.prompt_line import Toolbar
from dsh.repl.shell import Shell, StartupError

KEY = "sk-appOpeningKey000000000000000"
SHIFT_TAB = "\x1b[Z"


class DrawnEarly:
    """What dsh.repl.first_prompt.FirstPrompt is to the app: a banner and a session id, taken over or abandoned."""

    def __init__(self) -> None:
        self.banner = "dsh · banner"
        self.session_id = "20990101-000000-abcdef"
        self.taken_over = self.abandoned = 0

    def take_over(self) -> None:
        self.taken_over += 1

    def abandon(self) -> None:
        self.abandoned += 1


def _env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


@pytest.mark.anyio
async def test_keys_typed_before_the_shell_is_open_act_once_it_is(tmp_path: Path) -> None:
    """Shift+Tab and a whole line, typed while the shell is still opening: the mode goes to the session, the line
    waits for the shell and runs there (``/exit``: its status is the app's)."""
    config = Config(api_key=KEY, base_url="http://127.0.0.1:9")
    early, release = DrawnEarly(), anyio.Event()
    opened: list[Shell] = []
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        app = InteractiveApp(history=tmp_path / "history", config=config)

        async def open_shell() -> Shell:
            await release.wait()
            shell = Shell(config, app, color=False, env=_env(tmp_path))
            await shell.start(defer_agent=True, session_id=early.session_id)
            opened.append(shell)
            return shell

        async def type_then_release() -> None:
            pipe.send_text(SHIFT_TAB + "/exit\r")
            await anyio.sleep(0.3)  # the prompt reads them, the line waits
            assert not opened
            release.set()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(type_then_release)
                status = await app.run_opening(open_shell, first_prompt=early)
        finally:
            for shell in opened:
                await shell.aclose()
    assert status == 0
    [shell] = opened
    assert shell.session.id == early.session_id and early.taken_over == 1
    assert str(shell.session.permissions.mode) == "accept-edits"  # default, then Shift+Tab's next


@pytest.mark.anyio
async def test_a_shell_that_cannot_be_opened_ends_the_prompt_with_its_error(tmp_path: Path) -> None:
    config = Config(api_key=KEY, base_url="http://127.0.0.1:9")

    async def open_shell() -> Shell:
        raise StartupError(OSError("no sessions folder today"))

    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        app = InteractiveApp(history=tmp_path / "history", config=config)
        with pytest.raises(StartupError, match="no sessions folder today"):
            await app.run_opening(open_shell, first_prompt=DrawnEarly())  # no key at all: the prompt waits


def test_the_toolbar_before_the_shell_is_open_says_what_the_session_will(tmp_path: Path) -> None:
    """Drawn from the config first, then from the session: the same words, so the line does not change under the
    keys when the shell opens (the endpoint without its credentials either way)."""
    config = Config(api_key=KEY, base_url="https://user:hunter2@gateway.example/v1/", permission_mode="plan")
    with create_app_session(output=DummyOutput()):
        app = InteractiveApp(history=tmp_path / "history")
        shell = Shell(config, app, color=False, env=_env(tmp_path))
    before = Toolbar(config, lambda: 200).prompt_text(None)
    assert before == " deepseek-flash · https://***@gateway.example/v1 · mode: plan · /help"
    assert Toolbar(None, lambda: 200).prompt_text(shell) == before
    assert Toolbar(config, lambda: 40).prompt_text(None) == before[:39] + "…"
