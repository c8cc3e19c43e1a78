"""The printed table: one row per figure (value, target, verdict), one indented row per part."""

from __future__ import annotations

import os

from bench.harness import Figure, Settings, Stats

__all__ = ["render_table"]

_HEAD = f"{'figure':<28} {'median':>10} {'min':>10} {'max':>10}  {'target':<9} {'verdict'}"


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"  # no value: the verdict says why (the run fails)
    text = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return text + ("x" if unit == "x" else "")


def _row(label: str, stats: Stats | None, unit: str, value: float | None = None) -> str:
    if stats is None:
        return f"{label:<28} {_number(value, unit):>10} {'':>10} {'':>10}"
    return (f"{label:<28} {_number(stats.median, unit):>10} {_number(stats.min, unit):>10} "
            f"{_number(stats.max, unit):>10}")


def _verdict(figure: Figure) -> str:
    if figure.value is None:
        return f"FAILED: {figure.reason}"
    if figure.ok is None:
        return "(no target)"
    return "ok" if figure.ok else "MISSED"


def _details(figure: Figure) -> list[str]:
    """Supporting numbers, one line per part (or one line), indented under the figure."""
    plain = [f"{key}={value}" for key, value in figure.details.items() if not isinstance(value, dict)]
    lines = ["      " + " ".join(plain)] if plain else []
    for key, value in figure.details.items():
        if isinstance(value, dict):
            lines.append(f"      {key}: " + " ".join(f"{k}={v}" for k, v in value.items()))
    return lines


def render_table(figures: list[Figure], settings: Settings, elapsed: float) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    mode = "quick" if settings.quick else "full"
    lines = [
        f"dsh benchmarks ({mode}: {settings.repeat} runs after {settings.warmup} warm-up; "
        f"{os.cpu_count()} cpus, load {load}; {elapsed:.0f}s)",
        "ratios are dsh over its baseline, measured side by side per run; ms are absolute",
        "",
        _HEAD,
        "-" * len(_HEAD),
    ]
    for figure in figures:
        unit = f" ({figure.unit})" if figure.unit != "x" else ""
        head = _row(figure.key + unit, figure.stats, figure.unit, figure.value)
        lines.append(f"{head}  {figure.target_text():<9} {_verdict(figure)}")
        for name, stats in figure.parts.items():
            lines.append(_row(f"  {name}", stats, figure.unit))
        lines += _details(figure)
    return "\n".join(lines)
