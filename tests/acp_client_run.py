"""A real published ACP client, ``acpx``, driving an agent command non-interactively, as a user would.

``acpx --agent '<command>' exec '<prompt>'`` spawns the agent, sends ``initialize``, ``session/new`` and one
``session/prompt``, prints what a person reads in a terminal (``[thinking] ...``, ``[tool] ...``, the answer,
``[done] end_turn`` or ``[error] RUNTIME: <the JSON-RPC error's message>``) and exits: 0 for a turn that ended,
1 for an error, 5 when a permission was refused, 3 when its own ``--timeout`` passed. SIGINT during the
prompt sends ``session/cancel`` and waits for the answer (``[done] cancelled``). The permission flags
``--approve-all`` / ``--deny-all`` answer ``session/request_permission`` without a terminal; without one acpx
rejects. ``exec`` keeps no state under ``HOME`` (docs/editors.md, "acpx").

The client is pinned in the Makefile (``ACP_CLIENT``) and installed by ``make npm-agents`` into
``.venv/npm``; a test that needs it and does not find it skips locally and fails under ``CI=true``
(tests/real_parts.py). Each run gets a fresh ``HOME`` and a working directory; the agent inherits the
environment given here (acpx passes its own to the agent), so the endpoint and the key are set per run.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.real_parts import missing
from tests.waiting import PROMPTLY, wait_until

__all__ = [
    "ACPX",
    "INSTALL",
    "ClientRun",
    "client_env",
    "dsh_acp",
    "fixture_agent",
    "require_acpx",
    "run_client",
]

REPO = Path(__file__).resolve().parents[1]
ACPX = Path(os.environ.get("DSH_ACPX", REPO / ".venv/npm/node_modules/.bin/acpx"))
INSTALL = "make npm-agents (npm install --prefix .venv/npm acpx@0.19.1)"
# A whole exec (node start, dsh start, one turn) takes 2-6 s here; a loaded CI box several times that.
RUN_TIMEOUT = 4 * PROMPTLY


@dataclass(frozen=True)
class ClientRun:
    """What the client printed (stdout, stderr: its hints and timeouts go there) and how it exited."""

    stdout: str
    stderr: str
    returncode: int

    @property
    def lines(self) -> list[str]:
        """stdout's non-empty lines: acpx separates its blocks with blank lines."""
        return [line for line in self.stdout.split("\n") if line.strip()]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def require_acpx() -> Path:
    """The installed acpx, or a skip (a failure under ``CI=true``) saying how to install it."""
    if not ACPX.exists():
        missing("acpx (npm)", INSTALL)
    return ACPX


def dsh_acp(*args: str) -> list[str]:
    """``dsh acp`` as this checkout runs it (the interpreter of the test run)."""
    return [sys.executable, "-m", "dsh.repl", "acp", *args]


def fixture_agent() -> list[str]:
    """dsh's fixture ACP agent, scripted by ``ACP_FAKE_*`` (repl/demo/acp_agent.py)."""
    return [sys.executable, "-m", "dsh.repl.demo.acp_agent"]


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A minimal environment: a fresh ``HOME`` (dsh's config, logs and sessions under it), no colours."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra)
    return env


def run_client(
    agent: Sequence[str],
    prompt: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    flags: Sequence[str] = (),
    interrupt_after: str | None = None,
    timeout: float = RUN_TIMEOUT,
) -> ClientRun:
    """``acpx [flags] --agent AGENT exec PROMPT`` in ``cwd``; its stdin is closed (no terminal to ask).

    ``interrupt_after``: once stdout shows that text, send SIGINT (a user's Ctrl-C) and collect the rest.
    On a timeout the client's whole process group (the agent with it) is killed and the test fails.
    """
    argv = [str(require_acpx()), *flags, "--agent", shlex.join(agent), "exec", prompt]
    child = subprocess.Popen(
        argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: a hung run is killed with the agent it started
    )
    assert child.stdout is not None
    try:
        head = b""
        if interrupt_after is not None:
            head = _read_until(child, interrupt_after.encode(), timeout)
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=timeout)
    except BaseException:
        _kill_group(child)
        raise
    return ClientRun((head + out).decode("utf-8", "replace"), err.decode("utf-8", "replace"), child.returncode)


def _read_until(child: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    """stdout up to and including ``needle``; acpx writes a chunk without a newline, so not line by line."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    os.set_blocking(fd, False)
    seen = bytearray()

    def arrived() -> bool:
        exited = child.poll() is not None  # before reading: what it wrote before exiting is read below
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            seen.extend(data)
        if needle in seen:
            return True
        if exited:
            raise AssertionError(f"acpx exited {child.returncode} before printing {needle!r}; got {bytes(seen)!r}")
        return False

    wait_until(arrived, timeout, f"acpx to print {needle!r}")
    os.set_blocking(fd, True)
    return bytes(seen)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.communicate()
