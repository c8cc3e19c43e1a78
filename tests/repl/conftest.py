"""Fixtures the record, replay and report tests share: a fresh HOME and a running fault server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import FaultServer


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh home: ``state`` and ``config`` folders (a module may define its own ``home``)."""
    (tmp_path / "state").mkdir()
    (tmp_path / "config").mkdir()
    return tmp_path


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    """The fault server on loopback, answering text unless a test pushes behaviours, stopped afterwards."""
    srv = FaultServer(default="text").start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()
