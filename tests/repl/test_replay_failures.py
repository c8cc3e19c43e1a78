"""A failure before any response replays as itself: refused as refused, a DNS failure, a certificate failure (with
the certificate's names), a proxy's refusal (issue 28 item 3; docs/record-replay.md, "How the replay answers").

Each case records the real `dsh -p` child against a real loopback failure (a closed port, a name in a loopback-only
resolver, the TLS listener whose leaf the untrusted test "corporate" root signed, a closed proxy port, tinyproxy
refusing the credentials), then replays the recording with no key: the turn-end line, the fix line, the exit status
and `/why`'s chain must be the live run's. Where something listened live, a listener takes its port during the
replay and must see no connection: a replay reaches nothing but its own loopback server (no certificate probe).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.certificate import CORPORATE_ROOT, corporate_chain
from dsh.llm.loopback.fault_server import FaultServer
from dsh.repl.turn_end import FIX_CERTIFICATE
from tests import canaries
from tests.llm.test_real_proxies import _free_port, _installed, _running
from tests.real_parts import isolated_resolver
from tests.repl.test_cli import REPO, base_env, write_config
from tests.repl.test_record_replay import assert_masked, records, turn_end


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config").mkdir()
    write_config(tmp_path, "max_retries = 0\n")
    return tmp_path


def _dsh(home: Path, *args: str, stdin: str = "", prefix: tuple[str, ...] = (),
         **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "dsh.repl", *args], cwd=REPO, env=base_env(home, **env),
                          input=stdin, capture_output=True, text=True, timeout=60)


def _why(result: subprocess.CompletedProcess[str]) -> list[str]:
    """`/why`'s lines from a piped run (`hi`, then `/why`)."""
    lines = (result.stdout + result.stderr).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("last failure ("))
    return [line for line in lines[start:] if line.startswith(("last failure (", "  "))]


@contextlib.contextmanager
def _silent_listener(port: int) -> Iterator[socket.socket]:
    """A listener on loopback ``port`` for the replay: whatever connects there is the test's failure."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(8)
        listener.setblocking(False)
        yield listener
    finally:
        listener.close()


def _nobody_came(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


def _record_and_replay(home: Path, *, env: dict[str, str], replay_env: dict[str, str] | None = None,
                       prefix: tuple[str, ...] = (), watch: int | None = None) -> tuple[list[str], Path]:
    """Record `hi` live (and `/why` piped), replay both; assert they match. The live turn-end and fix lines."""
    trace = home / "trace.jsonl"
    live = _dsh(home, "-p", "hi", "--record", str(trace), prefix=prefix, **env)
    live_why = _why(_dsh(home, stdin="hi\n/why\n", prefix=prefix, **env))
    assert live.returncode == 1, live.stderr
    assert_masked(trace)
    replay_env = {k: v for k, v in env.items() if k != "DEEPSEEK_API_KEY"} if replay_env is None else replay_env
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(_silent_listener(watch)) if watch is not None else None
        replayed = _dsh(home, "-p", "hi", "--replay", str(trace), **replay_env)
        replayed_why = _why(_dsh(home, "--replay", str(trace), stdin="hi\n/why\n", **replay_env))
        assert listener is None or _nobody_came(listener), "the replay connected to the recorded address"
    assert replayed.returncode == live.returncode
    assert turn_end(replayed.stderr) == turn_end(live.stderr), replayed.stderr
    assert replayed_why == live_why
    for line in [*turn_end(live.stderr), *live_why]:
        for canary in canaries.STRICT:
            assert canary not in line
    return turn_end(live.stderr), trace


def _chain_classes(trace: Path) -> list[str]:
    (end,) = [r for r in records(trace) if r["type"] == "end"]
    return [link["class"] for link in end["chain"]]


def test_a_refused_connection_replays_as_refused(home: Path) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # bound, not listening: refused, and ours
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    holder.close()
    url = f"http://127.0.0.1:{port}"
    lines, trace = _record_and_replay(home, env={"DEEPSEEK_API_KEY": canaries.API_KEY, "DEEPSEEK_BASE_URL": url},
                                      watch=port)
    assert lines == [
        f"[turn failed TRANSPORT] request to the endpoint at {url} failed: All connection attempts failed: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})",
        f"  fix: nothing is listening at 127.0.0.1:{port} — check DEEPSEEK_BASE_URL (environment)",
    ]
    assert _chain_classes(trace) == ["httpx.ConnectError", "httpcore.ConnectError", "OSError", "ConnectionRefusedError"]


def test_a_name_that_does_not_exist_replays_as_that_dns_failure(home: Path) -> None:
    prefix = tuple(isolated_resolver(home))  # live: a resolver that reads /etc/hosts alone; no query leaves
    url = "http://api.nonexistent.invalid"
    lines, trace = _record_and_replay(home, env={"DEEPSEEK_API_KEY": canaries.API_KEY, "DEEPSEEK_BASE_URL": url},
                                      prefix=prefix)
    assert lines == [
        f"[turn failed TRANSPORT] request to the endpoint at {url} failed: [Errno -2] Name or service not known",
        "  fix: the host name api.nonexistent.invalid does not exist — check DEEPSEEK_BASE_URL (environment)",
    ]
    assert _chain_classes(trace) == ["httpx.ConnectError", "httpcore.ConnectError", "socket.gaierror"]


def test_an_untrusted_certificate_replays_with_the_names_it_had_and_no_probe(home: Path) -> None:
    server = FaultServer(default="text", tls=corporate_chain()).start_in_thread()
    url, port = server.tls_url, int(server.tls_url.rsplit(":", 1)[1])
    try:
        trace = home / "trace.jsonl"
        env = {"DEEPSEEK_API_KEY": canaries.API_KEY, "DEEPSEEK_BASE_URL": url}
        live = _dsh(home, "-p", "hi", "--record", str(trace), **env)
        live_why = _why(_dsh(home, stdin="hi\n/why\n", **env))
    finally:
        server.stop()
    expected = [
        f"[turn failed TRANSPORT] request to the endpoint at {url} failed: the certificate presented for "
        f'127.0.0.1:{port} was not accepted: unknown issuer "{CORPORATE_ROOT}" (subject "127.0.0.1"); the OS '
        "trust store does not know that issuer",
        FIX_CERTIFICATE,
    ]
    assert (live.returncode, turn_end(live.stderr)) == (1, expected), live.stderr
    assert live_why[2].startswith("  dsh.llm.errors.Finding: the certificate presented for ")
    assert live_why[-1].startswith("  ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED]")
    assert_masked(trace)
    assert [r["type"] for r in records(trace)] == ["dsh-wire-trace", "request", "end", "finding"]
    # The replay shows the recorded finding: a probe would find no server (or this silent listener) there.
    with _silent_listener(port) as listener:
        replayed = _dsh(home, "-p", "hi", "--replay", str(trace), DEEPSEEK_BASE_URL=url)
        replayed_why = _why(_dsh(home, "--replay", str(trace), stdin="hi\n/why\n", DEEPSEEK_BASE_URL=url))
        assert _nobody_came(listener), "the replay connected to the recorded address"
    assert (replayed.returncode, turn_end(replayed.stderr)) == (1, expected), replayed.stderr
    assert replayed_why == live_why


def test_a_closed_proxy_port_replays_as_the_proxy_refusing(home: Path) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    holder.close()
    proxy = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{port}"
    env = {"DEEPSEEK_BASE_URL": "http://api.example.invalid", "HTTP_PROXY": proxy}
    lines, trace = _record_and_replay(home, env={"DEEPSEEK_API_KEY": canaries.API_KEY, **env}, replay_env=env,
                                      watch=port)
    assert lines == [
        f"[turn failed PROXY] request to the endpoint at http://api.example.invalid via proxy "
        f"http://***@127.0.0.1:{port} failed: All connection attempts failed: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})",
        f"  fix: nothing is listening at the proxy 127.0.0.1:{port} — check HTTP_PROXY (environment)",
    ]
    assert records(trace)[0]["proxy"] == f"http://***@127.0.0.1:{port}"


def test_tinyproxy_refusing_the_credentials_replays_as_that_refusal(home: Path) -> None:
    binary = _installed("tinyproxy", "/usr/bin/tinyproxy")
    port = _free_port()
    conf = home / "tinyproxy.conf"
    conf.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nLogLevel Critical\n"
                    "BasicAuth dshuser tinyproxyGoodPassword\n")
    proxy = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{port}"
    env = {"DEEPSEEK_BASE_URL": "https://api.example.invalid", "HTTPS_PROXY": proxy}
    trace = home / "trace.jsonl"
    with _running([binary, "-d", "-c", str(conf)], port):  # CONNECT refused: httpx's ProxyError, before any response
        live = _dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY, **env)
        live_why = _why(_dsh(home, stdin="hi\n/why\n", DEEPSEEK_API_KEY=canaries.API_KEY, **env))
    assert live.returncode == 1
    assert turn_end(live.stderr) == [
        f"[turn failed PROXY] request to the endpoint at https://api.example.invalid via proxy "
        f"http://***@127.0.0.1:{port} failed: 401 Unauthorized",
        "  fix: the proxy refused the credentials — check the user:password in HTTPS_PROXY (environment)",
    ]
    assert_masked(trace)
    with _silent_listener(port) as listener:
        replayed = _dsh(home, "-p", "hi", "--replay", str(trace), **env)
        replayed_why = _why(_dsh(home, "--replay", str(trace), stdin="hi\n/why\n", **env))
        assert _nobody_came(listener)
    assert (replayed.returncode, turn_end(replayed.stderr)) == (1, turn_end(live.stderr))
    assert replayed_why == live_why
    assert _chain_classes(trace) == ["httpx.ProxyError", "httpcore.ProxyError"]


def _hand_made(home: Path, chain: object, *more: dict[str, object]) -> Path:
    """A recording of one failure before any response with ``chain`` as its end's chain (a hand edit)."""
    trace = home / "hand.jsonl"
    lines = [
        {"type": "dsh-wire-trace", "version": 1, "dsh": "0.1.0", "created": "2026-01-01T00:00:00Z",
         "base_url": "http://api.example.invalid", "proxy": None, "timeouts": {}},
        {"type": "request", "n": 1, "method": "POST", "url": "http://api.example.invalid/chat/completions",
         "path": "/chat/completions", "headers": [], "body": "{}"},
        {"type": "end", "n": 1, "t": 0.01, "how": "error", "where": "connect", "error": "ConnectError",
         "message": "recorded", "chain": chain},
        *more,
    ]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return trace


@pytest.mark.parametrize(("chain", "more", "reason"), [
    pytest.param("refused", (), "line 3: 'chain' is not a list of exception links", id="not-a-list"),
    pytest.param([{"class": "ConnectionRefusedError", "text": "x", "errno": "111"}], (),
                 "line 3: a 'chain' link's 'errno' is not an int", id="errno-a-string"),
    pytest.param([{"class": 7, "text": "x"}], (),
                 "line 3: a 'chain' link is not an object with a string 'class' and 'text'", id="class-a-number"),
    pytest.param([{"class": "ExceptionGroup", "text": "g", "members": "x"}], (),
                 "line 3: a 'chain' link's 'members' is not a list of chains", id="members"),
    pytest.param([{"class": "OSError", "text": "x"}], ({"type": "finding", "n": 1, "text": 5},),
                 "line 4: 'text' is missing or not a str", id="finding-text"),
    pytest.param([{"class": "OSError", "text": "x"}], ({"type": "finding", "n": 1, "text": "x" * 5000},),
                 "line 4: 'text' is longer than 4096 characters", id="finding-huge"),
])
def test_a_hand_edited_failure_of_the_wrong_type_is_refused_at_load(home: Path, chain: object, more: tuple,
                                                                     reason: str) -> None:
    trace = _hand_made(home, chain, *more)
    result = _dsh(home, "-p", "hi", "--replay", str(trace))
    assert (result.returncode, result.stderr) == (
        2, f"dsh: failed to start: replay file {trace} is not a dsh wire trace ({reason})\n")


def test_a_class_outside_the_list_replays_as_a_reset_and_is_never_imported(home: Path) -> None:
    trace = _hand_made(home, [{"class": "os.system", "text": "touch pwned"}])
    result = _dsh(home, "-p", "hi", "--replay", str(trace))
    assert result.returncode == 1
    assert turn_end(result.stderr)[0] == (
        "[turn failed TRANSPORT] request to the endpoint at http://api.example.invalid failed: ReadError: "
        "BrokenResourceError: [Errno 104] Connection reset by peer")


def test_recorded_text_is_hostile_and_shown_escaped(home: Path) -> None:
    hostile = "\x1b]0;owned\x07\x1b[2Jrefused\u202e \ud800 here"
    trace = _hand_made(home, [{"class": "httpx.ConnectError", "text": hostile},
                              {"class": "ConnectionRefusedError", "text": hostile, "errno": 111, "strerror": hostile}])
    result = _dsh(home, "-p", "hi", "--replay", str(trace), stdin="")
    line = turn_end(result.stderr)[0]
    assert result.returncode == 1
    assert line.startswith("[turn failed TRANSPORT] request to the endpoint at http://api.example.invalid failed: ")
    assert "refused" in line and not any(c in result.stderr for c in "\x1b\x07\u202e\ud800")


def test_an_older_trace_without_a_chain_replays_as_the_reset_it_always_did(home: Path) -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    holder.close()
    trace = home / "trace.jsonl"
    live = _dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY,
                DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}")
    assert live.returncode == 1
    older = [{k: v for k, v in record.items() if k != "chain"} for record in records(trace)]  # as written before
    trace.write_text("".join(json.dumps(record) + "\n" for record in older), encoding="utf-8")
    replayed = _dsh(home, "-p", "hi", "--replay", str(trace))
    assert (replayed.returncode, turn_end(replayed.stderr)[0]) == (1, (
        f"[turn failed TRANSPORT] request to the endpoint at http://127.0.0.1:{port} failed: ReadError: "
        "BrokenResourceError: [Errno 104] Connection reset by peer"))


@pytest.mark.parametrize("failure", ["refused", "certificate"])
def test_a_failure_capsule_of_a_failure_before_any_response_replays_as_itself(home: Path, failure: str) -> None:
    """`-p --report` keeps the chain and the finding from the always-on ring; the capsule replays them offline."""
    capsule = home / "capsule.jsonl"
    with contextlib.ExitStack() as stack:
        if failure == "refused":
            holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            holder.bind(("127.0.0.1", 0))
            port = holder.getsockname()[1]
            holder.close()
            url = f"http://127.0.0.1:{port}"
        else:
            server = FaultServer(default="text", tls=corporate_chain()).start_in_thread()
            stack.callback(server.stop)
            url, port = server.tls_url, int(server.tls_url.rsplit(":", 1)[1])
        live = _dsh(home, "-p", "hi", "--report", str(capsule), DEEPSEEK_API_KEY=canaries.API_KEY,
                    DEEPSEEK_BASE_URL=url)
    assert live.returncode == 1, live.stderr
    *end, said = turn_end(live.stderr)
    assert said == f"dsh: report written to {capsule}"
    assert end[0].startswith(f"[turn failed TRANSPORT] request to the endpoint at {url} failed: ")
    cause = "[Errno 111] Connect call failed" if failure == "refused" else f'unknown issuer "{CORPORATE_ROOT}"'
    assert cause in end[0]
    assert_masked(capsule)
    kinds = [r["type"] for r in records(capsule)]
    assert kinds == ["dsh-failure-capsule", "report", "request", "end", *(["finding"] if failure != "refused" else [])]
    with _silent_listener(port) as listener:  # offline: nothing answers at the recorded address, nothing may try
        replayed = _dsh(home, "-p", "hi", "--replay", str(capsule), DEEPSEEK_BASE_URL=url)
        assert _nobody_came(listener), "the replay connected to the recorded address"
    assert (replayed.returncode, turn_end(replayed.stderr)) == (1, end), replayed.stderr
