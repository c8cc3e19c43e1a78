from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import canaries
from tests.leak_check import leak_checker, no_leftover_processes  # noqa: F401 (fixtures for every folder)

CANARY_HITS: list[str] = []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Grep everything the suite wrote for the strict canaries; any hit fails the run."""
    if os.environ.get("DSH_SKIP_CANARY_SCAN") or not hasattr(session.config, "_tmp_path_factory"):
        return
    base = session.config._tmp_path_factory.getbasetemp()
    hits = _scan_for_canaries(Path(base))
    if hits:
        CANARY_HITS.extend(hits)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if CANARY_HITS:
        terminalreporter.section("canary secrets leaked")
        for hit in CANARY_HITS:
            terminalreporter.write_line(hit)
    else:
        terminalreporter.write_line(f"canary scan: {len(canaries.STRICT)} secrets, 0 hits in files the suite wrote")
