"""dsh takes Ctrl-C and Ctrl-\\ back at start when it inherits them ignored (issue 42 item 3; a CI step or
``nohup`` starts it so): `dsh -p` run under ``trap '' INT QUIT`` must not keep either ignored, and a SIGINT
or SIGQUIT then ends the turn. The interactive REPL's side is tests/e2e/test_first_prompt_pty.py
(``ignored=``); .ci/run runs the signal tests once more with SIGINT and SIGHUP ignored.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.repl.test_cli import REPO, base_env


def _ignored(pid: int) -> set[int]:
    """The signals ``pid`` ignores, from /proc (SigIgn: a hex mask, bit N-1 for signal N)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {number for number in range(1, 65) if mask >> (number - 1) & 1}
    return set()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGQUIT, -signal.SIGQUIT)])
def test_a_print_run_started_with_ctrl_c_and_quit_ignored_still_ends_on_them(
        tmp_path: Path, signum: int, status: int) -> None:
    child = subprocess.Popen(
        ["/bin/sh", "-c", 'trap "" INT QUIT; exec "$0" -m dsh.repl --demo --scenario stall -p hello', sys.executable],
        cwd=REPO, env=base_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "dsh.repl" not in Path(f"/proc/{child.pid}/cmdline").read_text():
            time.sleep(0.02)  # until sh has exec'd python
        time.sleep(1.0)  # past start-up: the turn is stalled on the demo server
        assert not {signal.SIGINT, signal.SIGQUIT} & _ignored(child.pid)
        child.send_signal(signum)
        _, err = child.communicate(timeout=15)
        assert child.returncode == status, err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# The start-up's Ctrl-C: the process is interrupted while it imports the launcher (an import hook sends the
# SIGINT), before any mode has taken SIGINT over.
_INTERRUPTED_START = """
import importlib.abc, os, signal, sys
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "dsh.repl.launch":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
from dsh.repl.cli import main
main(sys.argv[1:])
"""


def test_a_ctrl_c_during_start_up_exits_130_with_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_START, "--demo", "-p", "hello"], cwd=REPO,
                          env=base_env(tmp_path), capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert done.stdout == ""
