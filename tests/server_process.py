"""A real server the tests start as a child on 127.0.0.1 (LiteLLM's proxy, llama.cpp's llama-server): its own
process group, its output in a log, the port it was given (``--port 0``) read from the line it prints, and its
whole group ended and reaped when it stops."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from tests.waiting import PROMPTLY, wait_until

__all__ = ["LoggedServer"]


class LoggedServer:
    """Subclasses say what the server is called, the line that carries its port, how long it may take to start,
    and (:meth:`ready`) when it is ready once it listens."""

    name: ClassVar[str]
    listening: ClassVar[re.Pattern[bytes]]  # group 1: the port
    start_timeout: ClassVar[float] = PROMPTLY

    def __init__(self, directory: Path, log_name: str) -> None:
        self.directory = directory
        self.log = directory / log_name  # stdout and stderr, for a failure's message
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def launch(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """Start ``argv`` and wait until it listens and is :meth:`ready`; stopped again if it is not."""
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(list(argv), cwd=self.directory, env=dict(env), stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            port = wait_until(self._port, self.start_timeout, f"{self.name} to listen", interval=0.1)
            self.url = f"http://127.0.0.1:{port}"
            wait_until(self.ready, self.start_timeout, f"{self.name} to be ready", interval=0.1)
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        return True

    def _port(self) -> int | None:
        match = self.listening.search(self.log.read_bytes())
        if match is None and self._process is not None and self._process.poll() is not None:
            raise AssertionError(f"{self.name} exited {self._process.returncode} at start-up:\n{self.log_tail()}")
        return int(match.group(1)) if match else None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """End the server's whole process group and reap it (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(PROMPTLY)
        _signal_group(process.pid, signal.SIGKILL)  # whatever of its group is left (a server may fork)
        process.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
