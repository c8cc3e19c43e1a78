"""The fault server itself: its command line as a real process, and the wire facts it promises."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import anyio
import httpx
import pytest

from dsh.llm.loopback import streams
from dsh.llm.loopback.fault_server import BEHAVIOURS, Behaviour, FaultServer, FullBacklogListener
from tests.waiting import PROMPTLY, async_wait_until

REPO = Path(__file__).resolve().parents[3]
URL_LINE = re.compile(r"fault server listening on (http://127\.0\.0\.1:\d+)")


# --- the command line ----------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "dsh.llm.loopback.fault_server", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    match = URL_LINE.fullmatch(line.strip())
    assert match, f"unexpected first line {line!r}; stderr: {process.stderr.read() if process.poll() else ''}"
    return match.group(1)


def post(url: str) -> httpx.Response:
    with httpx.Client(timeout=5.0, trust_env=False) as http:
        return http.post(url + "/chat/completions", json={"model": "m", "messages": []})


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_serves_the_script_in_order_then_stops_cleanly(signum):
    process = spawn("--port", "0", "--script", "text,http_503,http_429:retry_after=5,reset_mid_stream")
    try:
        url = read_url(process)
        first = post(url)
        assert first.status_code == 200
        assert first.headers["content-type"].startswith("text/event-stream")
        assert first.text.endswith("data: [DONE]\n\n")
        second = post(url)
        assert (second.status_code, second.json()["error"]["message"]) == (
            503, "Server Overloaded, please try again later")
        third = post(url)
        assert (third.status_code, third.headers["retry-after"]) == (429, "5")
        with pytest.raises(httpx.ReadError):
            post(url)
        assert post(url).status_code == 200  # script used up: the default behaviour
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    served = re.findall(r"POST /chat/completions -> (\S+) \(fault-\d+\)", stdout)
    assert served == ["text", "http_503", "http_429", "reset_mid_stream", "text"]
    assert stdout.rstrip().endswith("fault server stopping after 5 request(s)")


def test_cli_rejects_an_unknown_behaviour():
    process = spawn("--port", "0", "--script", "text,nonsense")
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 2
    assert "unknown fault-server behaviour 'nonsense'" in stderr


def test_cli_lists_behaviours():
    process = spawn("--list")
    stdout, _ = process.communicate(timeout=10)
    assert process.returncode == 0
    assert stdout.split() == sorted(BEHAVIOURS)


def test_cli_tls_listener_and_default(tmp_path):
    process = spawn("--port", "0", "--tls", "--default", "http_401")
    try:
        url = read_url(process)
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        tls = re.search(r"tls listener: (https://127\.0\.0\.1:\d+) \(CA: (\S+)\)", "".join(lines))
        assert tls, lines
        assert post(url).status_code == 401
        import ssl

        with httpx.Client(verify=ssl.create_default_context(cafile=tls.group(2)), trust_env=False) as http:
            assert http.post(tls.group(1) + "/v1/chat/completions", json={}).status_code == 401
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert not Path(tls.group(2)).exists()  # the certificate file is removed on stop


# --- behaviours: parsing -------------------------------------------------------------------


def test_behaviour_parsing():
    assert Behaviour.parse("text") == Behaviour("text")
    assert Behaviour.parse("slow_text:delay=0.2:text=hi") == Behaviour("slow_text", delay=0.2, text="hi")
    assert Behaviour.parse("huge_text:n=5000:crlf=true") == Behaviour("huge_text", n=5000, crlf=True)
    assert Behaviour.parse("http_429:retry_after=5").params == {"retry_after": 5}
    assert Behaviour.coerce("http_418") == Behaviour("http_418")  # any status via http_NNN
    with pytest.raises(ValueError, match="unknown fault-server behaviour 'txet'"):
        Behaviour("txet")
    with pytest.raises(ValueError, match="want key=value"):
        Behaviour.parse("text:oops")


def test_loopback_only():
    with pytest.raises(ValueError, match="loopback only"):
        FaultServer(host="0.0.0.0")


# --- wire facts ----------------------------------------------------------------------------


def _raw_exchange(port: int, path: str = "/chat/completions") -> bytes:
    """Send one request over a bare socket and read until the server closes or resets."""
    body = b'{"model":"m"}'
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.mark.anyio
async def test_reset_is_an_rst_and_disconnect_is_a_fin():
    async with FaultServer(["reset_before_headers", "disconnect_before_response"]) as server:
        with pytest.raises(ConnectionResetError):
            await anyio.to_thread.run_sync(_raw_exchange, server.port)
        assert await anyio.to_thread.run_sync(_raw_exchange, server.port) == b""


@pytest.mark.anyio
async def test_unknown_route_is_404_and_does_not_consume_the_script():
    async with FaultServer(["http_402"]) as server, httpx.AsyncClient(trust_env=False) as http:
        missing = await http.get(server.url + "/nowhere")
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == "no route for GET /nowhere"
        assert (await http.post(server.url + "/v1/chat/completions", json={})).status_code == 402
    assert [r.behaviour for r in server.requests] == ["not_found", "http_402"]


@pytest.mark.anyio
async def test_models_and_balance_answer_by_the_account_state_not_the_script():
    async with FaultServer(["http_402"]) as server, httpx.AsyncClient(trust_env=False) as http:
        models = await http.get(server.url + "/models")
        assert models.status_code == 200
        assert models.json() == {"object": "list", "data": [
            {"id": "deepseek-flash", "object": "model", "owned_by": "deepseek"},
            {"id": "deepseek-v4-pro", "object": "model", "owned_by": "deepseek"}]}
        balance = (await http.get(server.url + "/v1/user/balance")).json()
        assert balance == {"is_available": True, "balance_infos": [
            {"currency": "CNY", "total_balance": "110.00", "granted_balance": "10.00", "topped_up_balance": "100.00"}]}
        server.account = "balance_unavailable"
        balance = (await http.get(server.url + "/user/balance")).json()
        assert balance["is_available"] is False and balance["balance_infos"][0]["total_balance"] == "0.00"
        server.account = "unauthorized"
        for path in ("/models", "/user/balance"):
            denied = await http.get(server.url + path)
            assert denied.status_code == 401
            assert denied.json()["error"]["type"] == "authentication_error"
        assert (await http.post(server.url + "/chat/completions", json={})).status_code == 402
    # The account's answers are numbered and kept apart from the chat requests (a turn's look at /models
    # beside its request shifts no chat request's id).
    assert [r.behaviour for r in server.account_requests] == [
        "account_ok", "account_ok", "account_balance_unavailable", "account_unauthorized", "account_unauthorized"]
    assert [r.request_id for r in server.account_requests][:2] == ["fault-account-0001", "fault-account-0002"]
    assert [(r.behaviour, r.request_id) for r in server.requests] == [("http_402", "fault-0001")]
    with pytest.raises(ValueError, match="unknown account state"):
        FaultServer(account="broke")


@pytest.mark.anyio
async def test_models_none_serves_no_models_list():
    async with FaultServer(models=None) as server, httpx.AsyncClient(trust_env=False) as http:
        assert (await http.get(server.url + "/models")).status_code == 404
        assert (await http.get(server.url + "/user/balance")).status_code == 200
    assert [r.behaviour for r in server.account_requests] == ["not_found", "account_ok"]


@pytest.mark.anyio
async def test_requests_are_recorded_including_chunked_bodies():
    async def body():
        yield b'{"model": "m", '
        yield b'"messages": [{"role": "user", "content": "hi"}]}'

    async with FaultServer() as server, httpx.AsyncClient(trust_env=False) as http:
        await http.post(server.url + "/chat/completions?x=1", content=body(),
                        headers={"X-Trace": "a", "Authorization": "Bearer k"})
        await http.post(server.url + "/chat/completions", content=b"not json")
    first, second = server.requests
    assert (first.method, first.path, first.query) == ("POST", "/chat/completions", "x=1")
    assert first.headers["transfer-encoding"] == "chunked"
    assert first.headers["x-trace"] == "a" and first.headers["authorization"] == "Bearer k"
    assert first.json == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert second.body == b"not json"


@pytest.mark.anyio
async def test_stream_shape_matches_deepseek():
    async with FaultServer(["text"]) as server, httpx.AsyncClient(trust_env=False) as http:
        response = await http.post(server.url + "/chat/completions", json={"model": "deepseek-v4-pro"})
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.headers["x-request-id"] == "fault-0001"
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {"deepseek-v4-pro"}  # echoes the requested model
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_cache_hit_tokens"] == 8
    assert all(c["usage"] is None for c in chunks[:-1])


@pytest.mark.anyio
async def test_keepalive_only_runs_until_the_client_leaves():
    async with FaultServer([Behaviour("keepalive_only", interval=0.02)]) as server:
        async with httpx.AsyncClient(trust_env=False) as http, \
                http.stream("POST", server.url + "/chat/completions", json={}) as response:
            seen = b""
            async for chunk in response.aiter_bytes():
                seen += chunk
                if seen.count(streams.KEEPALIVE) >= 5:
                    break
        assert set(seen.split(b"\n\n")) <= {b": keep-alive", b""}
        await async_wait_until(lambda: server.connections_open == 0, PROMPTLY, "the server to close the connection")


@pytest.mark.anyio
async def test_stop_cancels_every_connection_without_leaks():
    script = ["stall_before_headers", "stall_after_headers", Behaviour("keepalive_only", interval=0.05),
              "stall_mid_stream"]
    gc.collect()  # an earlier test's garbage must not be counted as this server's leak
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        server = FaultServer(script)
        await server.start()
        before = set(asyncio.all_tasks())
        results: list[BaseException] = []

        async def hang() -> None:
            try:
                # The clients would wait 600 s (the keep-alive one forever): a stop that waited for them hangs.
                async with httpx.AsyncClient(timeout=600, trust_env=False) as http, \
                        http.stream("POST", server.url + "/chat/completions", json={}) as response:
                    async for _ in response.aiter_bytes():
                        pass
            except httpx.HTTPError as exc:
                results.append(exc)

        async with anyio.create_task_group() as group:
            for _ in script:
                group.start_soon(hang)
            await async_wait_until(lambda: len(server.requests) >= len(script), PROMPTLY, "every request to arrive")
            with anyio.fail_after(PROMPTLY):
                await server.aclose()
        assert server.connections_open == 0
        assert len(results) == len(script)  # every client saw the connection go
        assert not (set(asyncio.all_tasks()) - before)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_thread_mode_for_sync_callers():
    with FaultServer(default="http_500") as server:
        server.push("text", Behaviour("http_429", retry_after="9"))
        assert post(server.url).status_code == 200
        assert post(server.url).headers["retry-after"] == "9"
        assert post(server.url).status_code == 500
        url = server.url
    with pytest.raises(httpx.ConnectError):
        post(url)
    server.stop()  # idempotent


def test_thread_mode_reports_a_port_in_use():
    with FaultServer() as first, pytest.raises(OSError):
        FaultServer(port=first.port).start_in_thread()


def test_huge_text_serves_the_whole_blob():
    """200 000 one-to-three character deltas arrive byte for byte (no speed claim: the bench has its own server)."""
    with FaultServer([Behaviour("huge_text", n=200_000)]) as server, \
            httpx.Client(timeout=30, trust_env=False) as http, \
            http.stream("POST", server.url + "/chat/completions", json={}) as response:
        size = sum(len(chunk) for chunk in response.iter_raw())
    blob, text = streams.huge_text_blob(200_000)
    assert size == len(blob)
    assert 200_000 <= len(text) <= 600_000


def test_full_backlog_listener_makes_connect_hang():
    with FullBacklogListener() as listener:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            socket.create_connection(("127.0.0.1", listener.port), timeout=0.3)
        assert time.monotonic() - started >= 0.25
