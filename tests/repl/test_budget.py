"""Budgets (issue 37 part 5): ``max_cost`` / ``DSH_MAX_COST`` / ``--max-cost`` cap a ``-p`` run or a session.
Real dsh processes against the loopback fault server, whose answers report usage that a ``[models."NAME"]`` table
prices at a flat rate, so each request costs exactly $0.10; exact stderr lines, exit statuses, the requests the
server saw and the session log's records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.agent_loop.reasons import BudgetStop
from dsh.llm.loopback.fault_server import Behaviour, FaultServer

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-budgetTestKey00000000000000000000"
# 1 000 prompt tokens, all cache misses, at $100 per million: $0.10 a request, whatever the hour.
USAGE = {"prompt_tokens": 1000, "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 1000,
         "completion_tokens": 0}
PRICED = '[models."budget-test"]\ninput_cache_hit = 0\ninput_cache_miss = 100\noutput = 0\n'
CALL = Behaviour("tool_call", name="list_dir", arguments='{"path": "."}', reasoning="", usage=USAGE)
DONE = Behaviour("text", text="done", usage=USAGE)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=DONE, models=None).start_in_thread()  # no GET /models: no line about the model
    try:
        yield srv
    finally:
        srv.stop()


def dsh(home: Path, server: FaultServer, *args: str, config: str = "", stdin: str = "", **extra: str
        ) -> subprocess.CompletedProcess[str]:
    (home / "config" / "dsh" / "config.toml").write_text(
        'max_retries = 0\nmodel = "budget-test"\n' + config, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url, **extra}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home / "work", env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def _lines(stderr: str) -> list[str]:
    """The lines that are not the tool rounds' own (the call, its result and the listing under it)."""
    return [line for line in stderr.splitlines() if not line.startswith("  ")]


def _session_records(home: Path) -> list[dict[str, object]]:
    (path,) = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_turn_that_reaches_the_cap_stops_before_its_next_request_with_its_own_exit_status(
        home: Path, server: FaultServer) -> None:
    server.push(*[CALL] * 6)
    result = dsh(home, server, "-p", "go", "--output-format", "json", config="max_cost = 0.25\n" + PRICED)
    # Requests 1-3 are sent at $0.00, $0.10 and $0.20 spent; the 4th would start at $0.30: not sent.
    assert len(server.requests) == 3
    assert _lines(result.stderr) == [
        "dsh: budget: $0.20 spent of a $0.25 cap (80%)",
        "[turn stopped BUDGET] $0.30 spent of a $0.25 cap",
    ]
    assert result.returncode == BudgetStop.exit_code == 5
    answer = json.loads(result.stdout)
    assert answer["exit_code"] == 5
    assert answer["reason"] == {"kind": "budget", "spent": 0.3, "max_cost": 0.25, "code": None, "message": None}
    assert answer["budget"] == {"max_cost": 0.25, "spent": 0.3}
    assert answer["cost_usd"] == 0.3
    # Past the cap by less than one request's cost ($0.10): the check is before each request.
    assert 0.25 <= answer["budget"]["spent"] < 0.25 + 0.10
    ends = [record["data"] for record in _session_records(home) if record["type"] == "turn/end"]
    assert ends == [{"turn": 1, "reason": {"kind": "budget", "spent": 0.3, "max_cost": 0.25}}]


def test_the_flag_and_the_environment_set_the_cap_and_a_turn_under_it_completes(home: Path,
                                                                               server: FaultServer) -> None:
    server.push(CALL)
    result = dsh(home, server, "-p", "go", "--max-cost", "$1", config=PRICED)
    assert (result.returncode, result.stdout, _lines(result.stderr)) == (0, "done\n", [])
    server.push(CALL, CALL, CALL)
    result = dsh(home, server, "-p", "go", config=PRICED, DSH_MAX_COST="0.15")
    assert _lines(result.stderr) == [
        "dsh: budget: $0.20 spent of a $0.15 cap (133%)",
        "[turn stopped BUDGET] $0.20 spent of a $0.15 cap",
    ]
    assert result.returncode == 5
    result = dsh(home, server, "-p", "go", "--output-format", "json", config=PRICED)
    assert json.loads(result.stdout)["budget"] is None  # no cap


def test_a_resumed_session_carries_its_spend(home: Path, server: FaultServer) -> None:
    server.push(CALL)
    first = dsh(home, server, "-p", "go", config=PRICED)  # $0.20, no cap
    assert (first.returncode, _lines(first.stderr)) == (0, [])
    sent = len(server.requests)
    # $0.20 from the log counts: the first request is sent, after it the spend is $0.30 of $0.25.
    second = dsh(home, server, "-p", "again", "--resume", "last", "--output-format", "json",
                 config="max_cost = 0.25\n" + PRICED)
    assert (second.returncode, _lines(second.stderr)) == (0, ["dsh: budget: $0.30 spent of a $0.25 cap (120%)"])
    assert json.loads(second.stdout)["budget"] == {"max_cost": 0.25, "spent": 0.3}
    assert len(server.requests) == sent + 1
    third = dsh(home, server, "-p", "more", "--resume", "last", config="max_cost = 0.25\n" + PRICED)
    assert (third.returncode, _lines(third.stderr)) == (5, ["[turn stopped BUDGET] $0.30 spent of a $0.25 cap"])
    assert len(server.requests) == sent + 1  # nothing was sent


def test_a_cap_on_a_model_with_no_known_price_does_not_start(home: Path, server: FaultServer) -> None:
    path = home / "config" / "dsh" / "config.toml"
    result = dsh(home, server, "-p", "go", config="max_cost = 0.25\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"dsh: failed to start: max_cost in {path} caps spending, but model budget-test (set by model in {path}) has "
        f'no known price: set input_cache_hit, input_cache_miss and output in [models."budget-test"] in {path}']
    result = dsh(home, server, "-p", "go", "--max-cost", "0.5", "--model", "other")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "dsh: failed to start: --max-cost (flag) caps spending, but model other (set by --model (flag)) has no known "
        f'price: set input_cache_hit, input_cache_miss and output in [models."other"] in {path}']
    result = dsh(home, server, "-p", "go", "--max-cost", "lots", config=PRICED)
    assert (result.returncode, len(result.stderr.splitlines())) == (2, 1)
    assert result.stderr.startswith("dsh: failed to start: command line: max_cost must be an amount of US dollars"), (
        result.stderr)
    assert server.requests == []


def test_cost_shows_the_budget_a_resumed_session_s_spend_included(home: Path, server: FaultServer) -> None:
    config = "max_cost = 0.25\n" + PRICED
    first = dsh(home, server, config=config, stdin="go\n/cost\n")
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout.splitlines()[-1] == "budget: $0.10 spent of a $0.25 cap (40%)"
    again = dsh(home, server, "--resume", "last", config=config, stdin="/cost\n")
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout.splitlines()[-2:] == ["no requests yet", "budget: $0.10 spent of a $0.25 cap (40%)"]
    plain = dsh(home, server, config=PRICED, stdin="/cost\n")  # no cap: no budget line
    assert plain.stdout.splitlines()[-1] == "no requests yet"


def test_doctor_shows_the_cap_and_where_it_came_from(home: Path, server: FaultServer) -> None:
    path = home / "config" / "dsh" / "config.toml"

    def configuration(*args: str, config: str = PRICED, **extra: str) -> str:
        result = dsh(home, server, "doctor", *args, config=config, **extra)
        [line] = [line for line in result.stdout.splitlines() if line.startswith("✓ configuration: ")]
        return line

    assert "max_cost" not in configuration()
    assert f"; max_cost $0.25 (max_cost in {path}:3); " in configuration(config="max_cost = 0.25\n" + PRICED)
    assert "; max_cost $0.0050 (DSH_MAX_COST (environment)); " in configuration(DSH_MAX_COST="0.005")
    assert "; max_cost $2.00 (--max-cost (flag)); " in configuration("--max-cost", "$2", DSH_MAX_COST="0.005")
    result = dsh(home, server, "doctor", "--json", "--max-cost", "0.5", config=PRICED)
    facts = json.loads(result.stdout)["steps"][0]["facts"]
    assert facts["max_cost"] == {"value": 0.5, "source": "--max-cost (flag)"}


def test_compact_past_the_cap_is_not_sent_and_says_so(home: Path, server: FaultServer) -> None:
    server.push(CALL, CALL)  # $0.30 in the first turn: over the $0.25 cap
    result = dsh(home, server, config="max_cost = 0.25\n" + PRICED, stdin="go\n/compact\n")
    sent = len(server.requests)
    assert "[compact failed COMPACT] not sent: $0.30 spent of a $0.25 cap; the conversation is unchanged" in (
        result.stdout + result.stderr).splitlines()
    assert sent == 3  # the turn's three requests; no summary request
