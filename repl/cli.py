"""``dsh``: the entry point. ``--version`` answers here, before anything else is imported (no
prompt_toolkit, no httpx, not even argparse); everything else is :mod:`dsh.repl.launch`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time

from dsh.repl import __version__

TYPE_CHECKING = False  # typing costs ~15 ms to import; --version must not pay for it
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

__all__ = ["finish", "main"]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):
        sys.stdout.write(f"dsh {__version__}\n")
        sys.stdout.flush()
        raise SystemExit(0)
    from dsh.repl.launch import run  # flags, config, the modes: all past --version

    finish(run(args))


def finish(status: int) -> NoReturn:
    """Exit with ``status``, even if a worker thread is stuck in a system call.

    A file read that a cancelled turn abandoned (``abandon_on_cancel``) may still sit in its worker
    thread, and the interpreter would wait for it at exit forever. Idle workers end on their own within
    a moment; a thread still there after that is stuck, so the exit handlers run and the process leaves.
    """
    deadline = time.monotonic() + 1.0
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    if not any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(status)
    atexit._run_exitfuncs()  # what a normal exit runs after joining threads (the log, peak RSS, ...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
