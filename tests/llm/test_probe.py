"""dsh.llm.probe against real loopback listeners: the facts it measures, and failures shaped as a request's."""

from __future__ import annotations

import ssl

import anyio
import pytest

from dsh.llm import error_chain
from dsh.llm.loopback.fault_server import FaultServer, closed_port
from dsh.llm.probe import all_attempts_failed, connect_failure_word, open_tls, shown_host, unverified_certificate

pytestmark = pytest.mark.anyio


async def test_open_tls_reports_version_and_certificate(tls_fault_server: FaultServer) -> None:
    port = int(tls_fault_server.tls_url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=tls_fault_server.tls_ca_file)
    facts = await open_tls("127.0.0.1", port, "127.0.0.1", port, context)
    assert facts.version == "TLSv1.3"
    assert facts.certificate["subject"] == facts.certificate["issuer"] == "CN=dsh fault server (self-signed)"
    assert facts.certificate["days_to_expiry"] == 1


async def test_an_untrusted_certificate_raises_but_can_still_be_read(tls_fault_server: FaultServer) -> None:
    port = int(tls_fault_server.tls_url.rsplit(":", 1)[1])
    with pytest.raises(ssl.SSLCertVerificationError):
        await open_tls("127.0.0.1", port, "127.0.0.1", port, ssl.create_default_context())
    shown = await unverified_certificate("127.0.0.1", port, "127.0.0.1", port)
    assert shown["subject"] == "CN=dsh fault server (self-signed)"


async def test_a_refused_connect_is_shaped_as_anyio_shapes_it() -> None:
    with closed_port() as port:
        with pytest.raises(OSError) as real:
            await anyio.connect_tcp("127.0.0.1", port)
        with pytest.raises(OSError) as one:
            await anyio.connect_tcp("127.0.0.1", port)
    assert connect_failure_word(one.value) == "refused"
    assert error_chain(all_attempts_failed([one.value])) == error_chain(real.value)
    assert shown_host("::1", 443) == "[::1]:443" and shown_host("10.0.0.1", 80) == "10.0.0.1:80"
