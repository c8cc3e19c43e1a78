"""Client benchmarks: dsh's stream against the parse and transport floors and the openai SDK; TTFT."""

from __future__ import annotations

import contextlib
import statistics

from bench import subjects
from bench.harness import BenchServer, Figure, Settings, Stats, cpu_timed, paired_async, ratios

__all__ = ["stream_figures", "stream_vs_openai", "ttft_overhead"]


def tiny_stream(settings: Settings) -> str:
    """The DeepSeek tiny-chunk case: 200 000 deltas of one to three characters (20 000 with --quick)."""
    return f"tiny-{settings.size(200_000, 20_000)}"


def tool_stream(settings: Settings) -> str:
    """Reasoning deltas then two tool calls streamed as argument fragments (about 2N events)."""
    return f"tool-{settings.size(50_000, 5_000)}"


def _check_same_work(counts: dict[str, list[int]]) -> dict[str, int]:
    """Every subject must have read the whole stream (the same count on every run)."""
    last = {name: values[-1] for name, values in counts.items() if values}
    for name, values in counts.items():
        if len(set(values)) != 1:
            raise RuntimeError(f"{name} read a different amount on different runs: {sorted(set(values))}")
    return last


async def stream_figures(settings: Settings, server: BenchServer) -> list[Figure]:
    """``stream_vs_parse_floor``, ``transport_floor`` and ``ring_vs_no_ring`` (what the failure capsule's
    always-on ring costs: docs/reporting.md), over the tiny-delta and the tool stream, in this process's CPU
    time (:func:`~bench.harness.cpu_timed`; the wall times are in the details)."""
    # --quick's streams are a tenth as long, so one scheduling hiccup weighs ten times more: more runs.
    repeat = max(settings.repeat, 7) if settings.quick else settings.repeat
    parse_parts: dict[str, Stats] = {}
    transport_parts: dict[str, Stats] = {}
    ring_parts: dict[str, Stats] = {}
    details: dict[str, dict[str, object]] = {}
    for label, stream in (("tiny_deltas", tiny_stream(settings)), ("reasoning_tool", tool_stream(settings))):
        base = server.base_url(stream)
        counts: dict[str, list[int]] = {"dsh": [], "no_ring": [], "parse": [], "transport": []}
        walls: dict[str, list[float]] = {name: [] for name in counts}
        async with contextlib.AsyncExitStack() as stack:
            samples = await paired_async(
                settings,
                {
                    "dsh": cpu_timed(subjects.dsh_client(stack, base, counts["dsh"]), walls["dsh"]),
                    "no_ring": cpu_timed(subjects.dsh_client(stack, base, counts["no_ring"], ring_bytes=0),
                                         walls["no_ring"]),
                    "parse": cpu_timed(subjects.parse_floor(stack, base, counts["parse"]), walls["parse"]),
                    "transport": cpu_timed(subjects.transport_floor(stack, base, counts["transport"]),
                                           walls["transport"]),
                },
                repeat=repeat,
            )
        work = _check_same_work(counts)
        parse_parts[label] = Stats.of(ratios(samples["dsh"], samples["parse"]))
        transport_parts[label] = Stats.of(ratios(samples["dsh"], samples["transport"]))
        ring_parts[label] = Stats.of(ratios(samples["dsh"], samples["no_ring"]))
        details[label] = {
            "stream": stream,
            "events": work["dsh"],
            "bytes": work["transport"],
            "dsh_ms": round(statistics.median(samples["dsh"]) * 1000, 1),
            "no_ring_ms": round(statistics.median(samples["no_ring"]) * 1000, 1),
            "parse_floor_ms": round(statistics.median(samples["parse"]) * 1000, 1),
            "transport_floor_ms": round(statistics.median(samples["transport"]) * 1000, 1),
            "dsh_us_per_event": round(statistics.median(samples["dsh"]) / work["dsh"] * 1e6, 2),
            "wall_ms": {name: round(statistics.median(times[-repeat:]) * 1000, 1)
                        for name, times in walls.items()},
        }
    return [
        Figure("stream_vs_parse_floor", "x", target=("<=", 1.3), parts=parse_parts, details=details),
        Figure("transport_floor", "x", parts=transport_parts,
               details={label: {k: v for k, v in d.items() if k in ("dsh_ms", "transport_floor_ms")}
                        for label, d in details.items()}),
        Figure("ring_vs_no_ring", "x", target=("<=", 1.1), parts=ring_parts,
               details={label: {k: v for k, v in d.items() if k in ("dsh_ms", "no_ring_ms")}
                        for label, d in details.items()}),
    ]


async def stream_vs_openai(settings: Settings, server: BenchServer) -> list[Figure]:
    """dsh's time over the openai SDK's on the same tiny-delta stream (lower is better)."""
    stream = tiny_stream(settings)
    base = server.base_url(stream)
    counts: dict[str, list[int]] = {"dsh": [], "openai": [], "warm": []}
    async with contextlib.AsyncExitStack() as stack:
        # The SDK takes ~100 us a chunk, so its warm-up (imports, pydantic model build) reads a short
        # stream through its own client instead of the 200 000-delta one.
        samples = await paired_async(
            settings,
            {
                "dsh": subjects.dsh_client(stack, base, counts["dsh"]),
                "openai": subjects.openai_sdk(stack, base, counts["openai"]),
            },
            warmups={"openai": subjects.openai_sdk(stack, server.base_url("text"), counts["warm"])},
            repeat=2 if settings.quick else max(2, min(settings.repeat, 3)),
        )
    counts.pop("warm")
    work = _check_same_work(counts)
    return [
        Figure(
            "stream_vs_openai",
            "x",
            Stats.of(ratios(samples["dsh"], samples["openai"])),
            target=("<=", 0.5),
            details={
                "stream": stream,
                "dsh_ms": round(statistics.median(samples["dsh"]) * 1000, 1),
                "openai_ms": round(statistics.median(samples["openai"]) * 1000, 1),
                "dsh_events": work["dsh"],
                "openai_deltas": work["openai"],
            },
        )
    ]


async def ttft_overhead(settings: Settings, server: BenchServer) -> list[Figure]:
    """dsh's time to the first text event minus raw httpx's time to the first line, in ms."""
    base = server.base_url("ttft")
    async with contextlib.AsyncExitStack() as stack:
        samples = await paired_async(
            settings,
            {"dsh": subjects.dsh_first_text(stack, base), "raw": subjects.raw_first_line(stack, base)},
            repeat=settings.size(60, 20),
            warmup=3,
        )
    differences = [(a - b) * 1000 for a, b in zip(samples["dsh"], samples["raw"], strict=True)]
    return [
        Figure(
            "ttft_overhead_ms",
            "ms",
            Stats.of(differences),
            target=("<", 1.0),
            details={
                "dsh_ttft_ms": round(statistics.median(samples["dsh"]) * 1000, 3),
                "raw_first_line_ms": round(statistics.median(samples["raw"]) * 1000, 3),
            },
        )
    ]
