"""The reliability counts section and its JSON report (docs/reliability.md), written once per run.

Under pytest-xdist every worker counts its own tests: each hands its counts and figures to the
controller (``workeroutput``), which adds them up and writes the one section. A run in one process
writes it from its own counts. Imported by tests/conftest.py and tests/reliability/conftest.py.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

WORKER_OUTPUT_KEY = "dsh_reliability"
REPORT_ENV = "DSH_RELIABILITY_REPORT"
SCANNED = "files the session-end canary scan covers"


def payload(counts: collections.Counter[str], figures: dict[str, str]) -> dict[str, Any]:
    """What a worker sends: plain dicts (xdist serializes them)."""
    return {"counts": dict(counts), "figures": dict(figures)}


def merge(counts: collections.Counter[str], figures: dict[str, str], sent: dict[str, Any] | None) -> None:
    """Add one worker's ``payload`` into the run's counts and figures."""
    if not sent:
        return
    counts.update(sent["counts"])
    figures.update(sent["figures"])


def _fuzz_total(counts: collections.Counter[str]) -> int:
    return sum(value for key, value in counts.items() if key.startswith("fuzz cases"))


def _files_under(base: Path | None) -> int | None:
    if base is None:
        return None
    try:
        return sum(1 for path in base.rglob("*") if path.is_file() and not path.is_symlink())
    except OSError:
        return None


def write_summary(
    terminalreporter: Any, counts: collections.Counter[str], figures: dict[str, str], basetemp: Path | None
) -> None:
    """The "reliability counts" section, and the JSON report when ``$DSH_RELIABILITY_REPORT`` names a file."""
    if not counts and not figures:
        return
    terminalreporter.section("reliability counts")
    for key in sorted(counts):
        terminalreporter.write_line(f"{key}: {counts[key]}")
    if _fuzz_total(counts):
        terminalreporter.write_line(f"fuzz cases (total): {_fuzz_total(counts)}")
    for key in sorted(figures):
        terminalreporter.write_line(f"{key}: {figures[key]}")
    scanned = _files_under(basetemp)
    if scanned is not None:
        counts[SCANNED] = scanned
        terminalreporter.write_line(f"{SCANNED}: {scanned}")
    target = os.environ.get(REPORT_ENV)
    if target:
        report = {"counts": dict(counts), "fuzz_total": _fuzz_total(counts), "figures": dict(figures)}
        Path(target).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
