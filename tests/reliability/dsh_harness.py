"""Running the real ``dsh`` (``python -m repl``) as a child process, isolated, for the reliability suite.

Every run gets its own HOME and XDG_* directories under the test's tmp_path, a clean environment
(no proxy variables leak in from the host unless a test sets them) and the repo on PYTHONPATH; its
working directory is a small workspace with known files, so ``list_dir`` output is stable. Every
stdout/stderr of every run is written to a transcript file next to it, so the suite-wide canary scan
(tests/conftest.py) greps what a user would have seen.

``COUNTS`` collects the figures the README's Reliability section reports; tests/reliability/conftest.py
prints them at the end of the run.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import leak_check as leak_check_module
from tests.session_log_invariants import assert_header, assert_well_formed, read_log  # noqa: F401 (re-exported)

REPO = Path(__file__).resolve().parents[2]
TEST_KEY = "sk-reliabilityTestKey00000000000000"

# name -> number; printed by the reliability conftest at the end of the session.
COUNTS: collections.Counter[str] = collections.Counter()
FIGURES: dict[str, str] = {}


@dataclass(frozen=True)
class Home:
    """One isolated user: HOME, XDG dirs, a config file and a workspace (the child's cwd)."""

    root: Path

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def sessions(self) -> Path:
        return self.state_dir / "dsh" / "sessions"

    @property
    def host_log(self) -> Path:
        return self.state_dir / "dsh" / "dsh.log"

    def write_config(self, text: str) -> None:
        path = self.config_dir / "dsh" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def session_files(self) -> list[Path]:
        return sorted(self.sessions.glob("*.jsonl")) if self.sessions.is_dir() else []

    def only_session(self) -> Path:
        files = self.session_files()
        assert len(files) == 1, f"expected one session log, found {files}"
        return files[0]


def make_home(root: Path, config: str = "") -> Home:
    home = Home(root)
    for path in (home.config_dir, home.state_dir, home.root / "cache", home.workspace):
        path.mkdir(parents=True, exist_ok=True)
    (home.workspace / "notes.txt").write_text("reliability notes\n", encoding="utf-8")
    (home.workspace / "src").mkdir(exist_ok=True)
    if config:
        home.write_config(config)
    return home


def config_text(*, max_retries: int = 0, idle: float = 30.0, first_token: float = 60.0, extra: str = "") -> str:
    """A config.toml: no retries by default (one request per fault), timeouts as asked."""
    return (
        f"max_retries = {max_retries}\nstream_idle_timeout = {idle:g}\nfirst_token_timeout = {first_token:g}\n"
        + extra
    )


def dsh_env(home: Home, extra: Mapping[str, str] | None = None, *, key: str | None = TEST_KEY) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home.root),
        "XDG_CONFIG_HOME": str(home.config_dir),
        "XDG_STATE_HOME": str(home.state_dir),
        "XDG_CACHE_HOME": str(home.root / "cache"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if key is not None:
        env["DEEPSEEK_API_KEY"] = key
    env.update(extra or {})
    return env


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    transcript: Path


_transcripts = collections.Counter[str]()


def _transcript_path(home: Home, label: str) -> Path:
    _transcripts[str(home.root)] += 1
    return home.root / f"transcript-{_transcripts[str(home.root)]:03d}-{label}.txt"


def _shown_args(args: Sequence[str]) -> str:
    """The command line for a transcript header. Canaries planted in arguments are inputs, not output:
    they are blanked here so that the suite-wide scan only ever sees what dsh itself wrote."""
    from tests import canaries

    text = " ".join(args)
    for canary in canaries.STRICT:
        text = text.replace(canary, "<canary>")
    return text


def save_transcript(home: Home, label: str, args: Sequence[str], stdout: str, stderr: str, rc: object) -> Path:
    path = _transcript_path(home, label)
    path.write_text(f"$ dsh {_shown_args(args)}\n--- exit {rc}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                    encoding="utf-8")
    return path


def dsh_command(
    args: Sequence[str], launcher: Sequence[str] = ("-m", "dsh.repl"), prefix: Sequence[str] = ()
) -> list[str]:
    """``prefix`` wraps the interpreter, e.g. in a loopback-only namespace (tests/real_parts.py)."""
    return [*prefix, sys.executable, *launcher, *args]


def run_dsh(
    home: Home,
    args: Sequence[str] = (),
    lines: Iterable[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    key: str | None = TEST_KEY,
    timeout: float = 60.0,
    label: str = "run",
    launcher: Sequence[str] = ("-m", "dsh.repl"),
    preexec_fn: Callable[[], None] | None = None,
    prefix: Sequence[str] = (),
) -> Run:
    """Run dsh to completion (piped stdin: each line a turn); the transcript lands in ``home``."""
    text = "".join(line + "\n" for line in lines) if lines is not None else ""
    started = time.monotonic()
    done = subprocess.run(
        dsh_command(args, launcher, prefix), input=text, capture_output=True, text=True,
        env=dsh_env(home, env, key=key), cwd=home.workspace, timeout=timeout, preexec_fn=preexec_fn, check=False,
    )
    seconds = time.monotonic() - started
    path = save_transcript(home, label, list(args), done.stdout, done.stderr, done.returncode)
    return Run(list(args), done.returncode, done.stdout, done.stderr, seconds, path)


# --- session logs -------------------------------------------------------------------------------


def turn_ends(records: Sequence[Mapping[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    ends: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for record in records:
        if record["type"] == "turn/end":
            ends[record["data"]["turn"]].append(record["data"]["reason"])
    return ends


# --- processes ------------------------------------------------------------------------------------


def leak_check() -> Any:
    """Context manager: fail (after killing them) if processes started inside the block outlive it."""
    return leak_check_module.leak_check()


def live_descendants() -> set[int]:
    return leak_check_module.live_descendants()


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def stop_process(process: subprocess.Popen[Any]) -> None:
    """Kill a child we started (by its pid) and reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


@dataclass
class LineReader:
    """Non-blocking line collection from a child's stdout, for tests that act on what it printed."""

    process: subprocess.Popen[bytes]
    data: bytearray = field(default_factory=bytearray)

    def pump(self, timeout: float) -> bool:
        """Read what is available within ``timeout``; False at EOF."""
        import select

        stream = self.process.stdout
        assert stream is not None
        ready, _, _ = select.select([stream], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            return False
        self.data += chunk
        return True

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def line_count(self) -> int:
        return self.data.count(b"\n")
