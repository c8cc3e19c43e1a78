"""The import-linter contracts in pyproject.toml hold, the front end's own layers included."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_imports_point_one_way() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is not installed (pip install 'dsh-agent[test]')")
    result = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Front end points one way" in result.stdout and "BROKEN" not in result.stdout
