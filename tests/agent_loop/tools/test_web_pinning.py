"""A direct web_fetch connects to the very address it checked (docs/tools.md, "The web: web_fetch and
web_search"; agent_loop/tools/web_guard.py): a name that rebinds to loopback after the check is refused, never
fetched, and the pinned connection keeps the URL's host for Host, TLS's server name and the certificate check.

The rebinding runs the real resolver against a loopback DNS server in a loopback-only namespace
(tests/loopback_dns.py); the pinned connections are real ones to loopback servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.tools.web_guard import failure_lines
from dsh.agent_loop.tools.web_http import get_once
from dsh.llm.loopback.certificate import corporate_chain
from tests.agent_loop.tools.test_web_fetch import _serving, _tls_context
from tests.loopback_dns import REBIND_FIRST
from tests.real_parts import loopback_resolver

REPO = Path(__file__).resolve().parents[3]


def _fetch_in_namespace(tmp_path: Path, dns: str, host: str) -> tuple[dict[str, Any], str, str]:
    """web_fetch of ``http://host:PORT/page`` where the only resolver answers ``dns``: the result, the port, and
    what went to stderr."""
    prefix = loopback_resolver(tmp_path, dns)
    done = subprocess.run([*prefix, sys.executable, "-m", "tests.agent_loop.tools.rebind_fetch", host], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return result, result["asked"][0].rsplit(":", 1)[1].split("/", 1)[0], done.stderr


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_and_never_fetched(tmp_path: Path) -> None:
    result, port, stderr = _fetch_in_namespace(tmp_path, "rebind", "rebind.test")
    # The check saw a public address, so the user was asked; the fetch's own look-up met loopback and stopped.
    assert result["asked"] == [f"web_fetch GET http://rebind.test:{port}/page"]
    assert result["text"] == (f"Error: web_fetch http://rebind.test:{port}/page: rebind.test resolves to 127.0.0.1, "
                              "a loopback address; fetching it needs rebind.test in web_allow")
    assert result["seen"] == []
    assert REBIND_FIRST not in stderr


def test_a_direct_fetch_of_a_name_that_does_not_exist_says_so_with_the_fix_line(tmp_path: Path) -> None:
    result, port, _ = _fetch_in_namespace(tmp_path, "nxdomain", "nothere.test")
    assert result["text"] == (f"Error: web_fetch http://nothere.test:{port}/page: [Errno -2] Name or service not "
                              "known\n  fix: the host name nothere.test does not exist — check the URL")
    assert result["seen"] == []


async def _get(url: str, connect_to: str | None, env: dict[str, str]):
    return await get_once(url, proxy=None, connect_to=connect_to, env=env, headers={"Accept": "*/*"},
                          connect_timeout=3.0, read_timeout=3.0, limit=1 << 16)


@pytest.mark.anyio
async def test_a_pinned_fetch_connects_to_the_checked_address_without_resolving_the_name_again() -> None:
    with _serving() as site:
        port = site.server_address[1]
        # .invalid never resolves (RFC 6761): only the pinned address can have been used
        answer = await _get(f"http://pinned.invalid:{port}/page", "127.0.0.1", {})
    assert answer.status == 200 and b"<h1>Hello</h1>" in answer.body
    assert site.seen[0]["host"] == f"pinned.invalid:{port}"  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_pinned_tls_fetch_checks_the_certificate_against_the_urls_host(tmp_path: Path) -> None:
    identity = corporate_chain(names=["pinned.test"])
    trusted = tmp_path / "ca.pem"
    trusted.write_bytes(identity.ca_pem)
    with _serving(_tls_context(identity, tmp_path)) as site:
        port = site.server_address[1]
        answer = await _get(f"https://pinned.test:{port}/page", "127.0.0.1", {"SSL_CERT_FILE": str(trusted)})
        assert answer.status == 200 and b"<h1>Hello</h1>" in answer.body
        with pytest.raises(Exception) as refused:  # the same address under another name: the name is checked
            await _get(f"https://other.test:{port}/page", "127.0.0.1", {"SSL_CERT_FILE": str(trusted)})
    assert "other.test" in str(refused.value) or "match" in repr(refused.value.__context__), repr(refused.value)


@pytest.mark.anyio
async def test_a_refused_certificate_is_read_again_at_the_pinned_address(tmp_path: Path) -> None:
    identity = corporate_chain(names=["pinned.test"])
    trusted = tmp_path / "ca.pem"
    trusted.write_bytes(identity.ca_pem)
    env = {"SSL_CERT_FILE": str(trusted)}
    with _serving(_tls_context(identity, tmp_path)) as site:
        url = f"https://other.test:{site.server_address[1]}/page"  # other.test resolves nowhere: only the pin
        with pytest.raises(Exception) as refused:
            await _get(url, "127.0.0.1", env)
        text, _ = await failure_lines(refused.value, url=url, proxy=None, proxy_source="", env=env,
                                      address="127.0.0.1")
    port = url.split(":")[2].split("/")[0]
    assert text == (
        f"web_fetch {url}: the certificate presented for other.test:{port} was not accepted: it is not valid for "
        'other.test: it names "pinned.test" (subject "pinned.test", issuer "dsh test corporate root CA"); the bundle '
        "in SSL_CERT_FILE knows that issuer\n"
        "  fix: the certificate is for other host names — the server needs a certificate for other.test")
