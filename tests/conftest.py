"""Fixtures for every folder: the anyio backend, a clean proxy environment, live fault servers, the leak
check; and the suite-end canary scan."""

from __future__ import annotations

import collections
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from dsh.llm.loopback.fault_server import FaultServer
from tests import canaries
from tests.leak_check import leak_checker, no_leftover_processes  # noqa: F401 (fixtures for every folder)
from tests.reliability import counts_report

CANARY_HITS: list[str] = []
# The reliability counts the xdist workers sent (tests/reliability/counts_report.py).
WORKER_COUNTS: collections.Counter[str] = collections.Counter()
WORKER_FIGURES: dict[str, str] = {}
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")

# Hypothesis times every example (200 ms) and the data generation: speed claims a loaded machine breaks
# and no property test is about. Both are off for the whole suite; every other setting stays as loaded
# (with CI set, Hypothesis's own CI profile: derandomized, no database).
settings.register_profile(
    "dsh-suite",
    parent=settings.default,
    deadline=None,
    suppress_health_check=list(dict.fromkeys([*settings.default.suppress_health_check, HealthCheck.too_slow])),
)
settings.load_profile("dsh-suite")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables (trust_env); a proxy set on the host must not reroute loopback."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def fault_server(anyio_backend: str) -> AsyncIterator[FaultServer]:
    """A live fault server on 127.0.0.1 (plain HTTP), answering ``text`` unless scripted."""
    async with FaultServer() as server:
        yield server


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:
    """The same server, under the name the agent-loop, subagent and shell tests use."""
    return fault_server


@pytest.fixture
async def tls_fault_server(anyio_backend: str) -> AsyncIterator[FaultServer]:
    """A live fault server speaking HTTPS with a self-signed certificate."""
    async with FaultServer(tls=True) as server:
        yield server


def _scan_for_canaries(root: Path) -> list[str]:
    hits = []
    needles = [c.encode() for c in canaries.STRICT]
    for path in root.rglob("*"):
        try:
            if not path.is_file() or path.is_symlink() or path.stat().st_size > 64 * 1024 * 1024:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        for needle in needles:
            if needle in data:
                hits.append(f"{path}: {needle.decode()}")
    return hits


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Grep everything the suite wrote for the strict canaries; any hit fails the run.

    Under pytest-xdist each worker's base temp lies inside the controller's, so the controller alone scans,
    once every worker has finished, and reports.
    """
    if os.environ.get("DSH_SKIP_CANARY_SCAN") or _is_xdist_worker(session.config):
        return
    if not hasattr(session.config, "_tmp_path_factory"):
        return
    base = session.config._tmp_path_factory.getbasetemp()
    hits = _scan_for_canaries(Path(base))
    if hits:
        CANARY_HITS.extend(hits)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """The xdist controller collects each worker's reliability counts as the worker ends."""
    sent = getattr(node, "workeroutput", {}).get(counts_report.WORKER_OUTPUT_KEY)
    counts_report.merge(WORKER_COUNTS, WORKER_FIGURES, sent)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if WORKER_COUNTS or WORKER_FIGURES:
        base = config._tmp_path_factory.getbasetemp() if hasattr(config, "_tmp_path_factory") else None
        counts_report.write_summary(terminalreporter, WORKER_COUNTS, WORKER_FIGURES, base)
    if CANARY_HITS:
        terminalreporter.section("canary secrets leaked")
        for hit in CANARY_HITS:
            terminalreporter.write_line(hit)
    else:
        terminalreporter.write_line(f"canary scan: {len(canaries.STRICT)} secrets, 0 hits in files the suite wrote")
