"""Proxies named, permanent failures capped at zero retries, TLS trust (docs/contracts.md; docs/reliability.md).

Real parts: the fault server on loopback plays the endpoint, a self-signed TLS listener, and a forward
proxy answering as squid or a credential-refusing proxy would. DNS: the classification of each
``socket.gaierror`` is checked here on real instances; a real lookup of a name that does not exist runs
in a loopback-only namespace in test_transport_chains.py (see docs/reliability.md).
"""

from __future__ import annotations

import socket

import pytest

from dsh.llm import chain_links, error_chain
from dsh.llm.loopback.fault_server import Behaviour
from dsh.llm.network import FailureDetail, classify_transport, environment_proxy
from tests import canaries

pytestmark = pytest.mark.anyio


async def test_self_signed_certificate_is_permanent(tls_fault_server, make_client, stream_outcome, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    error = (await stream_outcome(make_client(tls_fault_server.tls_url, env={}))).failure
    assert (error.code, error.retry_limit, error.detail) == ("TRANSPORT", 0, FailureDetail.CERTIFICATE)
    assert error_chain(error).startswith(f"request to the endpoint at {tls_fault_server.tls_url} failed: ")
    assert "CERTIFICATE_VERIFY_FAILED" not in error_chain(error)  # the one-liner names the certificate instead
    assert any("CERTIFICATE_VERIFY_FAILED" in link.text for link in chain_links(error))  # /why keeps it


async def test_ssl_cert_file_wins(tls_fault_server, make_client, stream_outcome):
    client = make_client(tls_fault_server.tls_url, env={"SSL_CERT_FILE": tls_fault_server.tls_ca_file})
    outcome = await stream_outcome(client)
    assert outcome.error is None


async def test_https_to_a_plain_port_is_permanent(fault_server, make_client, stream_outcome):
    error = (await stream_outcome(make_client(fault_server.plain_url_for_https, env={}))).failure
    assert (error.code, error.retry_limit, error.detail) == ("TRANSPORT", 0, FailureDetail.PLAIN_HTTP)
    assert error.endpoint == fault_server.plain_url_for_https


async def test_invalid_url_is_permanent(make_client, stream_outcome):
    error = (await stream_outcome(make_client("htps://127.0.0.1:9", env={}))).failure
    assert (error.code, error.retry_limit, error.detail) == ("TRANSPORT", 0, FailureDetail.INVALID_URL)


@pytest.mark.parametrize(
    ("gai_errno", "text", "detail"),
    [
        (socket.EAI_NONAME, "Name or service not known", FailureDetail.NAME_NOT_FOUND),
        (getattr(socket, "EAI_NODATA", -5), "No address associated with hostname", FailureDetail.NAME_NOT_FOUND),
        (socket.EAI_AGAIN, "Temporary failure in name resolution", FailureDetail.NAME_UNRESOLVED),  # retried
    ],
)
def test_name_resolution_classification(gai_errno: int, text: str, detail: str | None) -> None:
    import httpx

    try:
        try:
            raise socket.gaierror(gai_errno, text)
        except socket.gaierror as exc:
            raise httpx.ConnectError(text) from exc
    except httpx.ConnectError as wrapped:
        assert classify_transport(wrapped) == detail


def test_environment_proxy_follows_httpx_rules() -> None:
    env = {"https_proxy": "http://a:1", "HTTPS_PROXY": "http://b:2", "ALL_PROXY": "socks5://c:3"}
    assert environment_proxy("https://api.deepseek.com", env) == ("http://a:1", "https_proxy")
    assert environment_proxy("http://127.0.0.1:9", env) == ("socks5://c:3", "ALL_PROXY")
    assert environment_proxy("https://api.deepseek.com", {**env, "NO_PROXY": ".deepseek.com"}) is None
    assert environment_proxy("https://api.deepseek.com", {**env, "no_proxy": "*"}) is None
    assert environment_proxy("https://api.deepseek.com", {"HTTPS_PROXY": "127.0.0.1:3128"}) == (
        "http://127.0.0.1:3128", "HTTPS_PROXY")


def _proxy_url(fault_server) -> str:
    return f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{fault_server.port}"


async def test_proxy_407_is_proxy_never_retried_and_masks_echoed_credentials(fault_server, make_client, stream_outcome):
    fault_server.default = Behaviour("proxy_407")
    client = make_client("http://api.deepseek.example", proxy=_proxy_url(fault_server), env={})
    error = (await stream_outcome(client)).failure
    shown = f"http://***@127.0.0.1:{fault_server.port}"
    assert (error.code, error.status, error.retry_limit) == ("PROXY", 407, 0)
    assert error_chain(error) == f"proxy {shown} answered HTTP 407"
    assert error.endpoint == shown
    assert canaries.PROXY_PASSWORD in client.secrets and canaries.URL_USER in client.secrets


async def test_proxy_5xx_with_squid_headers_is_proxy(fault_server, make_client, stream_outcome):
    fault_server.default = Behaviour("proxy_503")
    client = make_client("http://api.deepseek.example", proxy=_proxy_url(fault_server), env={})
    error = (await stream_outcome(client)).failure
    assert (error.code, error.status, error.retry_limit) == ("PROXY", 503, None)  # retried like any 5xx
    shown = f"http://***@127.0.0.1:{fault_server.port}"
    assert error_chain(error) == f"proxy {shown} answered HTTP 503: ERR_CONNECT_FAIL 111"


async def test_upstream_error_through_a_proxy_names_it(fault_server, make_client, stream_outcome):
    fault_server.default = Behaviour("http_401")
    client = make_client(fault_server.url, proxy=_proxy_url(fault_server), env={})
    error = (await stream_outcome(client)).failure
    assert error.code == "AUTH"
    assert error.message.endswith(f" (via proxy http://***@127.0.0.1:{fault_server.port})")
    assert canaries.PROXY_PASSWORD not in error_chain(error)


async def test_socks_proxy_at_a_closed_port_is_named(make_client, stream_outcome):
    import contextlib

    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = (await stream_outcome(make_client("https://api.deepseek.com", proxy=f"socks5://127.0.0.1:{port}",
                                              env={}))).failure
    assert (error.code, error.detail) == ("PROXY", FailureDetail.REFUSED)
    shown = f"socks5://127.0.0.1:{port}"
    assert error.message == f"DeepSeek API request to https://api.deepseek.com via proxy {shown} failed"
