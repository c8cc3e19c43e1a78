"""Reliability-suite plumbing: the counts the README reports, and the shared leak check.

* Every hypothesis example run by a test in this folder is counted (by wrapping the test's
  ``hypothesis.inner_test``, the hook hypothesis documents for exactly this), so "fuzz cases run" is a
  measured number, not a configured maximum.
* ``dsh_harness.COUNTS`` / ``FIGURES`` (faults tried, kills survived, canaries checked, concurrent runs,
  soak RSS ...) are printed at the end of the run and written as JSON to ``$DSH_RELIABILITY_REPORT``
  when that is set (tests/reliability/counts_report.py; under xdist the controller adds up the workers').
* ``no_leftover_processes`` / ``leak_checker`` come from tests/leak_check.py, via tests/conftest.py.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh_harness import COUNTS, FIGURES

from dsh.llm.loopback.fault_server import FaultServer
from tests.reliability import counts_report

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


def _basetemp(config: pytest.Config) -> Path | None:
    factory = getattr(config, "_tmp_path_factory", None)
    return None if factory is None else Path(factory.getbasetemp())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An xdist worker hands its counts to the controller, which writes the one section."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[counts_report.WORKER_OUTPUT_KEY] = counts_report.payload(COUNTS, FIGURES)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    # Under xdist this conftest lives in the workers only; tests/conftest.py writes the section there.
    if not hasattr(config, "workerinput"):
        counts_report.write_summary(terminalreporter, COUNTS, FIGURES, _basetemp(config))


@pytest.fixture
def server() -> Iterator[FaultServer]:
    """A fault server on loopback for one test (each attack scripts its own behaviours)."""
    srv = FaultServer().start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()
