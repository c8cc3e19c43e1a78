"""`dsh --record` and `dsh --replay`: a failure recorded live replays to the same turn-end line, offline.

Each case runs the real `dsh -p` child against the fault server with `--record`, then again with
`--replay` and no server, no key: the answer text, the turn-end line (with its fix line) and the exit
status must be the live run's. The recordings are checked for the canary secrets and their mode.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.wire_trace import BodyTee, TraceWriter
from dsh.repl.turn_end import FIX_AUTH
from tests import canaries
from tests.real_parts import missing
from tests.repl.test_cli import REPO, base_env, dsh, write_config

# (behaviour, extra config lines, exit status)
CASES = [
    pytest.param(Behaviour("text"), "", 0, id="completed"),
    pytest.param(Behaviour("http_401"), "", 1, id="http-401"),
    pytest.param(Behaviour("http_400", message=f"bad key {canaries.UPSTREAM_KEY}"), "", 1, id="http-400-echo"),
    pytest.param(Behaviour("http_429", retry_after="1"), "", 1, id="http-429"),
    pytest.param(Behaviour("http_502_html"), "", 1, id="http-502-html"),
    pytest.param(Behaviour("http_503"), "max_retries = 1\n", 1, id="http-503-retried"),
    pytest.param(Behaviour("http_204"), "", 1, id="http-204-no-body"),
    pytest.param(Behaviour("empty_body"), "", 1, id="empty-body"),
    pytest.param(Behaviour("reset_mid_stream"), "max_retries = 1\n", 1, id="reset-mid-stream-retried"),
    pytest.param(Behaviour("fin_mid_stream"), "", 1, id="fin-mid-stream"),
    pytest.param(Behaviour("reset_before_headers"), "", 1, id="reset-before-headers"),
    pytest.param(Behaviour("no_finish"), "", 1, id="no-done"),
    pytest.param(Behaviour("no_done"), "", 0, id="finish-without-done"),
    pytest.param(Behaviour("malformed_json"), "", 1, id="malformed-json"),
    pytest.param(Behaviour("malformed_shape"), "", 1, id="malformed-shape"),
    pytest.param(Behaviour("keepalive_only"), "first_token_timeout = 1\n", 1, id="keepalive-stall"),
    pytest.param(Behaviour("stall_mid_stream"), "stream_idle_timeout = 1\n", 1, id="idle-after-content"),
]


def base_url(srv: FaultServer) -> str:
    """The fault server, with base-URL credentials and a query to mask."""
    return f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{srv.port}/?k={canaries.URL_QUERY}"


def turn_end(stderr: str) -> list[str]:
    """The turn-end line and what follows it (the fix line), without the `[main turn N] ` prefix."""
    lines = stderr.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = re.search(r"\[turn (failed|aborted|rejected|hit|interrupted)[^\]]*\].*$", lines[index])
        if match:
            return [match.group(0), *lines[index + 1:]]
    return []


def assert_masked(trace: Path) -> None:
    text = trace.read_text(encoding="utf-8")
    for canary in canaries.STRICT:
        assert canary not in text, canary
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600


def records(trace: Path) -> list[dict]:
    return [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(("behaviour", "config", "status"), CASES)
def test_a_recorded_turn_replays_to_the_same_turn_end_line(
    home: Path, fault: FaultServer, behaviour: Behaviour, config: str, status: int
) -> None:
    trace = home / "trace.jsonl"
    write_config(home, "max_retries = 0\n" * ("max_retries" not in config) + config)
    fault.default = behaviour
    live = dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL=base_url(fault))
    assert live.returncode == status, live.stderr
    assert_masked(trace)
    requests = len(fault.requests)
    assert [r["n"] for r in records(trace) if r["type"] == "end"] == list(range(1, requests + 1))

    # No key, no server, and no deadlines set: the recorded ones apply (the retry setting must match).
    write_config(home, "".join(line + "\n" for line in config.splitlines() if "timeout" not in line)
                 or "max_retries = 0\n")
    replayed = dsh(home, "-p", "hi", "--replay", str(trace))
    assert len(fault.requests) == requests
    assert replayed.returncode == status, replayed.stderr
    # The live run's key came from DEEPSEEK_API_KEY and its AUTH fix names that; the replay has no key.
    live_end = [FIX_AUTH if line.startswith("  fix: the API key was refused") else line
                for line in turn_end(live.stderr)]
    assert turn_end(replayed.stderr) == live_end
    assert replayed.stdout == live.stdout  # the answer text too, line for line
    if status:
        assert turn_end(live.stderr), live.stderr


def test_a_proxy_failure_replays_naming_the_recorded_proxy_and_no_credentials(
    home: Path, fault: FaultServer
) -> None:
    trace = home / "trace.jsonl"
    write_config(home, f'record = "{trace}"\n')  # the config key, not the flag
    fault.default = Behaviour("proxy_407")  # echoes the proxy credentials in its body
    proxy = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{fault.port}"
    live = dsh(home, "-p", "hi", "--proxy", proxy, DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL="http://api.invalid")
    assert live.returncode == 1
    assert turn_end(live.stderr)[0] == f"[turn failed PROXY] proxy http://***@127.0.0.1:{fault.port} answered HTTP 407"
    assert_masked(trace)
    assert records(trace)[0]["proxy"] == f"http://***@127.0.0.1:{fault.port}"

    write_config(home, "")
    replayed = dsh(home, "-p", "hi", "--replay", str(trace))
    assert (replayed.returncode, turn_end(replayed.stderr)[0]) == (1, turn_end(live.stderr)[0])


def test_a_request_beyond_the_recording_is_an_http_error_naming_it(home: Path, fault: FaultServer) -> None:
    trace = home / "one.jsonl"
    live = dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL=fault.url)
    assert live.returncode == 0
    replayed = dsh(home, "--replay", str(trace), "--replay-speed", "4", stdin="first\nsecond\n")
    assert replayed.returncode == 0
    assert replayed.stdout.count("Hello! How can I help you today?") == 1
    assert (f"[main turn 2] [turn failed HTTP_410] replay {trace} holds 1 exchange(s); "
            "request 2 is beyond the recording") in replayed.stdout.splitlines()


GARBAGE = [
    pytest.param("", "empty file", id="empty"),
    pytest.param("not json\n", "line 1: not JSON", id="not-json"),
    pytest.param('{"type": "session", "version": 1}\n', "line 1: no dsh-wire-trace header", id="a-session-log"),
    pytest.param('{"type": "dsh-wire-trace", "version": 9}\n', "line 1: version 9 (this dsh reads 1)", id="version"),
    pytest.param('{"type": "dsh-wire-trace", "version": 1}\n{"type": "data", "n": 1, "t": 0, "text": "x"}\n',
                 "line 2: body data before the response of exchange 1", id="data-first"),
    pytest.param('{"type": "dsh-wire-trace", "version": 1}\n{"type": "response", "n": 1, "t": 0, "status": 200,'
                 ' "headers": [["x-evil", "a\\r\\nb"]]}\n', "line 2: a header holds a line break", id="header-crlf"),
    pytest.param('{"type": "dsh-wire-trace", "version": 1}\n{"type": "end", "n": "1"}\n',
                 "line 2: 'n' is missing or not a int", id="bad-n"),
]


@pytest.mark.parametrize(("content", "reason"), GARBAGE)
def test_a_garbage_recording_is_one_clear_startup_error(home: Path, content: str, reason: str) -> None:
    trace = home / "bad.jsonl"
    trace.write_text(content)
    result = dsh(home, "-p", "hi", "--replay", str(trace))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"dsh: failed to start: replay file {trace} is not a dsh wire trace ({reason}")


def test_a_missing_recording_is_one_clear_startup_error(home: Path) -> None:
    result = dsh(home, "-p", "hi", "--replay", str(home / "nope.jsonl"))
    assert (result.returncode, result.stderr) == (
        2, f"dsh: failed to start: replay file {home / 'nope.jsonl'} cannot be read: No such file or directory\n")


def test_replay_server_serves_the_recording_to_other_clients(home: Path, fault: FaultServer) -> None:
    trace = home / "trace.jsonl"
    fault.default = Behaviour("reset_mid_stream")
    write_config(home, "max_retries = 0\n")
    live = dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL=fault.url)
    assert live.returncode == 1
    recorded = "".join(r["text"] for r in records(trace) if r["type"] == "data")
    child = subprocess.Popen([sys.executable, "-m", "dsh.repl", "replay-server", str(trace), "--port", "0"],
                             cwd=REPO, env=base_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        banner = child.stdout.readline()
        match = re.fullmatch(rf"dsh replay-server: 1 exchange\(s\) from {re.escape(str(trace))} at "
                             r"(http://127\.0\.0\.1:\d+)/chat/completions \(Ctrl-C stops\)\n", banner)
        assert match, banner
        received = b""
        with pytest.raises(httpx.ReadError), httpx.stream(  # the reset ends the body
            "POST", match.group(1) + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=10
        ) as response:
            assert response.status_code == 200
            assert response.headers["x-request-id"] == "fault-0001"
            for chunk in response.iter_raw():
                received += chunk
        assert received.decode() == recorded
        beyond = httpx.post(match.group(1) + "/chat/completions", json={}, timeout=10)
        assert beyond.status_code == 410
        assert beyond.json()["error"]["message"].endswith("request 2 is beyond the recording")
    finally:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=10)
    assert (child.returncode, out, err) == (0, "dsh replay-server: stopped after 2 request(s)\n", "")


def test_a_secret_split_across_two_reads_is_still_masked(tmp_path: Path) -> None:
    path = tmp_path / "split.jsonl"
    trace = TraceWriter(path, secrets=(canaries.PROXY_PASSWORD,))
    tee = BodyTee(trace, trace.next_exchange(), 0.0, None)
    half = len(canaries.PROXY_PASSWORD) // 2
    tee.feed(b"data: " + canaries.PROXY_PASSWORD[:half].encode())
    tee.feed(canaries.PROXY_PASSWORD[half:].encode() + b" and " + canaries.UPSTREAM_KEY[:9].encode())
    tee.feed(canaries.UPSTREAM_KEY[9:].encode() + b"\n\n\xff")
    tee.flush()
    trace.close()
    text = path.read_text()
    assert canaries.PROXY_PASSWORD not in text and canaries.UPSTREAM_KEY not in text
    data = [r for r in records(path) if r["type"] == "data"]
    assert data[0]["text"] == "data: *** and sk-***\n\n"
    assert data[1]["b64"] == "/w=="
    assert os.stat(path).st_mode & 0o077 == 0


def test_the_record_key_gives_each_run_its_own_file(home: Path, fault: FaultServer) -> None:
    (home / "traces").mkdir()
    write_config(home, f'record = "{home}/traces/dsh-{{time}}-{{pid}}.jsonl"\n')
    for _ in range(2):
        result = dsh(home, "-p", "hi", DEEPSEEK_API_KEY=canaries.API_KEY, DEEPSEEK_BASE_URL=fault.url)
        assert result.returncode == 0, result.stdout
    names = sorted(path.name for path in (home / "traces").iterdir())
    assert len(names) == 2 and all(re.fullmatch(r"dsh-\d{8}T\d{6}Z-\d+\.jsonl", name) for name in names), names


@pytest.mark.parametrize(("args", "line"), [
    (["--record", "/nonexistent/trace.jsonl"],
     "dsh: failed to start: record file /nonexistent/trace.jsonl cannot be written: its folder does not exist"),
    (["--demo", "--record", "trace.jsonl"],
     "dsh: failed to start: --record records a real endpoint or a --replay; the demo's scenarios are scripted"),
    (["--demo", "--replay", "trace.jsonl"],
     "dsh: failed to start: --replay and --demo each pick the endpoint; give one of them"),
])
def test_record_and_replay_usage_errors_are_one_line(home: Path, args: list[str], line: str) -> None:
    result = dsh(home, "-p", "hi", *args, DEEPSEEK_API_KEY=canaries.API_KEY)
    assert (result.returncode, result.stderr.splitlines()) == (2, [line])


def test_the_demo_starts_with_a_config_file_that_records_and_says_it_records_nothing(home: Path) -> None:
    # The example config of docs/configuration.md sets record; the demo must still start from it.
    write_config(home, f'record = "{home}/trace-{{pid}}.jsonl"\n')
    result = dsh(home, "--demo", "-p", "hi")
    config = home / "config" / "dsh" / "config.toml"
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"dsh: warning: record in {config} is not used by --demo: its scenarios are scripted")
    assert not list(home.glob("trace-*.jsonl"))


def test_replay_speed_must_be_positive(home: Path) -> None:
    result = dsh(home, "-p", "hi", "--replay", "x.jsonl", "--replay-speed", "0")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "dsh: error: argument --replay-speed: must be a positive number, got '0'"


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_reads_a_recorded_answer_from_replay_server(home: Path, fault: FaultServer) -> None:
    trace = home / "text.jsonl"
    live = dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL=fault.url)
    assert live.returncode == 0
    recorded = "".join(r["text"] for r in records(trace) if r["type"] == "data")
    assert recorded.endswith("data: [DONE]\n\n")
    child = subprocess.Popen([sys.executable, "-m", "dsh.repl", "replay-server", str(trace)], cwd=REPO,
                             env=base_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = re.search(r"at (\S+) \(Ctrl-C stops\)", child.stdout.readline())
        assert url, "no banner"
        result = subprocess.run(["curl", "-sS", "-N", "-H", "content-type: application/json", "-d", "{}", url.group(1)],
                                capture_output=True, text=True, timeout=30)
        assert (result.returncode, result.stdout, result.stderr) == (0, recorded, "")
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=10)
    assert child.returncode == 0


def test_the_openai_sdk_streams_a_recorded_answer_from_replay_server(home: Path, fault: FaultServer) -> None:
    try:
        import openai
    except ImportError:
        missing("the openai SDK", "pip install -e '.[test]'")
    trace = home / "text.jsonl"
    live = dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL=fault.url)
    assert live.returncode == 0
    child = subprocess.Popen([sys.executable, "-m", "dsh.repl", "replay-server", str(trace)], cwd=REPO,
                             env=base_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = re.search(r"at (\S+)/chat/completions \(Ctrl-C stops\)", child.stdout.readline())
        assert url, "no banner"
        client = openai.OpenAI(base_url=url.group(1), api_key="any", max_retries=0)
        stream = client.chat.completions.create(model="deepseek-v4-flash", messages=[{"role": "user", "content": "hi"}],
                                                stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text + "\n" == live.stdout
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=10)
    assert child.returncode == 0


def test_replay_server_start_failures_are_one_line(home: Path, fault: FaultServer) -> None:
    bad = home / "bad.jsonl"
    bad.write_text("garbage\n")
    result = dsh(home, "replay-server", str(bad))
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"dsh: failed to start: replay file {bad} is not a dsh wire trace (line 1: not JSON)\n")
    good = home / "good.jsonl"
    good.write_text('{"type": "dsh-wire-trace", "version": 1}\n')
    result = dsh(home, "replay-server", str(good), "--port", str(fault.port))  # taken
    assert result.returncode == 1
    assert result.stderr.startswith(f"dsh: failed to start: cannot listen on 127.0.0.1:{fault.port}: ")
    assert len(result.stderr.splitlines()) == 1
