"""Peak RSS of dsh under attacks on traces and logs, each in a fresh process (docs/reliability.md).

``upload``: ``dsh replay-server`` receiving a 1.5 GiB chunked request body (answered 413 at 32 MiB, the
rest read and dropped). ``replay``: ``dsh --replay`` of a 300 MB trace (one exchange of 64 KiB ``data``
records). ``show``: ``dsh sessions show`` of a session with one 300 MB record. The figure is the worst
of the three, with the seconds each took as details; the target is 128 MB.
``python -m bench.traces PEAK_FILE DSH-ARGS...`` is the child: dsh itself, writing its ``VmHWM`` at exit.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env
from bench.loop import temp_root
from bench.rss import _status_mb

__all__ = ["trace_attacks"]

_MB = 1 << 20


def _child_command(peak_file: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "bench.traces", str(peak_file), *args]


def _run(peak_file: Path, env: dict[str, str], *args: str) -> float:
    """Seconds for ``dsh ARGS`` to finish (its peak lands in ``peak_file``)."""
    started = time.perf_counter()
    subprocess.run(_child_command(peak_file, *args), cwd=REPO_ROOT, env=env, capture_output=True, timeout=900,
                   check=True)
    return time.perf_counter() - started


def _upload_pieces(size: int) -> Iterator[bytes]:
    yield b'{"model":"m","messages":[{"role":"user","content":"'
    for _ in range(size // _MB):
        yield b"x" * _MB


def _upload(peak_file: Path, env: dict[str, str], trace: Path, size: int) -> float:
    import httpx

    child = subprocess.Popen(_child_command(peak_file, "replay-server", str(trace)), cwd=REPO_ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        banner = re.search(r" at (\S+) \(Ctrl-C stops\)", child.stdout.readline())
        if banner is None:
            raise RuntimeError("dsh replay-server printed no banner")
        started = time.perf_counter()
        status = httpx.post(banner.group(1), content=_upload_pieces(size), timeout=900).status_code
        seconds = time.perf_counter() - started
        if status != 413:
            raise RuntimeError(f"the upload got HTTP {status}, not 413")
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
    return seconds


async def trace_attacks(settings: Settings, server: BenchServer) -> list[Figure]:
    from fixtures.big_files import write_session, write_trace

    upload = settings.size(1536, 256) * _MB
    size = settings.size(300, 50) * _MB
    parts: dict[str, Stats] = {}
    details: dict[str, float | str] = {"upload_mb": upload // _MB, "trace_mb": size // _MB, "record_mb": size // _MB}
    with temp_root("traces") as root:
        for folder in ("state/dsh/sessions", "config/dsh"):
            (root / folder).mkdir(parents=True)
        (root / "config/dsh/config.toml").write_text("max_retries = 0\n")
        env = child_env(HOME=str(root), XDG_STATE_HOME=str(root / "state"), XDG_CONFIG_HOME=str(root / "config"))
        small, big = root / "small.jsonl", root / "big.jsonl"
        write_trace(small, 0)
        write_trace(big, size)
        log = root / "state/dsh/sessions/20260101-000000-bench1.jsonl"
        write_session(log, size)
        runs = {
            "upload": lambda peak: _upload(peak, env, small, upload),
            "replay": lambda peak: _run(peak, env, "--replay", str(big), "--replay-speed", "1000", "-p", "hi"),
            "show": lambda peak: _run(peak, env, "sessions", "show", log.stem),
        }
        for name, run in runs.items():
            peaks = []
            for index in range(settings.size(2, 1)):
                peak_file = root / f"peak-{name}-{index}.txt"
                details[f"{name}_seconds"] = round(run(peak_file), 1)
                peaks.append(float(peak_file.read_text()))
            parts[name] = Stats.of(peaks)
    return [Figure("trace_attacks_peak_rss_mb", "MB", parts=parts, target=("<", 128.0), details=details)]


def _write_peak(path: str) -> None:
    with open(path, "w") as out:
        out.write(f"{_status_mb('VmHWM'):.1f}\n")


if __name__ == "__main__":
    atexit.register(_write_peak, sys.argv[1])
    from dsh.repl.cli import main

    sys.argv = ["dsh", *sys.argv[2:]]
    os.environ.pop("DEEPSEEK_API_KEY", None)  # --replay needs none; nothing here may reach a real endpoint
    main()
