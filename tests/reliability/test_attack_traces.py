"""Attacks on traces and logs: what a huge upload, a huge trace or a huge session record costs in memory.

Each case runs the real dsh as a child that writes its peak RSS (``VmHWM``) at exit
(tests/reliability/peak_rss_dsh.py) and asserts a bound below the size of the attack, so a process that
held the upload, the trace or the record fails it (docs/reliability.md, "Attacks on traces and logs";
``python -m bench --only traces`` measures the full sizes).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import lines
from dsh.llm.lines import LongLine, read_line_batches, read_lines
from dsh.llm.loopback.replay_server import MAX_REQUEST_BODY
from fixtures.big_files import TRACE_ANSWER, write_session, write_trace
from tests.reliability.dsh_harness import FIGURES, make_home, run_dsh
from tests.repl.test_replay_security import pieces, replay_server

LAUNCHER = ("-m", "tests.reliability.peak_rss_dsh")
_MB = 1 << 20


def test_replay_server_keeps_no_upload_in_memory(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, 0)
    peak_file = tmp_path / "peak.txt"
    upload = 4 * MAX_REQUEST_BODY  # chunked: refused at the limit, the rest read and dropped
    with replay_server(tmp_path, trace, LAUNCHER, DSH_PEAK_RSS_FILE=str(peak_file)) as (_, url):
        refused = httpx.post(url, content=pieces(upload), timeout=300)
        assert refused.status_code == 413
        answered = httpx.post(url, json={"model": "m", "messages": []}, timeout=30)
        assert TRACE_ANSWER in answered.text
    peak = float(peak_file.read_text())
    FIGURES["replay-server peak RSS, 128 MiB upload"] = f"{peak:.0f} MB"
    assert peak < MAX_REQUEST_BODY / _MB  # less than the limit: no upload was ever held


def test_replay_of_a_100_mb_trace_runs_in_bounded_memory(tmp_path: Path) -> None:
    home = make_home(tmp_path, "max_retries = 0\n")
    trace = tmp_path / "big.jsonl"
    write_trace(trace, 100 * _MB)
    peak_file = tmp_path / "peak.txt"
    run = run_dsh(home, ["--replay", str(trace), "--replay-speed", "1000", "-p", "hi"], key=None,
                  env={"DSH_PEAK_RSS_FILE": str(peak_file)}, launcher=LAUNCHER, label="replay-100mb", timeout=300)
    assert (run.returncode, run.stdout, run.stderr) == (0, TRACE_ANSWER + "\n", "")
    peak = float(peak_file.read_text())
    FIGURES["--replay peak RSS, 100 MB trace"] = f"{peak:.0f} MB"
    assert peak < 100  # MB: less than the trace (a whole-file read held all of it, and more)


def test_sessions_show_of_a_100_mb_record_runs_in_bounded_memory(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    home.sessions.mkdir(parents=True)
    log = home.sessions / "20260101-000000-a1b2c3.jsonl"
    write_session(log, 100 * _MB)
    peak_file = tmp_path / "peak.txt"
    run = run_dsh(home, ["sessions", "show", log.stem], env={"DSH_PEAK_RSS_FILE": str(peak_file)},
                  launcher=LAUNCHER, label="show-100mb", timeout=300)
    assert run.returncode == 0, run.stderr
    assert "(tool/result record of 104.9 MB not shown)" in run.stdout.splitlines()
    peak = float(peak_file.read_text())
    FIGURES["sessions show peak RSS, one 100 MB record"] = f"{peak:.0f} MB"
    assert peak < 100  # MB: less than the record


@settings(max_examples=300, deadline=None)
@given(data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\n\n", b"c" * 7, b"d" * 300]), max_size=40).map(b"".join),
       chunk=st.sampled_from([1, 2, 3, 5, 64, 4096]), max_line=st.sampled_from([None, 0, 1, 3, 7, 300]),
       start=st.integers(0, 3))
def test_fuzz_the_line_reader_never_holds_a_line_over_its_limit(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk: int, max_line: int | None, start: int
) -> None:
    """Every line as ``split`` finds it, a longer one as its size and first bytes, whatever the chunking."""
    start = min(start, len(data))
    path = tmp_path_factory.mktemp("lines") / "log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lines, "_CHUNK", chunk)  # cut lines across reads at every offset
            got = list(read_lines(fd, start, max_line=max_line))
            batched = list(read_line_batches(fd, start, max_line=max_line))
    finally:
        os.close(fd)
    expected: list[tuple[int, bytes | LongLine | None]] = []
    offset = start
    for line in data[start:].split(b"\n")[:-1]:
        too_long = max_line is not None and len(line) > max_line
        expected.append((offset, LongLine(len(line), line[:256]) if too_long else line))
        offset += len(line) + 1
    assert got == [*expected, (offset, None)]
    # The batched reader (resume's): the same lines, in lists, then where complete lines end.
    flat = [line for item in batched[:-1] for line in (item if isinstance(item, list) else [item])]
    assert flat == [line for _, line in expected] and batched[-1] == offset
