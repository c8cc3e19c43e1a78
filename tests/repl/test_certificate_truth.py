"""A certificate failure tells the truth: the certificate presented, its issuer, and whether the trust store
knows that issuer; the fix says how to trust the CA, never to turn verification off (docs/reliability.md; issue 28;
docs/reliability.md, "Certificate failures").

Real parts: the fault server's TLS listener presenting a leaf issued by a test "corporate" root CA
(dsh.llm.loopback.certificate.corporate_chain), the real client, the real renderer's lines. "The OS trust store
knows that issuer" is simulated without touching the system's store: on Linux truststore verifies with OpenSSL's
default locations, which the process's ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` move, so the test points them at a
bundle holding the test root (and the client's own ``env`` has no ``SSL_CERT_FILE``, so dsh takes the OS path).
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.reasons import failure_from_exception
from dsh.llm import DeepSeekClient, chain_links, error_chain
from dsh.llm.certificate_truth import NAME_LIMIT, _printable
from dsh.llm.loopback.certificate import CORPORATE_ROOT, ServedIdentity, corporate_chain
from dsh.llm.loopback.fault_server import FaultServer
from dsh.llm.network import FailureDetail
from dsh.repl.turn_end import (
    FIX_CERTIFICATE,
    FIX_CERTIFICATE_EXPIRED,
    FIX_CERTIFICATE_NAME,
    FIX_CERTIFICATE_NOT_YET_VALID,
    fix_line,
    turn_end_line,
)
from tests import canaries
from tests.llm.conftest import run_stream

pytestmark = pytest.mark.anyio


@pytest.fixture
def stream_outcome():
    return run_stream


@pytest.fixture
async def make_client(anyio_backend: str) -> AsyncIterator[Callable[..., DeepSeekClient]]:
    clients: list[DeepSeekClient] = []

    def factory(base_url: str, **options: Any) -> DeepSeekClient:
        clients.append(DeepSeekClient(base_url=base_url, api_key=canaries.API_KEY, connect_timeout=5.0, **options))
        return clients[-1]

    yield factory
    for client in clients:
        await client.aclose()

_NEVER = re.compile(r"(?i)disabl|verify\s*=\s*false|insecure|no-verify|skip.{0,20}verif|verification off|CERT_NONE")


async def _served(identity: ServedIdentity) -> AsyncIterator[FaultServer]:
    async with FaultServer(tls=identity) as server:
        yield server


@pytest.fixture
async def corporate(anyio_backend: str) -> AsyncIterator[FaultServer]:
    """A TLS listener presenting a leaf for 127.0.0.1 issued by the untrusted test root (the root not sent)."""
    async for server in _served(corporate_chain()):
        yield server


def _port(server: FaultServer) -> str:
    return server.tls_url.rsplit(":", 1)[1]


async def _turn_lines(make_client, stream_outcome, url: str, env: dict[str, str]) -> list[str]:
    """The lines a turn prints for this endpoint's failure: the turn-end line and the fix, as the REPL renders them."""
    error = (await stream_outcome(make_client(url, env=env))).failure
    assert error is not None, "the turn did not fail"
    reason = failure_from_exception(error, 1)
    return [line for line in (turn_end_line(reason), fix_line(reason, {"base_url": "--base-url (flag)"})) if line]


@pytest.fixture
def os_store(monkeypatch: pytest.MonkeyPatch):
    """``os_store(pem_path)``: the process's OpenSSL default trust (what truststore uses on Linux) is that file."""
    if sys.platform in ("darwin", "win32"):
        pytest.skip("truststore asks the platform's own store there, which a test cannot stand in for")

    def point(path: str, directory: Path) -> None:
        monkeypatch.setenv("SSL_CERT_FILE", path)
        monkeypatch.setenv("SSL_CERT_DIR", str(directory))  # empty: only the bundle counts

    return point


async def test_an_untrusted_corporate_root_is_named_with_its_subject(corporate, make_client, stream_outcome,
                                                                     monkeypatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # the machine's own store, which never holds the test root
    lines = await _turn_lines(make_client, stream_outcome, corporate.tls_url, {})
    assert lines == [
        f"[turn failed TRANSPORT] request to the endpoint at {corporate.tls_url} failed: the certificate presented "
        f'for 127.0.0.1:{_port(corporate)} was not accepted: unknown issuer "{CORPORATE_ROOT}" (subject '
        '"127.0.0.1"); the OS trust store does not know that issuer',
        FIX_CERTIFICATE,
    ]


async def test_the_raw_ssl_error_stays_a_link_for_why(corporate, make_client, stream_outcome) -> None:
    error = (await stream_outcome(make_client(corporate.tls_url, env={}))).failure
    assert (error.code, error.retry_limit, error.detail) == ("TRANSPORT", 0, FailureDetail.CERTIFICATE)
    links = [(link.type_name, link.text) for link in chain_links(error)]
    assert links[1][0] == "dsh.llm.errors.Finding" and links[1][1].startswith("the certificate presented for ")
    assert links[-1][0] == "ssl.SSLCertVerificationError"
    assert "unable to get local issuer certificate" in links[-1][1]
    assert "CERTIFICATE_VERIFY_FAILED" not in error_chain(error)  # the one-liner ends with the finding


async def test_the_same_turn_succeeds_once_ssl_cert_file_holds_the_root(corporate, make_client,
                                                                        stream_outcome) -> None:
    outcome = await stream_outcome(make_client(corporate.tls_url, env={"SSL_CERT_FILE": corporate.tls_ca_file}))
    assert outcome.error is None


async def test_a_bundle_in_ssl_cert_file_without_the_root_is_the_store_named(corporate, make_client, stream_outcome,
                                                                              tmp_path: Path) -> None:
    other = tmp_path / "other.pem"
    other.write_bytes(corporate_chain(root_name="some other root").ca_pem)
    lines = await _turn_lines(make_client, stream_outcome, corporate.tls_url, {"SSL_CERT_FILE": str(other)})
    assert lines[0].endswith(f'unknown issuer "{CORPORATE_ROOT}" (subject "127.0.0.1"); the bundle in SSL_CERT_FILE '
                             "does not know that issuer")


async def test_the_root_sent_with_the_leaf_is_still_an_unknown_issuer(make_client, stream_outcome) -> None:
    async for server in _served(corporate_chain(send_root=True)):
        lines = await _turn_lines(make_client, stream_outcome, server.tls_url, {})
        assert lines[0].endswith(f'was not accepted: unknown issuer "{CORPORATE_ROOT}" (subject "127.0.0.1"); the '
                                 "OS trust store does not know that issuer")


async def test_the_os_store_knowing_the_issuer_lets_the_turn_through(corporate, make_client, stream_outcome, os_store,
                                                                     tmp_path: Path) -> None:
    os_store(corporate.tls_ca_file, tmp_path)
    outcome = await stream_outcome(make_client(corporate.tls_url, env={}))
    assert outcome.error is None  # the simulation is truststore's real view: the OS path trusts the root now


async def test_an_expired_leaf_from_a_known_issuer_says_both(make_client, stream_outcome, os_store,
                                                             tmp_path: Path) -> None:
    async for server in _served(corporate_chain(valid_days=(-3, -1))):
        os_store(server.tls_ca_file, tmp_path)
        lines = await _turn_lines(make_client, stream_outcome, server.tls_url, {})
        expired = re.search(r"it expired on (\d{4}-\d\d-\d\d)", lines[0])
        assert expired is not None, lines
        assert lines == [
            f"[turn failed TRANSPORT] request to the endpoint at {server.tls_url} failed: the certificate presented "
            f"for 127.0.0.1:{_port(server)} was not accepted: it expired on {expired.group(1)} (subject "
            f'"127.0.0.1", issuer "{CORPORATE_ROOT}"); the OS trust store knows that issuer',
            FIX_CERTIFICATE_EXPIRED,
        ]


async def test_an_expired_leaf_from_an_unknown_issuer_says_both_problems(make_client, stream_outcome) -> None:
    async for server in _served(corporate_chain(valid_days=(-3, -1))):
        lines = await _turn_lines(make_client, stream_outcome, server.tls_url, {})
        assert re.fullmatch(re.escape(f'unknown issuer "{CORPORATE_ROOT}" (subject "127.0.0.1"); the OS trust store '
                                      "does not know that issuer; it also expired on ") + r"\d{4}-\d\d-\d\d",
                            lines[0].split("was not accepted: ", 1)[1]), lines
        assert lines[1] == FIX_CERTIFICATE  # trust comes first: OpenSSL refused the issuer before the dates


async def test_a_leaf_not_yet_valid(make_client, stream_outcome) -> None:
    async for server in _served(corporate_chain(valid_days=(2, 5))):
        lines = await _turn_lines(make_client, stream_outcome, server.tls_url, {"SSL_CERT_FILE": server.tls_ca_file})
        assert re.search(r"was not accepted: it is not valid before \d{4}-\d\d-\d\d \(subject \"127\.0\.0\.1\", "
                         rf"issuer \"{CORPORATE_ROOT}\"\); the bundle in SSL_CERT_FILE knows that issuer$", lines[0])
        assert lines[1] == FIX_CERTIFICATE_NOT_YET_VALID


async def test_a_host_name_mismatch_lists_the_names_the_certificate_holds(make_client, stream_outcome) -> None:
    identity = corporate_chain(names=["127.0.0.2", "localhost", "a.example", "b.example"])
    async for server in _served(identity):
        lines = await _turn_lines(make_client, stream_outcome, server.tls_url, {"SSL_CERT_FILE": server.tls_ca_file})
        assert lines == [
            f"[turn failed TRANSPORT] request to the endpoint at {server.tls_url} failed: the certificate presented "
            f"for 127.0.0.1:{_port(server)} was not accepted: it is not valid for 127.0.0.1: it names "
            f'"localhost", "a.example", "b.example" and 1 more (subject "127.0.0.2", issuer "{CORPORATE_ROOT}"); '
            "the bundle in SSL_CERT_FILE knows that issuer",
            FIX_CERTIFICATE_NAME.format(source="--base-url (flag)", name="127.0.0.1"),
        ]


async def test_a_ca_of_the_same_name_with_another_key_is_told_apart(corporate, make_client, stream_outcome,
                                                                    tmp_path: Path) -> None:
    impostor = tmp_path / "same-name.pem"
    impostor.write_bytes(corporate_chain().ca_pem)  # the same root name, a different key
    lines = await _turn_lines(make_client, stream_outcome, corporate.tls_url, {"SSL_CERT_FILE": str(impostor)})
    assert lines[0].endswith("; the bundle in SSL_CERT_FILE knows a CA of that name, but not the key that signed "
                             "this certificate")


async def test_hostile_certificate_names_are_inert_and_bounded(make_client, stream_outcome) -> None:
    identity = corporate_chain(root_name="\x1b]0;owned\x07\x1b[31mEvil\u202eCA" + "R" * 10_000,
                               subject="\x1b[2J\u200b" + "S" * 10_000)
    async for server in _served(identity):
        lines = await _turn_lines(make_client, stream_outcome, server.tls_url, {})
        finding = lines[0].split("was not accepted: ", 1)[1]
        issuer = "\\x1b]0;owned\\x07\\x1b[31mEvil\\u202eCA" + "R" * (NAME_LIMIT - 1 - 36) + "…"
        subject = "\\x1b[2J\\u200b" + "S" * (NAME_LIMIT - 1 - 13) + "…"
        assert finding == (f'unknown issuer "{issuer}" (subject "{subject}"); the OS trust store does not know '
                           "that issuer")
        assert not re.search(r"[\x00-\x1f\x7f-\x9f\u200b\u202e]", lines[0])
        assert len(lines[0]) < 400


def test_no_certificate_fix_ever_says_to_turn_verification_off() -> None:
    for fix in (FIX_CERTIFICATE, FIX_CERTIFICATE_NAME, FIX_CERTIFICATE_EXPIRED, FIX_CERTIFICATE_NOT_YET_VALID):
        assert not _NEVER.search(fix), fix


@given(st.text(max_size=300))
def test_a_shown_name_is_printable_bounded_and_unquoted(text: str) -> None:
    shown = _printable(text)
    assert len(shown) <= NAME_LIMIT
    assert shown.isprintable() and '"' not in shown
    if len(text) <= NAME_LIMIT and text.isprintable() and '"' not in text:
        assert shown == text
