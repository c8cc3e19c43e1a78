"""Pieces of the interactive app that can be checked without a terminal: output sink, history, completion,
and when the agent is built."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from dsh.agent_loop.extensions import Extensions
from dsh.agent_loop.session import Session
from dsh.repl.app import InteractiveApp, SafeHistory
from dsh.repl.config import Config
from dsh.repl.demo.catalogue import SCENARIOS
from dsh.repl.prompt_parts import SlashCompleter
from dsh.repl.shell import Shell, StartupError
from dsh.repl.terminal_sink import TerminalSink


class RecordingOutput:
    def __init__(self) -> None:
        self.written: list[str] = []

    def write_raw(self, text: str) -> None:
        self.written.append(text)

    def flush(self) -> None:
        pass

    def enable_autowrap(self) -> None:
        pass


def test_sink_without_an_application_writes_through() -> None:
    output = RecordingOutput()
    sink = TerminalSink(output)  # type: ignore[arg-type]
    sink.write("[main turn 1] ")
    sink.write("partial")
    sink.write(" line\n")
    assert "".join(output.written) == "[main turn 1] partial line\n"
    assert sink.partial == ""


def test_the_terminal_sink_sanitizes_every_write() -> None:
    output = RecordingOutput()
    sink = TerminalSink(output)  # type: ignore[arg-type]
    sink.write("title \x1b]0;pwned\x07 \x1bP+q544e\x1b\\ \u2066x\u200b\n")
    assert "".join(output.written) == "title \u241b]0;pwned\u2407 \u241bP+q544e\u241b\\ <U+2066>x<U+200B>\n"


def test_history_never_stores_secret_shaped_lines(tmp_path: Path) -> None:
    path = tmp_path / "state" / "dsh" / "history"
    history = SafeHistory(path)
    history.store_string("an ordinary prompt")
    history.store_string("use the key sk-abcdefghijklmnopqrstuvwxyz012345 please")
    history.store_string("AKIAABCDEFGHIJKLMNOP is my access key")
    text = path.read_text()
    assert "+an ordinary prompt" in text
    assert "sk-abcdefghij" not in text and "AKIA" not in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"


class FakeSession:
    def __init__(self, root: Path) -> None:
        self.project = str(root)  # /resume completes this project's sessions

    def saved_sessions(self, project: str | None) -> list[object]:
        return []

    def extensions(self) -> Extensions:
        return Extensions()  # no skills or custom commands: completion lists the built-in commands


class FakeDemo:
    def scenarios(self) -> list[tuple[str, str]]:
        return [(scenario.name, scenario.summary) for scenario in SCENARIOS.values()]


class FakeEndpoint:
    def __init__(self, controls: FakeDemo | None) -> None:
        self.controls = controls  # the demo's scenario controls (dsh.repl.endpoint.ScenarioControls)


class FakeShell:
    def __init__(self, demo: bool, root: Path) -> None:
        self.endpoint = FakeEndpoint(FakeDemo() if demo else None)
        self.session = FakeSession(root)


def complete(shell: FakeShell, text: str) -> list[str]:
    completer = SlashCompleter(shell)  # type: ignore[arg-type]
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]


def test_slash_completion(tmp_path: Path) -> None:
    plain = FakeShell(False, tmp_path)
    assert complete(plain, "/re") == ["/retry", "/rewind", "/report", "/resume"]
    assert complete(plain, "/sc") == []  # /scenario is demo only
    assert complete(plain, "hello /re") == [] and complete(plain, "//re") == []
    assert complete(plain, "/resume ") == ["last"]
    demo = FakeShell(True, tmp_path)
    assert complete(demo, "/sc") == ["/scenario"]
    assert complete(demo, "/scenario http-40") == ["http-400", "http-400-context", "http-401", "http-402", "http-403"]


# --- the agent is built behind the first prompt ----------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


async def _run_app(
    tmp_path: Path, keys: str, extra_tools: object = None, *, once_built: str = ""
) -> tuple[int, Session]:
    """The app over a shell whose agent is deferred; its exit status and the session it ran. ``keys`` are typed
    ahead, ``once_built`` once the agent is built."""
    config = Config(api_key="sk-appTestKey0000000000000000000", base_url="http://127.0.0.1:9")
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        app = InteractiveApp(history=tmp_path / "history")
        shell = Shell(config, app, color=False, env=_env(tmp_path), extra_tools=extra_tools)  # type: ignore[arg-type]

        async def type_once_built() -> None:
            while shell.session.agent is None:
                await anyio.sleep(0.01)
            pipe.send_text(once_built)

        try:
            await shell.start(defer_agent=True)
            assert shell.session.agent is None
            pipe.send_text(keys)
            if not once_built:
                return await app.run(shell, banner="banner"), shell.session
            async with anyio.create_task_group() as group:
                group.start_soon(type_once_built)
                status = await app.run(shell, banner="banner")
            return status, shell.session
        finally:
            await shell.aclose()


@pytest.mark.anyio
async def test_the_agent_is_built_once_the_first_prompt_is_up(tmp_path: Path) -> None:
    status, session = await _run_app(tmp_path, "", once_built="\x04")  # Ctrl-D at the first prompt, once built
    assert status == 0
    assert session.agent is None and session.log is not None  # built, then closed with the shell


@pytest.mark.anyio
async def test_an_agent_that_cannot_be_built_ends_the_app_with_a_startup_error(tmp_path: Path) -> None:
    def broken(session: Session) -> list[object]:
        raise OSError("no tools today")

    with pytest.raises(StartupError, match="no tools today"):
        await _run_app(tmp_path, "", broken)  # no key at all: the prompt waits, the build fails


# --- the toolbar fits the width, the live part first when it must be cut --------------------------------


class _SizedOutput(DummyOutput):
    def __init__(self, columns: int) -> None:
        self.columns = columns

    def get_size(self):  # type: ignore[no-untyped-def]
        from prompt_toolkit.data_structures import Size

        return Size(rows=24, columns=self.columns)


def _toolbar(tmp_path: Path, columns: int, base_url: str) -> str:
    from dsh.agent_loop import events as ev

    with create_app_session(output=_SizedOutput(columns)):
        app = InteractiveApp(history=tmp_path / "history")
        shell = Shell(Config(api_key="sk-appTestKey0000000000000000000", base_url=base_url), app, color=False,
                      env=_env(tmp_path))
        shell.display.activity.on_event(ev.TurnStart(1, "x"), time.monotonic())  # waiting for the first token
        app._shell = shell  # what run() binds
        ((_, text),) = app._turn_toolbar()  # type: ignore[misc]
    return text


def test_the_turn_toolbar_keeps_its_order_when_it_fits_and_leads_with_the_live_part_otherwise(tmp_path: Path) -> None:
    wide = _toolbar(tmp_path, 200, "http://127.0.0.1:9")
    assert wide == (" deepseek-flash · http://127.0.0.1:9 · mode: default · waiting for first token 0s · "
                    "Ctrl-C cancels")
    long_url = "https://a-very-long-gateway-name.internal.example.com/deepseek/compatible/v1"
    cut = _toolbar(tmp_path, 100, long_url)  # wide, but the endpoint would push the live part off the line
    assert cut.startswith(" waiting for first token ") and len(cut) == 100 and cut.endswith("…"), cut
    # 80 columns or fewer: the live part first, and the line cut to the width.
    # The mode with the live part: it says what the next tool call may do (docs/safety.md).
    live_first = " waiting for first token 0s · Ctrl-C cancels · mode: default · deepseek-flash · http://127.0.0.1:9"
    assert _toolbar(tmp_path, 80, "http://127.0.0.1:9") == live_first[:79] + "…"
    assert _toolbar(tmp_path, 60, "http://127.0.0.1:9") == live_first[:59] + "…"
    assert _toolbar(tmp_path, 110, "http://127.0.0.1:9").startswith(" deepseek-flash · ")  # fits: usual order
