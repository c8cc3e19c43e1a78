"""``python -m bench`` (bench/__main__.py, docs/performance.md): a benchmark that fails fails the run.

Each test runs the real ``python -m bench`` entry in a child process, with its real loopback server, and two
benchmarks of this module added to its table: one that raises and one that measures. The failure must be on
stderr (its traceback and one line naming it), the run must exit 1, and nothing may be reported as ``null``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env
from tests.real_parts import missing

REASON = "the broken benchmark broke on purpose"

# The child adds this module's benchmarks to the table, then runs the entry point with the test's flags.
_ENTRY = """
import sys
import bench.__main__ as bench
extra = (
    bench.Benchmark("broken", (("broken_x", "x", ("<=", 1.0)),), "tests.test_bench_run", "broken"),
    bench.Benchmark("fine", (("fine_ms", "ms", ("<", 10.0)),), "tests.test_bench_run", "fine"),
    bench.Benchmark("half", (("half_ms", "ms", None), ("lost_ms", "ms", None)), "tests.test_bench_run", "fine"),
)
bench.BENCHMARKS = bench.BENCHMARKS + extra
raise SystemExit(bench.main(sys.argv[1:]))
"""


async def broken(settings: Settings, server: BenchServer) -> list[Figure]:
    raise RuntimeError(REASON)


async def fine(settings: Settings, server: BenchServer) -> list[Figure]:
    return [Figure("fine_ms", "ms", Stats.of([1.0, 2.0, 3.0])), Figure("half_ms", "ms", Stats.of([4.0]))]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _ENTRY, *args], cwd=REPO_ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=300, check=False)


def test_a_benchmark_that_raises_fails_the_run_with_its_error_on_stderr_and_the_rest_still_runs() -> None:
    run = _bench("--only", "broken,fine")
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert f"RuntimeError: {REASON}" in lines  # the traceback's last line
    assert any(line.startswith("bench: broken FAILED in ") and line.endswith(f"s: RuntimeError: {REASON}")
               for line in lines), run.stderr
    assert lines[-1] == f"bench: 1 of 2 benchmarks failed: broken (RuntimeError: {REASON})"
    rows = {line.split()[0]: line for line in run.stdout.splitlines() if line.startswith(("broken_x", "fine_ms"))}
    assert rows["broken_x"].endswith(f"<= 1      FAILED: RuntimeError: {REASON}")
    assert rows["fine_ms"].split()[1:] == ["(ms)", "2", "1", "3", "<", "10", "ok"]  # the target declared in the table
    assert "null" not in run.stdout + run.stderr


def test_json_output_leaves_a_failed_figure_out_and_names_the_failure() -> None:
    run = _bench("--only", "fine,broken", "--json")
    assert run.returncode == 1, run.stderr
    payload = json.loads(run.stdout)
    assert payload["_failed"] == {"broken": f"RuntimeError: {REASON}"}
    assert "broken_x" not in payload and payload["fine_ms"]["value"] == 2.0 and payload["fine_ms"]["ok"] is True
    assert "null" not in json.dumps(payload["fine_ms"])


def test_a_figure_the_benchmark_did_not_produce_fails_the_run() -> None:
    run = _bench("--only", "half")
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == "bench: 1 of 1 benchmarks failed: half (not produced: lost_ms)"


def test_a_run_where_every_benchmark_measures_exits_0() -> None:
    run = _bench("--only", "fine")
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[-1].startswith("bench: fine done in ")


@pytest.mark.timeout(240)
def test_stream_vs_openai_reports_a_value() -> None:
    """It failed with ``KeyError: 'no_ring'`` (a line pasted from the ring benchmark) and printed null."""
    if importlib.util.find_spec("openai") is None:
        missing("the openai SDK", "install it with: .venv/bin/pip install -e '.[bench]'")
    run = _bench("--only", "stream_vs_openai", "--quick", "--repeat", "1", "--json")
    assert run.returncode == 0, run.stderr
    figure = json.loads(run.stdout)["stream_vs_openai"]
    assert figure["value"] > 0 and figure["details"]["dsh_events"] == 20_002
