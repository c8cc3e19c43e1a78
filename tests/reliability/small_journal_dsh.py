"""``dsh`` whose undo journal keeps 3000 bytes of before-images instead of 64 MiB, so that a test can pass the
cap with a few small edits: ``python -m tests.reliability.small_journal_dsh ARGS...`` runs
``python -m dsh.repl ARGS...`` with ``dsh.agent_loop.journal.DEFAULT_CAP`` set first (tests/reliability/test_undo.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dsh.agent_loop import journal

CAP = 3000

if __name__ == "__main__":
    journal.DEFAULT_CAP = CAP
    from dsh.repl.cli import main

    main(sys.argv[1:])
