"""``python -m bench.give_up``: the 15 faults of the peer comparison, each run through ``dsh -p`` with the
default retry policy and timeouts; prints a markdown table of the line dsh ends with and how long it took
to give up.

Every endpoint is on loopback: the fault server, a closed port, a closed proxy; the name that does not
exist is looked up in a loopback-only namespace (``unshare``, see tests/real_parts.py) so no query
leaves the machine. A row whose part is missing says so instead of a time.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from dsh.llm.loopback.fault_server import Behaviour, FaultServer, closed_port

KEY = "sk-giveup0123456789abcdef0123456789"
NSSWITCH = "hosts: files\n"


@contextlib.contextmanager
def _endpoint(name: str, state: Path) -> Iterator[tuple[str, dict[str, str], list[str]]]:
    """``(base_url, extra env, command prefix)`` for one fault."""
    behaviours = {
        "401": "http_401", "402": "http_402", "429": "http_429", "503": "http_503", "reset": "reset_mid_stream",
        "keep-alive only": "keepalive_only", "no [DONE]": "no_done", "malformed": "malformed_json",
        "credentials in URL": "http_401",
    }
    if name in ("refused", "localhost"):
        with closed_port() as port:
            yield f"http://{'127.0.0.1' if name == 'refused' else 'localhost'}:{port}", {}, []
    elif name == "DNS":
        nss = state / "nsswitch.conf"
        nss.write_text(NSSWITCH)
        prefix = ["unshare", "--user", "--map-root-user", "--net", "--mount", "--", "sh", "-c",
                  'mount --bind "$0" /etc/nsswitch.conf && exec "$@"', str(nss)]
        yield "http://api.nonexistent.invalid", {}, prefix
    elif name == "closed proxy":
        with closed_port() as port:
            yield "https://api.deepseek.com", {"HTTPS_PROXY": f"http://127.0.0.1:{port}"}, []
    elif name in ("https→http", "self-signed"):
        with FaultServer(tls=name == "self-signed") as server:
            yield (server.plain_url_for_https if name == "https→http" else server.tls_url), {}, []
    else:
        with FaultServer(default=Behaviour(behaviours[name])) as server:
            url = server.url
            if name == "credentials in URL":
                url = url.replace("http://", "http://canaryUser:canaryPassword@")
            yield url, {}, []


FAULTS = ("refused", "localhost", "DNS", "https→http", "self-signed", "401", "402", "429", "503", "reset",
          "keep-alive only", "no [DONE]", "malformed", "credentials in URL", "closed proxy")


def run(name: str) -> tuple[str, float]:
    with tempfile.TemporaryDirectory() as directory, _endpoint(name, Path(directory)) as (url, extra, prefix):
        home = Path(directory)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
               "XDG_CONFIG_HOME": str(home / "config"), "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": url, **extra}
        started = time.monotonic()
        done = subprocess.run([*prefix, sys.executable, "-m", "dsh.repl", "-p", "hi"], env=env,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False)
        seconds = time.monotonic() - started
    lines = [line for line in done.stderr.splitlines() if not line.startswith("[retry ")]
    shown = " ⏎ ".join(lines[-2:]) if lines else f"(exit {done.returncode}) {done.stdout.strip()[:80]}"
    return shown, seconds


def main() -> None:
    print("| fault | dsh's last line(s) on stderr | time to give up |")
    print("|---|---|---|")
    for name in FAULTS:
        try:
            shown, seconds = run(name)
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"| {name} | not run: {type(exc).__name__} | – |")
            continue
        cell = shown.replace("|", "\\|")
        print(f"| {name} | `{cell}` | {seconds:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
