"""What a user sees of an answer that survives a cut (issue 37 part 6), from the real ``dsh`` against the loopback
fault server: ``-p``'s stdout holds the whole answer once and stderr the continuation line; ``/why`` keeps the
cut's cause chain although the turn completed; another dialect, or ``max_continuations = 0``, ends the turn at the
cut as before; ``auto_continue`` goes on past the output-token limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.reliability.dsh_harness import config_text, make_home, run_dsh

ANSWER = "The answer begins here, and then it goes on to the end."
FIRST = "The answer begins here,"
LINE = f"[continuing after TRANSPORT: {len(FIRST)} chars kept (prefix completion)]"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    started = FaultServer().start_in_thread()
    started.default = Behaviour("text", text=ANSWER)
    try:
        yield started
    finally:
        started.stop()


def test_dsh_p_prints_the_whole_answer_once_and_the_line_on_stderr(server: FaultServer, tmp_path: Path):
    server.push(Behaviour("reset_mid_stream", text=FIRST))
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["-p", "explain", "--dialect", "deepseek"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    assert run.stdout == ANSWER + "\n"
    assert LINE in run.stderr.splitlines()
    assert [r.path for r in server.requests] == ["/chat/completions", "/beta/chat/completions"]


def test_dsh_p_json_holds_the_whole_answer(server: FaultServer, tmp_path: Path):
    server.push(Behaviour("reset_mid_stream", text=FIRST))
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["-p", "explain", "--dialect", "deepseek", "--output-format", "json"],
                  env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["text"] == ANSWER and result["usage"]["requests"] == 2  # the cut request counts too


def test_why_keeps_the_cut_chain_after_the_turn_completed(server: FaultServer, tmp_path: Path):
    server.push(Behaviour("reset_mid_stream", text=FIRST))
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["--dialect", "deepseek"], ["explain", "/why"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert LINE in out
    why = next(n for n, line in enumerate(out) if line.startswith("last failure (TRANSPORT, request id fault-0001"))
    assert any("Connection reset by peer" in line for line in out[why + 1:])


@pytest.mark.parametrize(("args", "extra"), [([], ""), (["--dialect", "deepseek"], "max_continuations = 0\n")])
def test_another_dialect_or_no_continuations_ends_the_turn_at_the_cut(server: FaultServer, tmp_path: Path, args,
                                                                      extra):
    server.push(Behaviour("reset_mid_stream", text=FIRST))
    home = make_home(tmp_path, config_text(extra=extra))
    run = run_dsh(home, ["-p", "explain", *args], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 1
    assert run.stdout == FIRST + "\n"
    assert any(line.startswith("[turn failed TRANSPORT]") for line in run.stderr.splitlines())
    assert len(server.requests) == 1


def test_auto_continue_goes_on_past_the_output_token_limit(server: FaultServer, tmp_path: Path):
    server.push(Behaviour("length", text=FIRST))
    home = make_home(tmp_path, config_text(extra="auto_continue = true\n"))
    run = run_dsh(home, ["-p", "explain", "--dialect", "deepseek"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    assert run.stdout == ANSWER + "\n"
    assert (f"[continuing after the output-token limit: {len(FIRST)} chars kept (prefix completion)]"
            in run.stderr.splitlines())


def test_a_bad_max_continuations_is_a_config_error(tmp_path: Path):
    home = make_home(tmp_path, config_text(extra="max_continuations = 11\n"))
    run = run_dsh(home, ["-p", "explain"])
    assert run.returncode == 2
    assert "max_continuations" in run.stderr


def test_a_recorded_continued_turn_replays_as_it_ran(server: FaultServer, tmp_path: Path):
    server.push(Behaviour("reset_mid_stream", text=FIRST))
    home = make_home(tmp_path, config_text())
    trace = tmp_path / "cut.jsonl"
    live = run_dsh(home, ["-p", "explain", "--dialect", "deepseek", "--record", str(trace)],
                   env={"DEEPSEEK_BASE_URL": server.url})
    assert live.returncode == 0, live.stderr
    header = json.loads(trace.read_text(encoding="utf-8").splitlines()[0])
    assert header["dialect"] == "deepseek"
    # No --dialect: the recording says which, so the cut is continued again and the answer is the same.
    replayed = run_dsh(home, ["-p", "explain", "--replay", str(trace)])
    assert (replayed.returncode, replayed.stdout) == (0, live.stdout)
    assert LINE in replayed.stderr.splitlines()
