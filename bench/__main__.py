"""``python -m bench [--quick] [--only NAME[,NAME]] [--repeat N] [--json]``

Runs each benchmark after a warm-up, several times, against streams from its own loopback server,
and prints a table (median, min, max, target, verdict). ``--json`` prints one key per figure on
stdout instead (the table then goes to stderr). A benchmark that fails (its component missing, an
error, a figure it did not produce) fails the run: its error and traceback go to stderr as it fails,
the other benchmarks still run, and the run exits 1 naming every one that failed. ``--quick`` is the
tier for a change in progress: smaller inputs, fewer runs, every target figure (docs/performance.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from bench.harness import BenchServer, Figure, Settings, Stats, unavailable
from bench.report import render_table
from dsh.llm import error_chain, redact_text

Runner = Callable[[Settings, BenchServer], Awaitable[list[Figure]]]
_ELAPSED = {True: ("<", 180.0), False: ("<", 900.0)}  # the quick tier's 3 minutes, the full run's 15


@dataclass(frozen=True)
class Benchmark:
    name: str
    figures: tuple[tuple[str, str, tuple[str, float] | None], ...]  # (key, unit, target)
    module: str
    function: str

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _, _ in self.figures)

    def runner(self) -> Runner:
        return getattr(importlib.import_module(self.module), self.function)

    def target(self, key: str) -> tuple[str, float] | None:
        return next((target for name, _, target in self.figures if name == key), None)


@dataclass(frozen=True)
class Failure:
    benchmark: str
    reason: str


BENCHMARKS: tuple[Benchmark, ...] = (
    # Targets: issue 41's table for the figures it names (docs/performance.md), the earlier ones elsewhere.
    Benchmark("stream", (("stream_vs_parse_floor", "x", ("<=", 1.1)), ("transport_floor", "x", None),
                         ("ring_vs_no_ring", "x", ("<=", 1.03))),
              "bench.stream", "stream_figures"),
    Benchmark("openai", (("stream_vs_openai", "x", ("<=", 0.05)),), "bench.stream", "stream_vs_openai"),
    Benchmark("ttft", (("ttft_overhead_ms", "ms", ("<", 1.0)),), "bench.stream", "ttft_overhead"),
    Benchmark("loop", (("loop_vs_client", "x", None),), "bench.loop", "loop_vs_client"),
    Benchmark("masking", (("masking_vs_plain", "x", None),), "bench.masking", "masking_vs_plain"),
    Benchmark("render", (("render_vs_loop", "x", None),), "bench.render", "render_vs_loop"),
    Benchmark("scaling", (("scaling_10x", "x", ("<=", 10.5)),), "bench.loop", "scaling_10x"),
    Benchmark("rss", (("peak_rss_mb", "MB", None),), "bench.rss", "peak_rss"),
    Benchmark("hostile", (("hostile_peak_rss_mb", "MB", ("<", 512.0)),), "bench.hostile", "hostile_peak_rss"),
    Benchmark("traces", (("trace_attacks_peak_rss_mb", "MB", ("<", 128.0)),), "bench.traces", "trace_attacks"),
    Benchmark("markdown_line", (("markdown_line_ms", "ms", ("<", 10.0)),), "bench.markdown_hostile", "line_cost"),
    Benchmark("markdown_inline", (("markdown_inline_4x", "x", ("<=", 6.0)),), "bench.markdown_hostile",
              "inline_growth"),
    Benchmark("markdown_answer", (("markdown_answer_ms", "ms", ("<", 2000.0)),), "bench.markdown_hostile",
              "hostile_answer_cost"),
    Benchmark("markdown_packed_read", (("markdown_packed_read_ms", "ms", None),), "bench.markdown_hostile",
              "packed_read"),
    Benchmark("ctrl_c_hostile", (("ctrl_c_hostile_ms", "ms", ("<", 100.0)),), "bench.markdown_hostile",
              "ctrl_c_hostile"),
    Benchmark("resume", (("resume_100k_ms", "ms", ("<", 1000.0)),), "bench.loop", "resume_100k"),
    Benchmark("sessions_list", (("sessions_list_ms", "ms", ("<", 300.0)),), "bench.sessions", "sessions_list"),
    Benchmark("resume_1gb", (("resume_1gb", "s", ("<", 5.0)),), "bench.sessions", "resume_1gb"),
    Benchmark("resume_200mb_82k", (("resume_200mb_82k", "s", ("<", 3.0)), ("resume_200mb_82k_peak_mb", "MB",
                                                                          ("<", 200.0))),
              "bench.sessions", "resume_200mb_82k"),
    Benchmark("startup", (("startup_ms", "ms", ("<=", 60.0)), ("prompt_live_ms", "ms", ("<=", 120.0))),
              "bench.startup", "startup"),
    Benchmark("child_dsh", (("child_dsh_roundtrip_ms", "ms", ("<", 500.0)),), "bench.subagents",
              "child_dsh_roundtrip"),
    Benchmark("acp", (("acp_vs_raw_sdk", "x", ("<=", 1.1)),), "bench.subagents", "acp_vs_raw_sdk"),
    Benchmark("acp_front", (("acp_vs_print", "x", ("<=", 1.1)), ("acp_peak_rss_mb", "MB", None)), "bench.acp",
              "acp_vs_print"),
    Benchmark("acp_first_chunk", (("acp_first_chunk_ms", "ms", ("<=", 400.0)),), "bench.acp", "acp_first_chunk"),
    Benchmark("mcp", (("mcp_roundtrip_raw_ms", "ms", None), ("mcp_vs_raw_sdk", "x", ("<=", 1.2))), "bench.mcp",
              "mcp_vs_raw_sdk"),
    Benchmark("mcp_first_prompt", (("mcp_first_prompt_ms", "ms", ("<", 30.0)),), "bench.mcp", "mcp_first_prompt"),
    Benchmark("sandbox", (("sandbox_cost_ms", "ms", None), ("sandbox_vs_bare", "x", None)), "bench.sandbox",
              "sandbox_cost"),
    Benchmark("undo", (("undo_journal_vs_bare", "x", None), ("undo_journal_cost_ms", "ms", None)), "bench.undo",
              "undo_journal_cost"),
    Benchmark("prefix_hash", (("prefix_hash_vs_stream", "x", ("<=", 0.02)),), "bench.prefix_hash", "prefix_hashing"),
    Benchmark("continuation", (("continue_vs_retry", "x", None),), "bench.continuation", "continued_vs_retry"),
    Benchmark("extensions", (("extensions_first_prompt_ms", "ms", ("<=", 10.0)),), "bench.extensions",
              "extensions_first_prompt"),
    Benchmark("mentions", (("mention_complete_ms", "ms", ("<", 50.0)), ("mention_list_ms", "ms", None)),
              "bench.mentions", "mention_completion"),
    Benchmark("search", (("search_vs_rg", "x", ("<=", 3.0)), ("search_ignored_opens", "opens", ("<=", 0.0)),
                         ("search_peak_mb", "MB", None)), "bench.search", "search_vs_rg"),
)


def _select(only: str | None) -> list[Benchmark]:
    if not only:
        return list(BENCHMARKS)
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    known = {b.name for b in BENCHMARKS} | {key for b in BENCHMARKS for key in b.keys}
    unknown = sorted(wanted - known)
    if unknown:
        names = ", ".join(b.name for b in BENCHMARKS)
        keys = ", ".join(key for b in BENCHMARKS for key in b.keys)
        raise ValueError(f"unknown benchmark {', '.join(unknown)} (benchmarks: {names}; figures: {keys})")
    return [b for b in BENCHMARKS if b.name in wanted or wanted & set(b.keys)]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        missing = getattr(exc, "name", None) or error_chain(exc)
        return f"component not available: {missing}"
    return f"{type(exc).__name__}: {redact_text(error_chain(exc))}"[:500]


async def _run_one(benchmark: Benchmark, settings: Settings,
                   server: BenchServer) -> tuple[list[Figure], Failure | None]:
    """The benchmark's figures, each with the target declared here; a failure says why, its traceback on stderr."""
    try:
        figures = await benchmark.runner()(settings, server)
    except Exception as exc:
        if os.environ.get("BENCH_DEBUG"):
            raise
        traceback.print_exc(file=sys.stderr)
        reason = _reason(exc)
        return [unavailable(key, unit, reason, target) for key, unit, target in benchmark.figures], \
            Failure(benchmark.name, reason)
    for figure in figures:
        if figure.key in benchmark.keys:  # one place for every target: this table
            figure.target = benchmark.target(figure.key)
    missing = [key for key in benchmark.keys if key not in {figure.key for figure in figures}]
    if missing:
        reason = f"not produced: {', '.join(missing)}"
        return figures + [unavailable(key, unit, reason, target) for key, unit, target in benchmark.figures
                          if key in missing], Failure(benchmark.name, reason)
    empty = next((figure for figure in figures if figure.value is None), None)  # e.g. a tool it needs is missing
    return figures, Failure(benchmark.name, f"{empty.key}: {empty.reason}") if empty is not None else None


async def _run_all(selected: list[Benchmark], settings: Settings) -> tuple[list[Figure], list[Failure], float]:
    figures: list[Figure] = []
    failures: list[Failure] = []
    started = time.perf_counter()
    with BenchServer() as server:
        for benchmark in selected:
            began = time.perf_counter()
            _progress(f"bench: {benchmark.name} ...")
            produced, failure = await _run_one(benchmark, settings, server)
            figures += produced
            took = time.perf_counter() - began
            if failure is None:
                _progress(f"bench: {benchmark.name} done in {took:.1f}s")
            else:
                failures.append(failure)
                _progress(f"bench: {benchmark.name} FAILED in {took:.1f}s: {failure.reason}")
    return figures, failures, time.perf_counter() - started


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _meta(settings: Settings, elapsed: float) -> dict[str, object]:
    return {
        "quick": settings.quick,
        "repeat": settings.repeat,
        "warmup": settings.warmup,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "elapsed_s": round(elapsed, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1].replace("``", ""))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller streams")
    parser.add_argument("--only", metavar="NAME[,NAME]", help="benchmark names or figure keys to run")
    parser.add_argument("--repeat", type=int, metavar="N", help="measured repetitions (default 5, quick 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args(argv)
    try:
        selected = _select(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    repeat = args.repeat or (3 if args.quick else 5)
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    settings = Settings(quick=args.quick, repeat=repeat)
    figures, failures, elapsed = anyio.run(_run_all, selected, settings)
    if not args.only:  # the whole tier: its own time is a figure too
        figures.append(Figure("bench_elapsed_s", "s", Stats.of([elapsed]), target=_ELAPSED[settings.quick]))
    table = render_table(figures, settings, elapsed)
    if args.json:
        print(table, file=sys.stderr)
        payload: dict[str, object] = {figure.key: figure.as_json() for figure in figures if figure.reason is None}
        payload["_meta"] = _meta(settings, elapsed)
        if failures:
            payload["_failed"] = {failure.benchmark: failure.reason for failure in failures}
        print(json.dumps(payload, indent=2))
    else:
        print(table)
    if failures:
        _progress(f"bench: {len(failures)} of {len(selected)} benchmarks failed: "
                  + "; ".join(f"{failure.benchmark} ({failure.reason})" for failure in failures))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
