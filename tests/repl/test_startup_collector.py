"""Start-up pauses the cyclic garbage collector (dsh.repl.launch) and hands it back before any turn runs.

docs/performance.md, "A live prompt sooner": a collection pass is ~20 ms of the way to a live prompt, so start-up
runs without them; a turn, and whoever called dsh in-process, must get the collector back.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from dsh.repl.launch import run


@pytest.fixture
def collections(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """Each collection pass that starts inside the mode's event loop (its generation): while a turn runs, not
    during start-up. In an isolated config and state."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    passes: list[str] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and _in_event_loop():
            passes.append(f"generation {info['generation']}")

    gc.callbacks.append(note)
    try:
        yield passes
    finally:
        gc.callbacks.remove(note)
        gc.enable()  # whatever the code under test did, the next test starts with the collector on


def _in_event_loop() -> bool:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_until_complete":
            return True
        frame = frame.f_back
    return False


def test_a_print_turn_runs_with_the_collector_on(collections: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status = run(["-p", "hi", "--demo"])
    out = capsys.readouterr().out
    assert (status, out) == (0, "Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1.\n")
    assert collections, "no collection pass ran during the turn: start-up's pause outlived it"
    assert gc.isenabled()


def test_the_collector_is_back_when_start_up_fails(collections: list[str], monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    status = run(["-p", "hi"])
    lines = capsys.readouterr().err.splitlines()
    assert status == 2
    assert lines[-1] == (f"dsh: failed to start: no DeepSeek API key: set DEEPSEEK_API_KEY (or api_key in "
                         f"{tmp_path}/config/dsh/config.toml), or try `dsh --demo`")
    assert gc.isenabled()


def test_the_collector_is_back_after_a_usage_error(collections: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        run(["--output-format", "json"])
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "dsh: error: --output-format works only with -p/--print"
    assert gc.isenabled()
