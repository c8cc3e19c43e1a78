"""The ``setsid_helper`` scenario of the fake product children (fake_claude_cli.py, fake_codex_app_server.py).

Both leave a helper behind in a session of its own, as Codex's shell snapshot does: the group kill cannot
reach it, so only the host's teardown can. Tests find it by its command line.
"""

from __future__ import annotations

import subprocess
import sys


def start_setsid_helper() -> None:
    """Start the helper (it sleeps 30 s) and leave it running."""
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
