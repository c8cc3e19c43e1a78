"""Run a real child with piped output and interrupt it (SIGINT) once it is where the test waits for it."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def run_interrupted(
    command: Sequence[str], cwd: Path, env: Mapping[str, str], reached: Callable[[], object]
) -> tuple[int, str, str]:
    """``command``'s exit status, stdout and stderr; SIGINT is sent once ``reached()`` returns a true value.

    ``reached`` waits for the test's own event (the request at the server, the turn in the session log). A
    child still there when the test gives up on it is killed, so no run outlives its test.
    """
    process = subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if reached():
            process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, stdout, stderr
