"""Pieces of the interactive app that can be checked without a terminal: output sink, history, completion."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from dsh.repl.app import SafeHistory, SlashCompleter, TerminalSink


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


class FakeShell:
    def __init__(self, demo: bool, root: Path) -> None:
        self.demo = object() if demo else None
        self.root = root


def complete(shell: FakeShell, text: str) -> list[str]:
    completer = SlashCompleter(shell)  # type: ignore[arg-type]
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]


def test_slash_completion(tmp_path: Path) -> None:
    plain = FakeShell(False, tmp_path)
    assert complete(plain, "/re") == ["/retry", "/resume"]
    assert complete(plain, "/sc") == []  # /scenario is demo only
    assert complete(plain, "hello /re") == [] and complete(plain, "//re") == []
    assert complete(plain, "/resume ") == ["last"]
    demo = FakeShell(True, tmp_path)
    assert complete(demo, "/sc") == ["/scenario"]
    assert complete(demo, "/scenario http-40") == ["http-400", "http-400-context", "http-401", "http-402", "http-403"]
