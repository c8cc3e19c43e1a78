"""Timing, figures and the loopback server handle shared by every benchmark.

A *figure* is one reported number (a ratio or milliseconds) with its target. Comparisons are
measured side by side: each repetition runs dsh and its baseline back to back (alternating which
goes first) and the repetition's ratio is kept, so a burst of noise on the shared machine hits both
sides of one sample instead of skewing one column.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "REPO_ROOT",
    "BenchServer",
    "Figure",
    "Settings",
    "Stats",
    "child_env",
    "cpu_timed",
    "paired_async",
    "ratios",
    "repeat_sync",
    "unavailable",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    quick: bool
    repeat: int  # measured repetitions after the warm-up
    warmup: int = 1

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full


@dataclass(frozen=True)
class Stats:
    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))

    def as_json(self) -> dict[str, float | int]:
        return {"median": _round(self.median), "min": _round(self.min), "max": _round(self.max), "n": self.n}


def _round(value: float) -> float:
    return float(f"{value:.4g}")


@dataclass
class Figure:
    """One reported key. ``parts`` are sub-measurements; the headline is the worst part."""

    key: str
    unit: str  # "x" (ratio) or "ms" or "MB"
    stats: Stats | None = None
    target: tuple[str, float] | None = None  # ("<=", 1.3) / ("<", 250.0)
    parts: dict[str, Stats] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # why there is no value

    @property
    def value(self) -> float | None:
        if self.stats is not None:
            return self.stats.median
        if self.parts:
            medians = [s.median for s in self.parts.values()]
            # Every target is an upper bound, so the worst part decides the verdict.
            return max(medians)
        return None

    @property
    def ok(self) -> bool | None:
        if self.target is None or self.value is None:
            return None
        op, bound = self.target
        return self.value <= bound if op == "<=" else self.value < bound

    def target_text(self) -> str:
        return f"{self.target[0]} {self.target[1]:g}" if self.target else ""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": None if self.value is None else _round(self.value),
            "unit": self.unit,
            "target": self.target_text() or None,
            "ok": self.ok,
        }
        if self.stats is not None:
            out.update(self.stats.as_json())
        if self.parts:
            out["parts"] = {name: stats.as_json() for name, stats in self.parts.items()}
        if self.details:
            out["details"] = self.details
        if self.reason:
            out["reason"] = self.reason
        return out


def unavailable(key: str, unit: str, reason: str, target: tuple[str, float] | None = None) -> Figure:
    return Figure(key, unit, target=target, reason=reason)


def repeat_sync(settings: Settings, run: Callable[[], float | None], repeat: int | None = None) -> list[float]:
    for _ in range(settings.warmup):
        run()
    samples = []
    for _ in range(repeat or settings.repeat):
        start = time.perf_counter()
        measured = run()
        samples.append(measured if measured is not None else time.perf_counter() - start)
    return samples


async def paired_async(
    settings: Settings,
    subjects: dict[str, Callable[[], Awaitable[float | None]]],
    *,
    repeat: int | None = None,
    warmup: int | None = None,
    warmups: dict[str, Callable[[], Awaitable[float | None]]] | None = None,
) -> dict[str, list[float]]:
    """Time several subjects side by side: one sample of each per repetition, order rotating.

    ``warmups`` replaces a subject's warm-up run (e.g. a short stream for a slow baseline).
    """
    names = list(subjects)
    for name in names:
        warm = (warmups or {}).get(name, subjects[name])
        for _ in range(settings.warmup if warmup is None else warmup):
            await warm()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(repeat or settings.repeat):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            measured = await subjects[name]()
            samples[name].append(measured if measured is not None else time.perf_counter() - start)
    return samples


def cpu_timed(subject: Callable[[], Awaitable[object]], walls: list[float]) -> Callable[[], Awaitable[float]]:
    """``subject`` timed by this process's CPU seconds, its wall seconds appended to ``walls``.

    For an in-process client against the bench server (another process), the CPU time is the client's own
    work; on a shared 2-core machine the wall time mostly measures the neighbours (docs/performance.md).
    """

    async def run() -> float:
        cpu, wall = time.process_time(), time.perf_counter()
        await subject()
        walls.append(time.perf_counter() - wall)
        return time.process_time() - cpu

    return run


def ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    return [a / b for a, b in zip(numerator, denominator, strict=True)]


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python: the repo importable, no user config leaking in."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


class BenchServer:
    """``python -m bench.server`` in its own process; ``base_url(stream)`` addresses one stream."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self._preload = list(preload)
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> BenchServer:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.server", *self._preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=child_env(),
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.strip().isdigit():
            self.__exit__()
            raise RuntimeError("bench server failed to start")
        self.port = int(line)
        return self

    def __exit__(self, *exc_info: object) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()

    def base_url(self, stream: str) -> str:
        return f"http://127.0.0.1:{self.port}/{stream}"
