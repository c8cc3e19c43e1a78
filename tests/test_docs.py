"""The transcripts and tables in README.md and docs/ are what dsh prints today.

``docs/transcripts.py --check`` runs the real ``dsh`` (and the fault server) for every marked region and
compares the result with the checked-in text. On a difference it prints a unified diff; the fix is
``python docs/transcripts.py --write`` and reading that diff. The slow fault-matrix table is left to
``tests/reliability/test_fault_matrix.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "docs" / "transcripts.py"

pytestmark = pytest.mark.timeout(240)


def test_every_region_is_known_and_closed() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import transcripts
    finally:
        sys.path.remove(str(SCRIPT.parent))
    for path in transcripts.documents():
        text = path.read_text(encoding="utf-8")
        opened = text.count("<!-- transcript: ") + text.count("<!-- table: ")
        found = transcripts.regions(path)
        assert len(found) == opened, f"{path.name}: a region marker without its closing marker"
        for name, _ in found:
            assert name in transcripts.GENERATORS, f"{path.name}: no generator for region {name!r}"


def test_checked_in_transcripts_match_what_dsh_prints() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True,
                            cwd=REPO, timeout=230)
    assert result.returncode == 0, (
        "README.md or docs/ no longer match what dsh prints; run `python docs/transcripts.py --write` "
        f"and review the diff.\n{result.stderr}\n{result.stdout}"
    )
