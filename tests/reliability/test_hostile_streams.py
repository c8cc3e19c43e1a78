"""Hostile streams and hostile tool calls against the real dsh child: it neither wedges nor swells.

Each case runs ``dsh -p`` (piped, the real client, agent and tools) against the fault server and
checks what the user sees, the exit code, the session log, and the child's peak RSS (``VmHWM``,
written at exit by tests/reliability/peak_rss_dsh.py) against the 512 MB bound of
docs/reliability.md ("Hostile streams").
"""

from __future__ import annotations

import os
from pathlib import Path

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.reliability.dsh_harness import FIGURES, Home, Run, config_text, make_home, read_log, run_dsh

PEAK_LIMIT_MB = 512
LAUNCHER = ("-m", "tests.reliability.peak_rss_dsh")


def _run(home: Home, server: FaultServer, lines: list[str], label: str) -> tuple[Run, float]:
    peak_file = home.root / f"peak-{label}.txt"
    run = run_dsh(home, ["--base-url", server.url], lines, env={"DSH_PEAK_RSS_FILE": str(peak_file)},
                  launcher=LAUNCHER, label=label, timeout=240)
    peak = float(peak_file.read_text())
    FIGURES[f"hostile peak RSS, {label}"] = f"{peak:.0f} MB"
    return run, peak


def test_a_gzip_keepalive_bomb_times_out_on_time_in_bounded_memory(tmp_path: Path, server: FaultServer) -> None:
    # 500 MiB of ":\n" inflated (about 0.5 MB on the wire), then silence: only the deadline can end it.
    home = make_home(tmp_path, config_text(first_token=2))
    server.push(Behaviour("keepalive_bomb", inflated_mb=500))
    run, peak = _run(home, server, ["hello"], "keepalive-bomb")
    assert run.returncode == 0  # piped stdin: a failed turn, then the end of input
    assert run.stdout.splitlines() == [
        f"[main turn 1] [turn failed TIMEOUT] no content from the endpoint at 127.0.0.1:{server.port} within 2s "
        "(keep-alives only)"]
    assert peak < PEAK_LIMIT_MB


def test_a_flood_of_tool_calls_runs_128_in_bounded_time_log_and_memory(tmp_path: Path, server: FaultServer) -> None:
    home = make_home(tmp_path, config_text())
    server.push(Behaviour("tool_call_flood", count=100_000, name="list_dir", arguments={"path": "."}), "text")
    run, peak = _run(home, server, ["go"], "tool-call-flood")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert sum(line.startswith("  [tool call] list_dir(") for line in lines) == 129
    assert lines.count("  [tool result] Error: tool call dropped: more than 128 tool calls in one step; "
                       "this call and every later one in the response were not run") == 1
    assert lines[-1] == "Hello! How can I help you today?"
    assert home.only_session().stat().st_size < 1_000_000
    assert peak < PEAK_LIMIT_MB


def test_a_100_mb_argument_is_stored_once_in_bounded_memory(tmp_path: Path, server: FaultServer) -> None:
    home = make_home(tmp_path, config_text())
    server.push(Behaviour("huge_arguments", mb=100, name="read_file"), "text")
    run, peak = _run(home, server, ["go"], "huge-argument")
    assert run.returncode == 0, run.stderr
    assert "  [tool result] Error: path is longer than 4096 characters" in run.stdout.splitlines()
    size = home.only_session().stat().st_size
    assert 100 * 2**20 < size < 101 * 2**20  # once: the assistant/message, not again in tool/call
    assert peak < PEAK_LIMIT_MB


def test_read_file_of_a_fifo_is_refused_and_the_next_turn_works(tmp_path: Path, server: FaultServer) -> None:
    home = make_home(tmp_path, config_text())
    os.mkfifo(home.workspace / "pipe")
    server.push(Behaviour("tool_call", name="read_file", arguments={"path": "pipe"}), "text", "text")
    run, _ = _run(home, server, ["read the pipe", "and now?"], "fifo-read")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert f"  [tool result] Error: {home.workspace / 'pipe'} is a FIFO, not a regular file" in lines
    assert lines[-1] == "[main turn 2] Hello! How can I help you today?"
    _, records = read_log(home.only_session())
    assert [r["data"]["reason"]["kind"] for r in records if r["type"] == "turn/end"] == ["completed", "completed"]


def test_search_text_over_a_directory_with_a_fifo_ends_and_the_process_exits(tmp_path: Path,
                                                                             server: FaultServer) -> None:
    home = make_home(tmp_path, config_text())
    os.mkfifo(home.workspace / "src" / "pipe")
    (home.workspace / "src" / "a.txt").write_text("needle\n")
    server.push(Behaviour("tool_call", name="search_text", arguments={"pattern": "needle"}), "text")
    run, _ = _run(home, server, ["search"], "fifo-search")
    assert run.returncode == 0, run.stderr
    assert "  [tool result] src/a.txt:1: needle" in run.stdout.splitlines()
