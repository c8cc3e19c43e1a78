"""A crafted trace or capsule cannot make ``dsh --replay`` run forever (docs/record-replay.md, "Limits").

Each case runs the real ``dsh --replay FILE`` on a hand-made file. Recorded times and deadlines are finite,
positive and at most an hour (``NaN`` and ``Infinity``, which Python's json reads by default, are refused
where the file is parsed), each refusal one line naming the field, exit status 2; a capsule's recorded
``max_retries`` is followed up to the retry policy's default (5) and no further, with one warning line.
Every crafted file here would otherwise stall or retry for minutes: the subprocess timeout is the bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh.llm.defaults import DEFAULT_MAX_RETRIES
from tests.repl.test_cli import dsh

ENDS_WITHIN = 60  # seconds: a refusal or a capped replay ends long before; an unbounded one never does
FIX = "  fix: the endpoint at 127.0.0.1:9 is having trouble; retry later"
INF, NAN = float("inf"), float("nan")  # json.dumps writes them as the bare words Infinity and NaN


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config").mkdir()
    return tmp_path


def _header(kind: str = "dsh-wire-trace", timeouts: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": kind, "version": 1, "dsh": "0.1.0", "base_url": "http://127.0.0.1:9",
            "timeouts": {"stream_idle_timeout": 2, "first_token_timeout": 2} if timeouts is None else timeouts}


def _request(n: int) -> dict[str, Any]:
    return {"type": "request", "n": n, "method": "POST", "url": "http://127.0.0.1:9/chat/completions",
            "path": "/chat/completions", "headers": [], "body": "{}"}


def _stalled(n: int = 1, *, t_response: float = 0.0, t_data: float = 0.01, t_end: float = 0.02) -> list[dict]:
    """An answer that sends a keep-alive, then nothing until dsh's own deadline gives up (``closed``)."""
    return [_request(n),
            {"type": "response", "n": n, "t": t_response, "status": 200,
             "headers": [["content-type", "text/event-stream"]]},
            {"type": "data", "n": n, "t": t_data, "text": ": keep-alive\n\n"},
            {"type": "end", "n": n, "t": t_end, "how": "closed"}]


def _busy(n: int) -> list[dict]:
    """A 503 that asks to be retried after a millisecond: each retry is immediate."""
    return [_request(n),
            {"type": "response", "n": n, "t": 0.001, "status": 503,
             "headers": [["content-type", "application/json"], ["retry-after-ms", "1"]]},
            {"type": "data", "n": n, "t": 0.002, "text": '{"error": {"message": "busy"}}'},
            {"type": "end", "n": n, "t": 0.003, "how": "complete"}]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


CRAFTED = [
    pytest.param([_header(timeouts={"stream_idle_timeout": INF, "first_token_timeout": INF}), *_stalled()],
                 "line 1: 'timeouts.stream_idle_timeout' is Infinity, not a finite number", id="timeout-infinity"),
    pytest.param([_header(timeouts={"stream_idle_timeout": 2, "first_token_timeout": NAN}), *_stalled()],
                 "line 1: 'timeouts.first_token_timeout' is NaN, not a finite number", id="timeout-nan"),
    pytest.param([_header(timeouts={"stream_idle_timeout": -1, "first_token_timeout": 2}), *_stalled()],
                 "line 1: 'timeouts.stream_idle_timeout' must be more than 0 and at most 3600 seconds, got -1",
                 id="timeout-negative"),
    pytest.param([_header(timeouts={"stream_idle_timeout": 1e9, "first_token_timeout": 1e9}), *_stalled()],
                 "line 1: 'timeouts.stream_idle_timeout' must be more than 0 and at most 3600 seconds, got 1e+09",
                 id="timeout-absurd"),
    pytest.param([_header(), *_stalled(t_response=500_000.0)],
                 "line 3: 't' must be from 0 to 3600 seconds, got 500000", id="response-t-absurd"),
    pytest.param([_header(), *_stalled(t_data=NAN)], "line 4: 't' is NaN, not a finite number", id="data-t-nan"),
    pytest.param([_header(), *_stalled(t_end=-INF)], "line 5: 't' is -Infinity, not a finite number",
                 id="end-t-minus-infinity"),
]


@pytest.mark.parametrize(("records", "reason"), CRAFTED)
def test_a_crafted_timing_is_refused_with_one_line_naming_the_field(home: Path, records: list[dict],
                                                                     reason: str) -> None:
    trace = _write(home / "crafted.jsonl", records)
    result = dsh(home, "-p", "hi", "--replay", str(trace), timeout=ENDS_WITHIN)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"dsh: failed to start: replay file {trace} is not a dsh wire trace ({reason})\n"


def test_a_non_finite_number_anywhere_is_refused_where_the_file_is_parsed(home: Path) -> None:
    """Not only the timings: JSON has no NaN, and a record that holds one is not a recording dsh wrote."""
    records = [_header(), *_stalled()]
    records[1]["body"] = {"temperature": NAN}
    trace = _write(home / "crafted.jsonl", records)
    result = dsh(home, "replay-server", str(trace), timeout=ENDS_WITHIN)
    assert result.returncode == 2
    assert result.stderr == (f"dsh: failed to start: replay file {trace} is not a dsh wire trace "
                             "(line 2: 'body.temperature' is NaN, not a finite number)\n")


def test_a_capsule_s_recorded_retries_are_capped_at_the_policy_s_default(home: Path) -> None:
    """100 recorded 503s and ``max_retries`` 100 in the capsule's settings: 5 retries, then the turn fails."""
    report = {"type": "report", "turn": "[turn failed SERVER] busy",
              "settings": {"max_retries": {"value": 100, "source": "config.toml"}}}
    records = [_header("dsh-failure-capsule"), report]
    for n in range(1, 102):
        records += _busy(n)
    capsule = _write(home / "capsule.jsonl", records)
    result = dsh(home, "-p", "hi", "--replay", str(capsule), timeout=ENDS_WITHIN)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == (f"dsh: warning: replay file {capsule} recorded max_retries = 100; a replay retries "
                        f"at most {DEFAULT_MAX_RETRIES} times")
    retries = [line for line in lines if line.startswith("[retry ")]
    assert [line.split()[1] for line in retries] == [f"{k}/{DEFAULT_MAX_RETRIES}" for k in range(1, 6)]
    assert lines[-2:] == ["[turn failed SERVER] busy", FIX]


def test_a_capsule_s_recorded_retries_within_the_cap_are_followed_without_a_word(home: Path) -> None:
    report = {"type": "report", "settings": {"max_retries": {"value": 2, "source": "config.toml"}}}
    records = [_header("dsh-failure-capsule"), report, *_busy(1), *_busy(2), *_busy(3)]
    capsule = _write(home / "capsule.jsonl", records)
    result = dsh(home, "-p", "hi", "--replay", str(capsule), timeout=ENDS_WITHIN)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("[retry ")] == ["1/2", "2/2"]
    assert not any(line.startswith("dsh: warning") for line in lines)
    assert lines[-2:] == ["[turn failed SERVER] busy", FIX]
