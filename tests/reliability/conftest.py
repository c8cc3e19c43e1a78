"""Reliability-suite plumbing: the counts the README reports, and the shared leak check.

* Every hypothesis example run by a test in this folder is counted (by wrapping the test's
  ``hypothesis.inner_test``, the hook hypothesis documents for exactly this), so "fuzz cases run" is a
  measured number, not a configured maximum.
* ``dsh_harness.COUNTS`` / ``FIGURES`` (faults tried, kills survived, canaries checked, concurrent runs,
  soak RSS ...) are printed at the end of the run and written as JSON to ``$DSH_RELIABILITY_REPORT``
  when that is set.
* ``no_leftover_processes`` / ``leak_checker`` come from tests/leak_check.py, via tests/conftest.py.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh_harness import COUNTS, FIGURES

from dsh.llm.loopback.fault_server import FaultServer

_HERE = Path(__file__).resolve().parent



def _count_examples(inner: Any, key: str) -> Any:
    @functools.wraps(inner)
    def counted(*args: Any, **kwargs: Any) -> Any:
        COUNTS[key] += 1
        return inner(*args, **kwargs)

    return counted


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "obj", None)
        handle = getattr(function, "hypothesis", None)
        if handle is None or not str(item.path).startswith(str(_HERE)):
            continue
        if not getattr(handle.inner_test, "_reliability_counted", False):
            counted = _count_examples(handle.inner_test, f"fuzz cases: {item.path.stem}")
            counted._reliability_counted = True  # type: ignore[attr-defined]
            handle.inner_test = counted


def _fuzz_total() -> int:
    return sum(value for key, value in COUNTS.items() if key.startswith("fuzz cases"))


def _files_under_basetemp(config: pytest.Config) -> int | None:
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return None
    try:
        base = Path(factory.getbasetemp())
        return sum(1 for path in base.rglob("*") if path.is_file() and not path.is_symlink())
    except OSError:
        return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not COUNTS and not FIGURES:
        return
    terminalreporter.section("reliability counts")
    for key in sorted(COUNTS):
        terminalreporter.write_line(f"{key}: {COUNTS[key]}")
    if _fuzz_total():
        terminalreporter.write_line(f"fuzz cases (total): {_fuzz_total()}")
    for key in sorted(FIGURES):
        terminalreporter.write_line(f"{key}: {FIGURES[key]}")
    scanned = _files_under_basetemp(config)
    if scanned is not None:
        COUNTS["files the session-end canary scan covers"] = scanned
        terminalreporter.write_line(f"files the session-end canary scan covers: {scanned}")
    target = os.environ.get("DSH_RELIABILITY_REPORT")
    if target:
        report = {"counts": dict(COUNTS), "fuzz_total": _fuzz_total(), "figures": dict(FIGURES)}
        Path(target).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")


@pytest.fixture
def server() -> Iterator[FaultServer]:
    """A fault server on loopback for one test (each attack scripts its own behaviours)."""
    srv = FaultServer().start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()
