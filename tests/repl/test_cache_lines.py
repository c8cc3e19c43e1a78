"""The prompt cache in dsh's own lines (issue 37 part 3): ``cache N%`` in the usage line and ``/cost``'s hit/miss
split, ``cache_hit_rate`` in ``-p --output-format json``, and the one line that names what changed when a turn's
hit rate drops. Real dsh processes against the fault server, whose cache behaves as DeepSeek's guide describes
(``FaultServer(prompt_cache=True)``), and a real MCP server that re-lists its tools; exact lines."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.agent_loop.cache_watch import cache_percent
from dsh.agent_loop.usage import UsageTally
from dsh.llm.events import Usage
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.loopback.prompt_cache import PromptCache
from dsh.llm.models import model_info
from dsh.repl.usage import cache_split_lines, usage_line
from fixtures.mcp_servers import stdio_command

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-cacheLinesTestKey0000000000000000"
WHEN = datetime.datetime(2026, 12, 5, 3, 0, tzinfo=datetime.UTC)  # a Saturday: off-peak prices
ECHO = Behaviour("tool_call", name="mcp__docs__echo", arguments='{"text": "x"}')


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done"), prompt_cache=True).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "", config: str = ""
        ) -> subprocess.CompletedProcess[str]:
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + config, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=REPO, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def _usages(server: FaultServer) -> list[dict[str, int]]:
    """Each request's usage, as the server's cache counted it (replayed over the bodies dsh sent)."""
    cache = PromptCache()
    return [cache.usage(request.json) for request in server.requests]


def test_a_tool_list_an_mcp_server_re_listed_is_named_when_the_hit_rate_drops(home: Path,
                                                                              server: FaultServer) -> None:
    # Turn 1 is cold; turn 2 calls docs' echo, after which the server adds a tool and says its list changed;
    # turn 3 sends the new list, which no stored prefix matches.
    command = stdio_command("list-changed")
    config = (f"[mcp_servers.docs]\ncommand = {json.dumps(command[0])}\nargs = {json.dumps(command[1:])}\n"
              'approve = "auto"\n')
    server.push("text")
    server.push(ECHO)
    result = dsh(home, server, stdin="hi\necho please\nagain\n", config=config)
    assert (result.returncode, result.stderr) == (0, "")
    first, call, answer, third = _usages(server)
    assert first["prompt_cache_hit_tokens"] == third["prompt_cache_hit_tokens"] == 0
    turn_two = sum(u["prompt_cache_hit_tokens"] for u in (call, answer)) / sum(
        u["prompt_tokens"] for u in (call, answer))
    assert result.stdout.splitlines() == [
        "[main turn 1] Hello! How can I help you today?",
        "[main turn 2] Need the weather; call it.",
        '  [tool call] mcp__docs__echo({"text": "x"})',
        "  [tool result] x",
        "done",
        "[main turn 3] done",
        f"cache 0% (was {cache_percent(turn_two)}): the tool list changed (MCP server docs re-listed its tools)",
    ]


def test_a_drop_with_nothing_changed_says_so_and_cost_splits_hits_and_misses(home: Path,
                                                                            server: FaultServer) -> None:
    def usage(hit: int) -> Behaviour:
        return Behaviour("text", text="ok", usage={"prompt_tokens": 1000, "prompt_cache_hit_tokens": hit,
                                                   "prompt_cache_miss_tokens": 1000 - hit, "completion_tokens": 7})

    for hit in (0, 960, 120):
        server.push(usage(hit))
    prices = "[models.deepseek-flash]\ninput_cache_hit = 0.1\ninput_cache_miss = 10.0\noutput = 1.0\n"
    result = dsh(home, server, stdin="one\ntwo\nthree\n/cost\n", config=prices)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "[main turn 1] ok",
        "[main turn 2] ok",
        "[main turn 3] ok",
        "cache 12% (was 96%): nothing dsh sent before the new messages changed",
        "3 requests: tokens 3k in (1.1k cached) · 21 out · cache 36% · context 0.1% · $0.0193",
        "cache hits 1.1k tokens · $0.0001 at $0.10/M",
        "cache misses 1.9k tokens · $0.0192 at $10.00/M",
    ]


def test_no_cache_figures_no_rate_and_no_drop_line(home: Path, server: FaultServer) -> None:
    # OpenAI's shape without prompt_tokens_details: the endpoint said nothing about its cache.
    for _ in range(2):
        server.push(Behaviour("text", text="ok", usage_shape="openai", usage={"prompt_tokens_details": None}))
    result = dsh(home, server, stdin="one\ntwo\n/cost\n")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "[main turn 1] ok",
        "[main turn 2] ok",
        "2 requests: tokens 24 in · 2 out · context 0.0% · <$0.0001",
        "prices as published by DeepSeek on 2026-12-03, peak or off-peak by the hour of each request",
    ]


@pytest.mark.parametrize(("usage", "rate"), [
    ({"prompt_tokens": 1000, "prompt_cache_hit_tokens": 970, "prompt_cache_miss_tokens": 30}, 0.97),
    ({"prompt_tokens_details": None, "prompt_cache_hit_tokens": None, "prompt_cache_miss_tokens": None}, None),
], ids=["reported", "not reported"])
def test_print_json_gives_the_hit_rate_or_null(home: Path, server: FaultServer, usage: dict[str, object],
                                               rate: float | None) -> None:
    server.push(Behaviour("text", text="ok", usage=usage))
    result = dsh(home, server, "-p", "hi", "--output-format", "json")
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["cache_hit_rate"] == rate


def test_print_mode_puts_the_drop_line_on_stderr_against_the_resumed_session_s_last_turn(
        home: Path, server: FaultServer) -> None:
    server.push(Behaviour("text", text="ok", usage={"prompt_tokens": 1000, "prompt_cache_hit_tokens": 960,
                                                    "prompt_cache_miss_tokens": 40}))
    server.push(Behaviour("text", text="ok", usage={"prompt_tokens": 1000, "prompt_cache_hit_tokens": 100,
                                                    "prompt_cache_miss_tokens": 900}))
    first = dsh(home, server, "-p", "one")
    assert (first.returncode, first.stdout, first.stderr) == (0, "ok\n", "")
    again = dsh(home, server, "-p", "two", "--resume", "last", "--output-format", "json")
    assert again.returncode == 0
    assert again.stderr == "cache 10% (was 96%): the session was resumed (dsh keeps no hashes of what it sent before)\n"
    assert json.loads(again.stdout)["cache_hit_rate"] == 0.1


def _tally(*usages: Usage | None) -> UsageTally:
    tally = UsageTally()
    for usage in usages:
        tally.add(usage, "deepseek-flash", model_info("deepseek-flash"), WHEN)
    return tally


def test_the_usage_line_gives_the_hit_rate_of_the_turn_s_input_tokens() -> None:
    tally = _tally(Usage(1000, 10, 1010, 960, 40), Usage(1000, 10, 1010, 0, 1000))
    assert usage_line(tally) == "tokens 2k in (960 cached) · 20 out · cache 48% · context 0.1% · $0.0002"
    assert cache_split_lines(tally) == ["cache hits 960 tokens · <$0.0001 at $0.003/M",
                                        "cache misses 1k tokens · $0.0002 at $0.15/M"]


def test_without_cache_figures_the_rate_is_unknown_never_zero() -> None:
    tally = _tally(Usage(1000, 10, 1010), None)
    assert tally.cache_hit_rate is None
    assert usage_line(tally) == "tokens 1k in · 10 out · no usage sent for 1 of 2 requests"
    assert cache_split_lines(tally) == []
    assert _tally(Usage(1000, 10, 1010, 0, 1000)).cache_hit_rate == 0.0  # a reported miss is 0%


def test_the_demo_s_cache_drop_scenario_names_the_drop_on_its_second_turn(home: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    result = subprocess.run([sys.executable, "-m", "dsh.repl", "--demo", "--scenario", "cache-drop"], cwd=REPO,
                            env=env, input="one\ntwo\n", capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "[main turn 1] The server reused 96% of this prompt from its cache; send another prompt.",
        "[main turn 2] This time the server's cache served 12%, though dsh sent the same prefix.",
        "cache 12% (was 96%): nothing dsh sent before the new messages changed",
    ]
