"""``error_chain`` against the real httpx/httpcore/anyio chains, raw and wrapped.

Each failure is produced for real on loopback: a closed port, a full accept backlog, a plain
listener spoken to over TLS, a self-signed certificate, a server that stalls, resets or hangs up.
Each is rendered twice: the raw httpx exception through ``error_chain``, and the same failure
through ``DeepSeekClient`` (code TRANSPORT, exact message, chain reaching the root).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dsh.llm import chain_links, error_chain
from dsh.llm.loopback.fault_server import FullBacklogListener, closed_port
from tests import canaries
from tests.real_parts import isolated_resolver

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio

SSL_LINE = r"\(_ssl\.c:\d+\)"
DEADLINE = r"TimeoutError: Cancelled via cancel scope [0-9a-f]+; reason: deadline exceeded"


async def raw_failure(url: str, **client_options: object) -> BaseException:
    """POST and read the body with plain httpx; return what it raised."""
    client_options.setdefault("timeout", httpx.Timeout(5.0, connect=2.0))
    async with httpx.AsyncClient(**client_options) as http:  # type: ignore[arg-type]
        try:
            async with http.stream("POST", url, json={"model": "m", "messages": []}) as response:
                async for _ in response.aiter_bytes():
                    pass
        except BaseException as exc:  # ExceptionGroup/OverflowError escape for port 99999
            return exc
    raise AssertionError(f"POST {url} succeeded")


async def wrapped(make_client, stream_outcome, base_url: str, **options: object):
    error = (await stream_outcome(make_client(base_url, **options))).failure
    assert error.code == "TRANSPORT"
    assert error.status is None and error.retry_after_s is None
    assert error.__cause__ is not None  # the original exception, for /why
    return error


def assert_request_failed(error, base_url: str, root_pattern: str) -> None:
    message = f"request to the endpoint at {base_url} failed"
    assert error.message == message
    assert re.fullmatch(re.escape(message) + ": " + root_pattern, error_chain(error)), error_chain(error)


# --- connect ------------------------------------------------------------------------------


def refused(port: int, host: str = "127.0.0.1") -> str:
    address = f"('{host}', {port})" if ":" not in host else f"('{host}', {port}, 0, 0)"
    return f"[Errno 111] Connect call failed {address}"


async def test_connection_refused_raw():
    with closed_port() as port:
        exc = await raw_failure(f"http://127.0.0.1:{port}/chat/completions")
    assert isinstance(exc, httpx.ConnectError)
    assert str(exc) == "All connection attempts failed"  # what httpx alone would show
    assert error_chain(exc) == f"All connection attempts failed: {refused(port)}"


async def test_connection_refused_through_the_client(make_client, stream_outcome):
    with closed_port() as port:
        error = await wrapped(make_client, stream_outcome, f"http://127.0.0.1:{port}")
    assert error.message == f"request to the endpoint at http://127.0.0.1:{port} failed"
    assert error_chain(error) == (
        f"request to the endpoint at http://127.0.0.1:{port} failed: All connection attempts failed: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})"
    )


@contextlib.contextmanager
def dual_stack_closed_port() -> Iterator[int]:
    """A port closed on both 127.0.0.1 and ::1 (bound, never listening, on each)."""
    with closed_port() as port:
        six = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        try:
            six.bind(("::1", port))
        except OSError as exc:
            six.close()
            pytest.skip(f"no IPv6 loopback here: {exc}")
        try:
            yield port
        finally:
            six.close()


@pytest.fixture
def localhost_is_dual_stack(monkeypatch: pytest.MonkeyPatch):
    """/etc/hosts maps localhost to 127.0.0.1 only; make it resolve to ::1 then 127.0.0.1."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in ("localhost", b"localhost"):
            number = int(port)
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::1", number, 0, 0)),
                (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", number)),
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def dual_stack_chain(port: int) -> str:
    return (f"All connection attempts failed: multiple connection attempts failed "
            f"[{refused(port, '::1')}; {refused(port)}]")


async def test_localhost_dual_stack_raw(localhost_is_dual_stack):
    with dual_stack_closed_port() as port:
        exc = await raw_failure(f"http://localhost:{port}/chat/completions")
    assert error_chain(exc) == dual_stack_chain(port)


async def test_localhost_dual_stack_through_the_client(localhost_is_dual_stack, make_client, stream_outcome):
    with dual_stack_closed_port() as port:
        error = await wrapped(make_client, stream_outcome, f"http://localhost:{port}")
    assert error.message == f"request to the endpoint at http://localhost:{port} failed"
    assert error_chain(error) == f"{error.message}: {dual_stack_chain(port)}"


def test_a_name_that_does_not_exist_fails_at_once_and_is_permanent(tmp_path):
    # In a loopback-only namespace whose resolver reads /etc/hosts alone, so no query leaves the machine.
    url = "http://api.nonexistent.invalid"
    child = subprocess.run(
        [*isolated_resolver(tmp_path), sys.executable, str(Path(__file__).with_name("dns_child.py")), url],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
    )
    facts = json.loads(child.stdout)
    root = "[Errno -2] Name or service not known"
    assert (facts["raw_type"], facts["raw_chain"]) == ("ConnectError", root)
    assert facts == {
        **facts,
        "code": "TRANSPORT",
        "message": f"request to the endpoint at {url} failed",
        "chain": f"request to the endpoint at {url} failed: {root}",
        "detail": "name-not-found",
        "retry_limit": 0,  # permanent: not retried
    }


async def test_connect_timeout_on_a_full_backlog_raw():
    with FullBacklogListener() as listener:
        exc = await raw_failure(listener.url + "/chat/completions", timeout=httpx.Timeout(5.0, connect=0.3))
    assert isinstance(exc, httpx.ConnectTimeout)
    assert str(exc) == ""  # empty at the top: the chain is the only explanation
    assert re.fullmatch(f"ConnectTimeout: {DEADLINE}", error_chain(exc)), error_chain(exc)


async def test_connect_timeout_through_the_client(make_client, stream_outcome):
    with FullBacklogListener() as listener:
        error = await wrapped(make_client, stream_outcome, listener.url, connect_timeout=0.3)
        assert_request_failed(error, listener.url, f"ConnectTimeout: {DEADLINE}")


# --- TLS ----------------------------------------------------------------------------------

WRONG_VERSION = rf"\[SSL: WRONG_VERSION_NUMBER\] wrong version number {SSL_LINE}"
SELF_SIGNED = rf"\[SSL: CERTIFICATE_VERIFY_FAILED\] certificate verify failed: self-signed certificate {SSL_LINE}"


async def test_https_to_a_plain_listener_raw(tls_fault_server):
    exc = await raw_failure(tls_fault_server.plain_url_for_https + "/chat/completions")
    assert isinstance(exc, httpx.ConnectError)
    assert re.fullmatch(WRONG_VERSION, error_chain(exc))


async def test_https_to_a_plain_listener_through_the_client(tls_fault_server, make_client, stream_outcome):
    url = tls_fault_server.plain_url_for_https
    error = await wrapped(make_client, stream_outcome, url)
    assert_request_failed(error, url, WRONG_VERSION)


async def test_self_signed_certificate_raw(tls_fault_server):
    exc = await raw_failure(tls_fault_server.tls_url + "/chat/completions")
    assert re.fullmatch(SELF_SIGNED, error_chain(exc))


async def test_self_signed_certificate_through_the_client(tls_fault_server, make_client, stream_outcome):
    # The one-liner ends with what dsh found out about the certificate (dsh.llm.certificate_truth); the raw
    # chain is still beneath it, link by link, for /why.
    error = await wrapped(make_client, stream_outcome, tls_fault_server.tls_url, env={})
    port = tls_fault_server.tls_url.rsplit(":", 1)[1]
    assert_request_failed(error, tls_fault_server.tls_url, re.escape(
        f'the certificate presented for 127.0.0.1:{port} was not accepted: self-signed certificate '
        '"dsh fault server (self-signed)"; the OS trust store does not know it'))
    raw = [link for link in chain_links(error) if re.fullmatch(SELF_SIGNED, link.text)]
    assert [link.type_name for link in raw] == ["httpx.ConnectError", "httpcore.ConnectError",
                                                "ssl.SSLCertVerificationError"]
    assert tls_fault_server.requests == []  # the request never got past the handshake


# --- after connect: the fault server ------------------------------------------------------

READ_TIMEOUT = f"ReadTimeout: {DEADLINE}"
RESET = r"ReadError: BrokenResourceError: \[Errno 104\] Connection reset by peer"
INCOMPLETE = r"peer closed connection without sending complete message body \(incomplete chunked read\)"
NO_RESPONSE = r"Server disconnected without sending a response\."


async def test_read_timeout_before_headers_raw(fault_server):
    fault_server.push("stall_before_headers")
    exc = await raw_failure(fault_server.url + "/chat/completions", timeout=httpx.Timeout(5.0, read=0.3))
    assert isinstance(exc, httpx.ReadTimeout)
    assert re.fullmatch(READ_TIMEOUT, error_chain(exc)), error_chain(exc)


async def test_read_timeout_before_headers_through_the_client(fault_server, make_client, stream_outcome):
    # The client's own watchdog would say TIMEOUT first; an httpx read timeout shorter than it is a
    # pre-response transport failure like any other.
    fault_server.push("stall_before_headers")
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.3)) as http:
        error = await wrapped(make_client, stream_outcome, fault_server.url, http_client=http)
    assert_request_failed(error, fault_server.url, READ_TIMEOUT)


@pytest.mark.parametrize(
    ("behaviour", "exc_type", "root", "phase"),
    [
        ("fin_mid_stream", httpx.RemoteProtocolError, INCOMPLETE, "stream from"),
        ("reset_mid_stream", httpx.ReadError, RESET, "stream from"),
        ("reset_before_headers", httpx.ReadError, RESET, "request to"),
        ("disconnect_before_response", httpx.RemoteProtocolError, NO_RESPONSE, "request to"),
    ],
)
async def test_server_side_breaks(fault_server, make_client, stream_outcome, behaviour, exc_type, root, phase):
    fault_server.push(behaviour, behaviour)
    exc = await raw_failure(fault_server.url + "/chat/completions")
    assert isinstance(exc, exc_type)
    assert re.fullmatch(root, error_chain(exc)), error_chain(exc)

    error = await wrapped(make_client, stream_outcome, fault_server.url)
    message = f"{phase} the endpoint at {fault_server.url} failed"
    assert error.message == message
    assert re.fullmatch(re.escape(message) + ": " + root, error_chain(error)), error_chain(error)


# --- configuration mistakes ---------------------------------------------------------------


async def test_https_proxy_at_a_closed_port(monkeypatch, make_client, stream_outcome):
    """A closed proxy port is the proxy's failure: code PROXY, the proxy named with its credentials masked."""
    with closed_port() as port:
        proxy = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{port}"
        monkeypatch.setenv("HTTPS_PROXY", proxy)
        exc = await raw_failure("https://api.deepseek.com/chat/completions")
        assert error_chain(exc) == f"All connection attempts failed: {refused(port)}"

        error = (await stream_outcome(make_client("https://api.deepseek.com"))).failure
    assert error.code == "PROXY" and error.retry_limit is None  # refused stays transient
    assert error_chain(error) == (
        f"DeepSeek API request to https://api.deepseek.com via proxy http://***@127.0.0.1:{port} failed: "
        f"All connection attempts failed: {refused(port)}"
    )
    for canary in (canaries.URL_USER, canaries.PROXY_PASSWORD, canaries.API_KEY):
        assert canary not in error_chain(error)


@pytest.mark.parametrize(
    ("base_url", "shown", "root"),
    [
        ("api.deepseek.com", "api.deepseek.com",
         re.escape("Request URL is missing an 'http://' or 'https://' protocol.")),
        ("htps://127.0.0.1:9", "htps://127.0.0.1:9", re.escape("Request URL has an unsupported protocol 'htps://'.")),
        ("http://127.0.0.1:abc", "http://127.0.0.1:abc", re.escape("Invalid port: 'abc'") + r"(: .*)?"),
    ],
)
async def test_invalid_urls(make_client, stream_outcome, base_url, shown, root):
    exc = await raw_failure(base_url + "/chat/completions")
    assert re.fullmatch(root, error_chain(exc)), error_chain(exc)
    error = await wrapped(make_client, stream_outcome, base_url)
    assert_request_failed(error, shown, root)


async def test_port_99999_escapes_anyio_unwrapped_raw():
    exc = await raw_failure("http://127.0.0.1:99999/chat/completions")
    assert not isinstance(exc, httpx.HTTPError)  # an ExceptionGroup from anyio's connect task group
    assert error_chain(exc) == "unhandled errors in a TaskGroup [connect(): port must be 0-65535.]"


async def test_port_99999_through_the_client(make_client, stream_outcome):
    error = await wrapped(make_client, stream_outcome, "http://127.0.0.1:99999")
    assert error_chain(error) == (
        "request to the endpoint at http://127.0.0.1:99999 failed: "
        "unhandled errors in a TaskGroup [connect(): port must be 0-65535.]"
    )
