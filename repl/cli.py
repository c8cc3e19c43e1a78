"""``dsh``: the entry point. ``--version`` answers here, before anything else is imported (no
prompt_toolkit, no httpx, not even argparse); everything else is :mod:`dsh.repl.launch`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time

from dsh.repl import __version__

TYPE_CHECKING = False  # typing costs ~15 ms to import; --version must not pay for it
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

__all__ = ["finish", "main", "own_signals"]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    own_signals()  # before anything slow: a Ctrl-C during start-up must work even if inherited ignored
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):
        sys.stdout.write(f"dsh {__version__}\n")
        sys.stdout.flush()
        raise SystemExit(0)
    try:
        from dsh.repl.launch import run  # flags, config, the modes: all past --version

        status = run(args)
    except KeyboardInterrupt:  # a Ctrl-C before a mode took SIGINT over: the shell's status, no traceback
        status = 128 + signal.SIGINT
    finish(status)


def own_signals() -> None:
    """Ctrl-C and Ctrl-\\ work from dsh's first instruction, whatever it inherited (docs/architecture.md,
    "Start-up and lazy imports"): a CI step or ``nohup`` may start dsh with SIGINT and SIGQUIT ignored, and
    Python then keeps them ignored, so a Ctrl-C before a mode installs its own handling would do nothing.
    SIGHUP stays as inherited until a mode takes it (the REPL ends on it itself): ignoring a hangup is
    what ``nohup`` asks for."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


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
