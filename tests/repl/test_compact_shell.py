"""``/compact``, the context warning and the overflow fix line, through the shell and a real server."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.agent_loop.compact import SUMMARY_HEADER
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.models import ModelSettings
from dsh.repl.config import Config
from tests.repl.test_shell_commands import KEY
from tests.repl.test_usage_and_context import sent_usage, started_shell

pytestmark = pytest.mark.anyio

HELLO = "Hello! How can I help you today?"
SUMMARY = "The user said hello and was greeted."


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "SHELL": "/bin/sh"}


def _window(fill: float) -> dict[str, ModelSettings]:
    """A model table whose window the first ``text`` turn fills to ``fill``."""
    usage = sent_usage(HELLO)
    window = round((usage["prompt_tokens"] + usage["completion_tokens"]) / fill)
    return {"deepseek-flash": ModelSettings(context_window=window, input_cache_hit=0.0, input_cache_miss=0.0,
                                               output=0.0)}


async def test_the_warning_then_compact_then_the_next_request_starts_from_the_summary(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = Config(api_key=KEY, base_url=server.url, models=_window(0.95))
    server.push("text", Behaviour("text", text=SUMMARY), "text", "text")
    async with started_shell(config, env, show_usage=True) as (shell, sink):
        await shell.handle_line("hello")
        lines = sink.take().splitlines()
        assert lines[0] == f"[main turn 1] {HELLO}"
        assert lines[1].startswith("tokens ") and "context 95%" in lines[1]
        assert lines[2] == "context 95% full — /compact summarizes the conversation so far, /new starts over"

        await shell.handle_line("/compact the greeting")
        summary_tokens = sent_usage(SUMMARY)["completion_tokens"]
        lines = sink.take().splitlines()
        assert lines[0] == f"[compacted] 2 messages replaced by a summary of {summary_tokens} tokens"
        assert lines[1].startswith("tokens ") and len(lines) == 2  # the fill dropped: no warning
        assert "Give most room to: the greeting" in server.requests[1].json["messages"][-1]["content"]

        await shell.handle_line("again")
        sent = server.requests[2].json["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "user"]
        assert sent[1]["content"] == SUMMARY_HEADER + SUMMARY and sent[2]["content"] == "again"
        assert sink.take().splitlines()[-1].startswith("tokens ")  # well under 80% again: no warning
        await shell.handle_line("/cost")
        assert sink.take().startswith("3 requests: ")


async def test_a_failed_compaction_is_one_line_and_changes_nothing(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with started_shell(Config(api_key=KEY, base_url=server.url), env) as (shell, sink):
        await shell.handle_line("/compact")
        assert sink.take() == "nothing to compact yet\n"
        server.push("text", "http_401", "text")
        await shell.handle_line("hello")
        sink.take()
        await shell.handle_line("/compact")
        assert sink.take() == (
            "[compact failed AUTH] Authentication Fails, Your api key: ****abcd is invalid; "
            "the conversation is unchanged\n"
        )
        await shell.handle_line("again")
        assert [m["role"] for m in server.requests[-1].json["messages"]] == ["system", "user", "assistant", "user"]


async def test_context_window_exceeded_gets_its_fix_line(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/compact and /new are offered once there is a conversation to compact; before that, what can help."""
    monkeypatch.chdir(tmp_path)
    server.push("http_400_context", "text", "http_400_context")
    async with started_shell(Config(api_key=KEY, base_url=server.url), env) as (shell, sink):
        await shell.handle_line("hello")
        alone = sink.take().splitlines()
        await shell.handle_line("hello again")
        sink.take()
        await shell.handle_line("and once more")
        later = sink.take().splitlines()
    assert alone[0].startswith("[main turn 1] [turn failed CONTEXT_WINDOW_EXCEEDED] This model's maximum")
    assert alone[1] == ("  fix: dsh's instructions and this prompt alone are too long for the model — shorten the "
                        "prompt or give the model more context")
    assert later[0].startswith("[main turn 3] [turn failed CONTEXT_WINDOW_EXCEEDED] This model's maximum")
    assert later[1] == "  fix: the conversation is too long for the model — /compact or /new"


async def test_auto_compact_shows_the_compaction_inside_the_turn(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    server.push("text", "http_400_context", Behaviour("text", text=SUMMARY), "text")
    async with started_shell(Config(api_key=KEY, base_url=server.url, auto_compact=True), env) as (shell, sink):
        await shell.handle_line("hello")
        sink.take()
        await shell.handle_line("again")
        tokens = sent_usage(SUMMARY)["completion_tokens"]
        assert sink.take().splitlines() == [
            f"[main turn 2] [compacted] 3 messages replaced by a summary of {tokens} tokens; sending the request again",
            HELLO,
        ]


async def test_auto_compact_compacts_before_a_prompt_past_90_percent(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = Config(api_key=KEY, base_url=server.url, models=_window(0.95), auto_compact=True)
    server.push("text", Behaviour("text", text=SUMMARY), "text")
    async with started_shell(config, env) as (shell, sink):
        await shell.handle_line("hello")
        sink.take()
        await shell.handle_line("again")
        tokens = sent_usage(SUMMARY)["completion_tokens"]
        assert sink.take().splitlines() == [
            f"[compacted] 2 messages replaced by a summary of {tokens} tokens", f"[main turn 2] {HELLO}",
        ]
        assert [m["role"] for m in server.requests[-1].json["messages"]] == ["system", "user", "user"]
