"""The recording transport: the client sees exactly what it sees without it, and the trace says what happened."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.wire_trace import TraceFileError, TraceWriter
from tests import canaries
from tests.llm.conftest import ClientFactory, StreamRunner

pytestmark = pytest.mark.anyio


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def outcome_key(outcome) -> tuple:  # type: ignore[no-untyped-def]
    error = outcome.error
    return (outcome.events, None if error is None else (error.code, str(error)))  # request ids differ


@pytest.mark.parametrize("behaviour", [
    "text", "reasoning", "tool_call", "surrogates", "no_done", "no_finish", "malformed_json",
    "reset_mid_stream", "fin_mid_stream", "http_429", "reset_before_headers", "disconnect_before_response",
])
async def test_recording_changes_nothing_the_client_sees(
    fault_server: FaultServer, make_client: ClientFactory, stream_outcome: StreamRunner, tmp_path: Path,
    behaviour: str,
) -> None:
    fault_server.push(behaviour, behaviour)
    plain = await stream_outcome(make_client(fault_server.url))
    trace = tmp_path / "trace.jsonl"
    recorded = await stream_outcome(make_client(fault_server.url, record=trace))
    assert outcome_key(recorded) == outcome_key(plain)
    kinds = [r["type"] for r in records(trace)]
    assert kinds[0] == "dsh-wire-trace" and kinds[1] == "request" and kinds[-1] == "end"


async def test_a_gzip_body_is_recorded_inflated_and_a_deadline_ends_it_closed(
    fault_server: FaultServer, make_client: ClientFactory, stream_outcome: StreamRunner, tmp_path: Path,
) -> None:
    fault_server.push(Behaviour("keepalive_bomb", inflated_mb=2))
    trace = tmp_path / "bomb.jsonl"
    outcome = await stream_outcome(make_client(fault_server.url, record=trace, first_token_timeout=0.5))
    assert outcome.failure.code == "TIMEOUT"
    lines = records(trace)
    response = next(r for r in lines if r["type"] == "response")
    assert response["decoded"] == "gzip"
    assert "content-encoding" not in {name.lower() for name, _ in response["headers"]}
    body = "".join(r["text"] for r in lines if r["type"] == "data")
    assert len(body) == 2 << 20 and set(body) == {":", "\n"}
    assert lines[-1]["how"] == "closed"


async def test_a_proxy_carries_the_recorded_request(
    fault_server: FaultServer, make_client: ClientFactory, stream_outcome: StreamRunner, tmp_path: Path,
) -> None:
    trace = tmp_path / "proxy.jsonl"
    fault_server.push("proxy_407")
    proxy = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{fault_server.port}"
    outcome = await stream_outcome(make_client("http://api.invalid", record=trace, proxy=proxy, env={}))
    assert (outcome.failure.code, outcome.failure.status) == ("PROXY", 407)
    assert fault_server.requests[0].behaviour == "proxy_407"  # it went through the proxy
    text = trace.read_text()
    assert canaries.PROXY_PASSWORD not in text and canaries.URL_USER not in text and canaries.API_KEY not in text


async def test_a_full_disk_ends_the_recording_not_the_turn(
    fault_server: FaultServer, make_client: ClientFactory, stream_outcome: StreamRunner, tmp_path: Path,
) -> None:
    trace = tmp_path / "full.jsonl"
    client = make_client(fault_server.url, record=trace)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, client._trace._fd)
    finally:
        os.close(full)
    outcome = await stream_outcome(client)
    assert outcome.error is None and outcome.events
    assert client._trace._fd is None


def test_a_device_is_refused_unopened_and_keeps_its_mode() -> None:
    before = os.stat("/dev/full").st_mode
    with pytest.raises(TraceFileError) as refused:
        TraceWriter("/dev/full")
    assert refused.value.message == (
        "record file /dev/full cannot be written: it is a character device, not a regular file")
    assert os.stat("/dev/full").st_mode == before


def test_a_trace_that_cannot_take_its_header_is_an_error(tmp_path: Path) -> None:
    code = ("import sys\nfrom dsh.llm.wire_trace import TraceWriter\n"
            "try:\n    TraceWriter(sys.argv[1])\nexcept OSError as exc:\n    print(exc.errno)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.jsonl")], capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)))
    assert (done.returncode, done.stdout) == (0, f"{errno.EFBIG}\n")  # a file that may not grow: EFBIG


# Key shapes (docs/architecture.md) and what redact_text masks today; a body line holding any of them is masked.
SHAPES = [
    canaries.UPSTREAM_KEY, "sk-ant-api03-abcdefghijklmnop", "AIzaSyA1234567890abcdefghijklmnopqrstu",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "xoxb-1234567890-abcdefghij", "AKIAIOSFODNN7EXAMPLE",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----", "Authorization: Bearer abc.def",
    "authorization=xyz123", "BASIC dXNlcjpwYXNz", "x-api-key: k123456", f"https://u:{canaries.URL_PASSWORD}@h/v1",
    f"http://h/v1?key={canaries.URL_QUERY}", canaries.API_KEY,
]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_body_prefilter_lets_every_maskable_line_through_to_redact_text(tmp_path: Path, shape: str) -> None:
    from dsh.llm.redact import redact_text

    trace = TraceWriter(tmp_path / "t.jsonl", secrets=(canaries.API_KEY,))
    try:
        line = f'data: {{"content": "see {shape} here"}}'
        body = "\n".join(["data: {}"] * 1000 + [line] + ["data: {}"] * 1000)  # past the whole-chunk path
        for text in (line, body):
            assert trace._mask_body(text) == redact_text(text, (canaries.API_KEY,))
    finally:
        trace.close()


async def test_https_is_recorded_above_tls_and_a_refused_connect_says_where(
    tls_fault_server: FaultServer, make_client: ClientFactory, stream_outcome: StreamRunner, tmp_path: Path,
) -> None:
    from dsh.llm.loopback.fault_server import closed_port

    trace = tmp_path / "tls.jsonl"
    client = make_client(tls_fault_server.tls_url, record=trace, env={"SSL_CERT_FILE": tls_fault_server.tls_ca_file})
    assert (await stream_outcome(client)).error is None
    lines = records(trace)
    assert lines[0]["base_url"] == tls_fault_server.tls_url
    assert "data: [DONE]" in "".join(r["text"] for r in lines if r["type"] == "data")
    assert lines[-1]["how"] == "complete"

    with closed_port() as port:
        refused = tmp_path / "refused.jsonl"
        outcome = await stream_outcome(make_client(f"http://127.0.0.1:{port}", record=refused))
    assert outcome.failure.code == "TRANSPORT"
    end = records(refused)[-1]
    assert (end["how"], end["where"], end["error"]) == ("error", "connect", "ConnectError")
    assert end["message"].endswith(f"Connect call failed ('127.0.0.1', {port})")
