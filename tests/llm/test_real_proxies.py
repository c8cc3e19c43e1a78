"""dsh through real tinyproxy and squid (Debian packages), started here on loopback ports.

Each proxy runs in the foreground from a generated config in a tmp dir and is reaped at teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from dsh.llm import error_chain
from dsh.llm.network import FailureDetail
from tests import canaries
from tests.real_parts import missing
from tests.waiting import PROMPTLY, wait_until

pytestmark = pytest.mark.anyio
# Not a canary: tinyproxy's config file must hold it, and the session-end scan greps every file written.
_PASSWORD = "tinyproxyGoodPassword"


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"proxy exited {process.returncode}")
        with contextlib.closing(socket.socket()) as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    # squid starts in seconds on a loaded machine; the wrong path (it never listens) waits forever.
    wait_until(listening, 3 * PROMPTLY, "the proxy to listen", interval=0.05)


@contextlib.contextmanager
def _running(argv: list[str], port: int) -> Iterator[None]:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, process)
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _installed(name: str, fallback: str) -> str:
    """The path of the proxy ``name`` (Debian puts squid in sbin, off a user's PATH); missing() if absent."""
    binary = shutil.which(name) or (fallback if os.path.exists(fallback) else None)
    if binary is None:
        missing(name, f"apt-get install -y {name}")
    return binary


# One proxy of each kind serves the whole module: they keep no state between requests.
@pytest.fixture(scope="module")
def tinyproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tinyproxy with BasicAuth; yields its address as host:port."""
    binary = _installed("tinyproxy", "/usr/bin/tinyproxy")
    port = _free_port()
    conf = tmp_path_factory.mktemp("tinyproxy") / "tinyproxy.conf"
    conf.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nLogLevel Critical\n"
        f"BasicAuth dshuser {_PASSWORD}\n"
    )
    with _running([binary, "-d", "-c", str(conf)], port):
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def squid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A squid that allows everyone; yields its address as host:port."""
    binary = _installed("squid", "/usr/sbin/squid")
    tmp_path = tmp_path_factory.mktemp("squid")
    port = _free_port()
    conf = tmp_path / "squid.conf"
    user = "proxy" if os.geteuid() == 0 else os.environ.get("USER", "nobody")
    conf.write_text(
        f"http_port 127.0.0.1:{port}\nhttp_access allow all\ncache deny all\ncache_mem 8 MB\n"
        f"cache_effective_user {user}\npid_filename {tmp_path}/squid.pid\n"
        f"access_log none\ncache_log /dev/null\ncoredump_dir {tmp_path}\nshutdown_lifetime 0 seconds\n"
        "connect_retries 0\nforward_max_tries 1\n"
    )
    with _running([binary, "-N", "-f", str(conf)], port):
        yield f"127.0.0.1:{port}"


async def test_healthy_through_tinyproxy(tinyproxy, fault_server, make_client, stream_outcome):
    proxy = f"http://dshuser:{_PASSWORD}@{tinyproxy}"
    outcome = await stream_outcome(make_client(fault_server.url, proxy=proxy, env={}))
    assert outcome.error is None
    assert "proxy-authorization" not in fault_server.requests[-1].headers  # the proxy consumed it


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_wrong_credentials_at_tinyproxy_are_proxy(scheme, tinyproxy, fault_server, make_client, stream_outcome):
    base = fault_server.url if scheme == "http" else fault_server.plain_url_for_https
    client = make_client(base, proxy=f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@{tinyproxy}", env={})
    error = (await stream_outcome(client)).failure
    assert (error.code, error.status, error.retry_limit, error.detail) == ("PROXY", 401, 0, FailureDetail.PROXY_AUTH)
    shown = f"http://***@{tinyproxy}"
    if scheme == "http":  # tinyproxy answers the forwarded request itself: 401 (not 407)
        assert error_chain(error) == f"proxy {shown} answered HTTP 401"
    else:  # over CONNECT httpx raises ProxyError with the proxy's status line
        assert error_chain(error) == f"request to the endpoint at {base} via proxy {shown} failed: 401 Unauthorized"


async def test_squid_with_upstream_closed_is_proxy(squid, make_client, stream_outcome):
    port = _free_port()
    error = (await stream_outcome(make_client(f"http://127.0.0.1:{port}", proxy=f"http://{squid}", env={}))).failure
    assert (error.code, error.status) == ("PROXY", 503)
    assert error_chain(error).startswith(f"proxy http://{squid} answered HTTP 503: ERR_CONNECT_FAIL")


async def test_connect_through_squid_to_self_signed_listener(squid, tls_fault_server, make_client, stream_outcome):
    error = (await stream_outcome(make_client(tls_fault_server.tls_url, proxy=f"http://{squid}", env={}))).failure
    # The certificate is the upstream's (through the tunnel): TRANSPORT, permanent, the proxy named.
    assert (error.code, error.retry_limit, error.detail) == ("TRANSPORT", 0, FailureDetail.CERTIFICATE)
    assert error.message == f"request to the endpoint at {tls_fault_server.tls_url} via proxy http://{squid} failed"
