"""Network facts below HTTP, measured one at a time for ``dsh doctor`` (docs/doctor.md).

A request's connect does DNS, TCP and TLS in one call and reports only the first failure. These probes
take the same path step by step — a TCP connect per address, a TLS handshake with the trust store a
request uses (:func:`~dsh.llm.network.ssl_context`), an http proxy's ``CONNECT`` tunnel as httpx opens it —
and shape their failures as the request's would be shaped, so the client's own classification
(``DeepSeekClient.transport_failure``) names them exactly as a turn does.
"""

from __future__ import annotations

import base64
import datetime
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
import httpx
from anyio.streams.tls import TLSAttribute, TLSStream
from cryptography import x509

from dsh.llm.network import FailureDetail, classify_transport

__all__ = [
    "TlsFacts",
    "all_attempts_failed",
    "certificate_facts",
    "connect_failure_word",
    "open_tls",
    "presented_chain",
    "shown_host",
    "unverified_certificate",
]

_CONNECT_ANSWER_LIMIT = 64 * 1024
MAX_PRESENTED = 10  # certificates of a presented chain kept (real chains hold 2 to 4)


def shown_host(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_failure_word(exc: BaseException) -> str:
    """A failed connect in a word or two: ``refused``, ``timed out``, else what the deepest OS error says."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if classify_transport(exc) == FailureDetail.REFUSED:
        return "refused"
    node: BaseException | None = exc
    reason = type(exc).__name__
    for _ in range(16):
        if node is None:
            break
        if isinstance(node, OSError) and node.strerror:
            reason = node.strerror
        node = node.__cause__ or node.__context__
    return reason


def all_attempts_failed(errors: list[Exception]) -> OSError:
    """The error anyio's ``connect_tcp`` raises when every address failed, built from each address's own
    (so the chain matches a request's without looking the name up again)."""
    roots = [error.__cause__ if isinstance(error.__cause__, OSError) else error for error in errors]
    if not roots:
        roots = [OSError("no address to connect to")]
    failure = OSError("All connection attempts failed")
    failure.__cause__ = roots[0] if len(roots) == 1 else ExceptionGroup("multiple connection attempts failed", roots)
    return failure


def certificate_facts(der: bytes | None) -> dict[str, Any]:
    """Subject, issuer, expiry and whole days left of a DER certificate (empty when there is none)."""
    if not der:
        return {}
    certificate = x509.load_der_x509_certificate(der)
    expires = certificate.not_valid_after_utc
    return {
        "subject": certificate.subject.rfc4514_string(),
        "issuer": certificate.issuer.rfc4514_string(),
        "expires": expires.isoformat(),
        "days_to_expiry": (expires - datetime.datetime.now(datetime.UTC)).days,
    }


@dataclass(frozen=True, slots=True)
class TlsFacts:
    version: str | None
    certificate: dict[str, Any]


async def _tunnel(stream: Any, host: str, port: int, proxy: str) -> None:
    """``CONNECT host:port`` as httpx sends it; a refusal raises the ``ProxyError`` httpx would raise."""
    parts = urlsplit(proxy)
    authority = shown_host(host, port)
    head = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        head.append(f"Proxy-Authorization: Basic {base64.b64encode(credentials).decode()}")
    await stream.send(("\r\n".join(head) + "\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += await stream.receive()
        if len(answer) > _CONNECT_ANSWER_LIMIT:
            raise httpx.ProxyError("the proxy's answer to CONNECT has no end")
    status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    code, _, reason = status_line.partition(" ")[2].partition(" ")
    if not code.isdigit() or not 200 <= int(code) < 300:
        raise httpx.ProxyError(f"{code} {reason}".strip())


@asynccontextmanager
async def _handshake(address: str, port: int, host: str, port_behind: int, context: ssl.SSLContext,
                     proxy: str | None) -> AsyncIterator[TLSStream]:
    raw = await anyio.connect_tcp(address, port)
    try:
        if proxy is not None:
            await _tunnel(raw, host, port_behind, proxy)
        stream = await TLSStream.wrap(raw, hostname=host, ssl_context=context, standard_compatible=False)
    except BaseException:
        await raw.aclose()
        raise
    try:
        yield stream
    finally:
        await stream.aclose()


async def open_tls(address: str, port: int, host: str, port_behind: int, context: ssl.SSLContext,
                   proxy: str | None = None) -> TlsFacts:
    """Connect to ``address:port`` (the endpoint's, or an http proxy's, then ``CONNECT host:port_behind``),
    shake hands for ``host`` with ``context``, and close. Raises what the handshake raised."""
    async with _handshake(address, port, host, port_behind, context, proxy) as stream:
        return TlsFacts(stream.extra(TLSAttribute.tls_version), certificate_facts(
            stream.extra(TLSAttribute.peer_certificate_binary)))


def _unverifying_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def unverified_certificate(address: str, port: int, host: str, port_behind: int,
                                 proxy: str | None = None) -> dict[str, Any]:
    """The certificate a server shows, read without verifying it (to say what verification refused)."""
    try:
        return (await open_tls(address, port, host, port_behind, _unverifying_context(), proxy)).certificate
    except Exception:
        return {}


def _chain_of(ssl_object: ssl.SSLObject) -> list[bytes]:
    """The certificates the peer sent, leaf first, as DER. Python 3.13 has ``get_unverified_chain()``;
    3.10-3.12 have the same method, unexported, on the ``_ssl`` object beneath (docs/reliability.md)."""
    if sys.version_info >= (3, 13):
        chain = list(ssl_object.get_unverified_chain() or [])
    else:
        chain = list(ssl_object._sslobj.get_unverified_chain() or [])  # type: ignore[attr-defined]
    der = [item if isinstance(item, bytes) else item.public_bytes(ssl._ssl.ENCODING_DER)  # type: ignore[attr-defined]
           for item in chain[:MAX_PRESENTED]]
    if not der:  # no chain accessor at all: the leaf alone
        leaf = ssl_object.getpeercert(binary_form=True)
        der = [leaf] if leaf else []
    return der


async def presented_chain(address: str, port: int, host: str, port_behind: int,
                          proxy: str | None = None) -> list[bytes]:
    """The chain a server presents for ``host``, leaf first, read without verifying it: the handshake that
    failed verification does not keep it (Python's ``ssl`` hands back only the error), so this is a second,
    unverified handshake over the same path (the same address, the same proxy tunnel). Raises what the
    connection raised."""
    async with _handshake(address, port, host, port_behind, _unverifying_context(), proxy) as stream:
        return _chain_of(stream.extra(TLSAttribute.ssl_object))
