"""What each request carries (system prompt, AGENTS.md) and what it cost, through the shell and a real server."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.context import BASE_SYSTEM_PROMPT
from dsh.agent_loop.tools import default_tools
from dsh.agent_loop.usage import estimate_tokens
from dsh.llm.events import Usage
from dsh.llm.loopback import streams
from dsh.llm.loopback.fault_server import FaultServer
from dsh.llm.models import MODELS, ModelSettings, cost_usd, is_peak, model_info
from dsh.repl.config import Config
from dsh.repl.frontend import PlainFrontEnd
from dsh.repl.shell import Shell
from dsh.repl.usage import UsageTally, usage_line
from tests.repl.test_shell_commands import KEY, ListSink

pytestmark = pytest.mark.anyio

# Flat prices (USD per 1M tokens) so the expected cost does not depend on the hour the test runs.
PRICED = {"deepseek-flash": ModelSettings(input_cache_hit=1000.0, input_cache_miss=2000.0, output=4000.0,
                                             context_window=1000)}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "SHELL": "/bin/sh"}


def sent_usage(text: str) -> dict[str, int]:
    """The usage chunk the fault server's ``text`` behaviour sends for ``text``."""
    for raw in streams.text_frames(text):
        payload = raw.decode().removeprefix("data: ").strip()
        if payload.startswith("{") and json.loads(payload).get("usage"):
            return json.loads(payload)["usage"]
    raise AssertionError("no usage chunk")


@contextlib.asynccontextmanager
async def started_shell(config: Config, env: dict[str, str], **options: Any) -> AsyncIterator[tuple[Shell, ListSink]]:
    """A started shell writing to a list (no colour), closed when the block ends."""
    sink = ListSink()
    shell = Shell(config, PlainFrontEnd(sink), color=False, env=env, **options)
    await shell.start()
    try:
        yield shell, sink
    finally:
        await shell.aclose()


async def test_the_system_prompt_and_agents_md_arrive_in_every_request(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "AGENTS.md").write_text("Always answer with a haiku.\n")
    monkeypatch.chdir(project)
    async with started_shell(Config(api_key=KEY, base_url=server.url), env) as (shell, _):
        await shell.handle_line("hello")
        await shell.handle_line("again")
        for request in server.requests[-2:]:
            system = request.json["messages"][0]
            assert system["role"] == "system" and system["content"].startswith(BASE_SYSTEM_PROMPT)
            assert f"# Instructions from {project / 'AGENTS.md'}\n\nAlways answer with a haiku." in system["content"]
            assert f"- working directory: {project}" in system["content"]
        assert [m["role"] for m in server.requests[-1].json["messages"]] == ["system", "user", "assistant", "user"]


async def test_context_lists_each_source_with_its_path_and_size(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * 400)
    monkeypatch.chdir(tmp_path)
    async with started_shell(Config(api_key=KEY, base_url=server.url), env) as (shell, sink):
        await shell.handle_line("/context")
        lines = sink.take().splitlines()
        expected = estimate_tokens(f"# Instructions from {tmp_path / 'AGENTS.md'}\n\n" + "x" * 400)
        assert lines[0] == "context sent with each request (estimated at 4 characters a token):"
        assert lines[1].startswith("  system prompt (built-in v1)") and lines[2].startswith("  environment")
        assert lines[3].startswith(f"  AGENTS.md  {tmp_path / 'AGENTS.md'}") and lines[3].endswith(f"≈ {expected}")
        tools = len(default_tools())  # the built-in tools, no others configured
        assert lines[4].startswith(f"  tool definitions ({tools} tools)")
        assert lines[5].startswith("  history (0 messages)")
        assert lines[6].startswith("  total") and lines[6].endswith("of 1M")


async def test_each_interactive_turn_ends_with_the_usage_the_server_reported(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = Config(api_key=KEY, base_url=server.url, models=PRICED)
    async with started_shell(config, env, show_usage=True) as (shell, sink):
        await shell.handle_line("hello")
        usage = sent_usage("Hello! How can I help you today?")
        hit, prompt, out = usage["prompt_cache_hit_tokens"], usage["prompt_tokens"], usage["completion_tokens"]
        miss = usage["prompt_cache_miss_tokens"]
        cost = (hit * 1000 + miss * 2000 + out * 4000) / 1e6
        context = 100 * (prompt + out) / 1000
        rate = round(100 * hit / (hit + miss))
        assert sink.take().splitlines() == [
            "[main turn 1] Hello! How can I help you today?",
            f"tokens {prompt} in ({hit} cached) · {out} out · cache {rate}% · context {context:.1f}% · ${cost:.4f}",
        ]
        await shell.handle_line("/cost")
        assert sink.take().splitlines() == [
            f"1 request: tokens {prompt} in ({hit} cached) · {out} out · cache {rate}% · context {context:.1f}% · "
            f"${cost:.4f}",
            f"cache hits {hit} tokens · ${hit * 1000 / 1e6:.4f} at $1000.00/M",
            f"cache misses {miss} tokens · ${miss * 2000 / 1e6:.4f} at $2000.00/M",
        ]


async def test_piped_and_print_runs_keep_stdout_free_of_the_usage_line(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with started_shell(Config(api_key=KEY, base_url=server.url), env) as (shell, sink):
        await shell.handle_line("hello")
        assert sink.take() == "[main turn 1] Hello! How can I help you today?\n"


async def test_an_unknown_model_shows_tokens_without_a_cost(
    env: dict[str, str], server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = Config(api_key=KEY, base_url=server.url, model="my-local-model")
    async with started_shell(config, env, show_usage=True) as (shell, sink):
        await shell.handle_line("hello")
        last = sink.take().splitlines()[-1]
        assert last.startswith("tokens ") and "$" not in last and "context" not in last
        await shell.handle_line("/cost")
        assert sink.take().splitlines()[-1] == (
            'no price known for my-local-model: set [models."my-local-model"] prices in config.toml'
        )


def test_peak_hours_are_weekday_beijing_business_hours() -> None:
    monday = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)
    assert is_peak(monday.replace(hour=1))  # 09:00 in Beijing
    assert not is_peak(monday.replace(hour=4, minute=30))  # 12:30, lunch
    assert is_peak(monday.replace(hour=9, minute=59)) and not is_peak(monday.replace(hour=10))
    assert not is_peak(dt.datetime(2026, 12, 5, 2, tzinfo=dt.UTC))  # Saturday
    flash = MODELS["deepseek-flash"]
    assert flash.prices_at(monday.replace(hour=2)) == flash.peak
    assert flash.prices_at(monday.replace(hour=12)) == flash.off_peak


def test_cost_counts_hits_misses_and_output_at_their_own_prices() -> None:
    info = model_info("deepseek-flash", PRICED)
    assert info is not None and info.peak is not None and info.context_window == 1000
    usage = Usage(prompt_tokens=1000, completion_tokens=100, prompt_cache_hit_tokens=600, prompt_cache_miss_tokens=400)
    assert cost_usd(usage, info.peak) == pytest.approx((600 * 1000 + 400 * 2000 + 100 * 4000) / 1e6)


def test_the_usage_line_shortens_large_counts() -> None:
    tally = UsageTally(requests=2, prompt=12_345, cached=9_100, output=420, reasoning=300, cost=0.0031,
                       context=189_000, model="deepseek-flash")
    assert usage_line(tally) == "tokens 12.3k in (9.1k cached) · 420 out (300 reasoning) · context 18% · $0.0031"


def test_a_tiny_cost_is_never_shown_as_zero() -> None:
    from dsh.repl.usage import format_cost

    assert [format_cost(c) for c in (0.0, 0.00001, 0.00031, 0.5, 12.345)] == [
        "$0.0000", "<$0.0001", "$0.0003", "$0.5000", "$12.35"]
