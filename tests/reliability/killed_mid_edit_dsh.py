"""``dsh`` that SIGKILLs itself between an edit's journal record and its write: a fault injection for undo.

``python -m tests.reliability.killed_mid_edit_dsh ARGS...`` runs ``python -m dsh.repl ARGS...``, except that
the first edit's commit -- called only once its before-image is journaled and fsynced
(``dsh.agent_loop.tools.edits._commit_journaled``) -- kills the process with SIGKILL instead of writing: the
state a power cut or an OOM kill leaves at the worst moment. tests/reliability/test_undo.py then resumes the
session and undoes the turn.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dsh.agent_loop.tools import edits


def _killed(plan: Any) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    edits._commit = _killed  # type: ignore[assignment]
    from dsh.repl.cli import main

    main(sys.argv[1:])
