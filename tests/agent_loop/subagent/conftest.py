"""Fixtures the provider tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory for the subagent, apart from the product's own state."""
    path = tmp_path / "work"
    path.mkdir()
    return path
