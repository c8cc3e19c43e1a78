"""A certificate that failed verification, told as it is: who it was issued to, by whom, and whether the trust
the request used knows that issuer (docs/reliability.md, "Certificate failures").

Python's ``ssl`` keeps nothing of a failed handshake but the error (``verify_code``, ``verify_message``): the
chain the server sent is gone with the connection. So :func:`certificate_finding` reads it again in a second,
bounded handshake that does not verify, over the same path (the same host and port, the same http proxy
tunnel; :func:`dsh.llm.probe.presented_chain`), and :func:`certificate_sentence` puts the facts on one line.
Certificate text is the server's: every name shown is made printable and clipped here.

Loaded only when a certificate failed: it imports ``cryptography`` (~80 ms).
"""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import anyio
from cryptography import x509
from cryptography.x509.oid import NameOID

from dsh.llm.errors import Finding
from dsh.llm.network import FailureDetail, certificate_error, verify_result
from dsh.llm.probe import presented_chain, shown_host
from dsh.llm.trust_store import Knowledge, TrustStore, request_store

__all__ = ["NAME_LIMIT", "certificate_finding", "certificate_sentence", "shown_name"]

NAME_LIMIT = 64  # characters of one name from a certificate
_NAMES_SHOWN = 3  # host names of a certificate listed, at most
# OpenSSL's X509_V_ERR_* codes (ssl.SSLCertVerificationError.verify_code) that mean an issuer not trusted.
_TRUST_CODES = frozenset({2, 18, 19, 20, 21, 27, 28})


def _escaped(char: str) -> str:
    if char.isprintable() and char != '"':
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _printable(text: str) -> str:
    """``text`` with every character that is not printable (controls, bidi and zero-width marks), and ``"``,
    as a visible escape, never cut inside one; clipped to :data:`NAME_LIMIT` characters. A 10 KB name costs
    no more than its first part."""
    pieces = [_escaped(char) for char in text[: NAME_LIMIT + 1]]
    if len(text) <= NAME_LIMIT and sum(map(len, pieces)) <= NAME_LIMIT:
        return "".join(pieces)
    kept: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > NAME_LIMIT - 1:
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + "…"


def shown_name(name: x509.Name) -> str:
    """A certificate name as the line shows it: its common name, else its organization, else RFC 4514."""
    for oid in (NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME):
        for attribute in name.get_attributes_for_oid(oid):
            value = attribute.value
            text = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
            if text:
                return _printable(text)
    try:
        text = name.rfc4514_string()
    except Exception:  # an undecodable attribute
        text = ""
    return _printable(text) or "(no name)"


def _path(chain: Sequence[x509.Certificate]) -> list[x509.Certificate]:
    """The leaf, then each presented certificate that issued the one before: the top is the last one."""
    path = [chain[0]]
    while path[-1].issuer != path[-1].subject:
        issuer = next((c for c in chain if c.subject == path[-1].issuer and all(c is not p for p in path)), None)
        if issuer is None:
            break
        path.append(issuer)
    return path


def _host_names(certificate: x509.Certificate) -> tuple[list[str], list[str]]:
    """``(DNS names, IP addresses)`` of the subject alternative names."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (x509.ExtensionNotFound, ValueError):
        return [], []
    return ([str(n) for n in names.get_values_for_type(x509.DNSName)],
            [str(a) for a in names.get_values_for_type(x509.IPAddress)])


def _covers(certificate: x509.Certificate, host: str) -> bool:
    """Whether the certificate names ``host`` as a TLS client checks it (RFC 6125: one wildcard label)."""
    dns, ips = _host_names(certificate)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        return any(ipaddress.ip_address(ip) == address for ip in ips)
    if not dns and not ips:  # no SAN: the common name, as OpenSSL still checks it then
        dns = [str(a.value) for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    host = host.lower().rstrip(".")
    for name in (n.lower().rstrip(".") for n in dns):
        if name == host or (name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]):
            return True
    return False


def _listed(certificate: x509.Certificate) -> str:
    dns, ips = _host_names(certificate)
    names = dns + ips
    if not names:
        return "no host name"
    shown = ", ".join(f'"{_printable(name)}"' for name in names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def _day(moment: datetime.datetime) -> str:
    return moment.date().isoformat()


def _trust_clause(store: TrustStore, knowledge: Knowledge | None, noun: str) -> str | None:
    if knowledge == Knowledge.KNOWS:
        return f"{store.label} knows {noun}"
    if knowledge == Knowledge.NAME_ONLY:
        return f"{store.label} knows a CA of that name, but not the key that signed this certificate"
    if knowledge == Knowledge.UNKNOWN:
        return f"{store.label} does not know {noun}"
    return None  # the store cannot be listed here (macOS)


def certificate_sentence(
    chain_der: Sequence[bytes],
    *,
    host: str,
    port: int,
    detail: str | None,
    verify_code: int | None = None,
    verify_message: str | None = None,
    store: TrustStore,
    now: datetime.datetime | None = None,
) -> str | None:
    """The one line that says what was presented and why it was refused; None without a readable leaf.

    ``detail`` (a certificate :class:`FailureDetail`) and ``verify_code`` say what verification refused;
    everything else comes from the presented certificates and ``store``.
    """
    with warnings.catch_warnings():
        # cryptography warns (on stderr) about names past RFC 5280's lengths: the server's text, shown clipped
        warnings.simplefilter("ignore")
        return _sentence(chain_der, host, port, detail, verify_code, verify_message, store, now)


def _sentence(chain_der: Sequence[bytes], host: str, port: int, detail: str | None, verify_code: int | None,
              verify_message: str | None, store: TrustStore, now: datetime.datetime | None) -> str | None:
    chain: list[x509.Certificate] = []
    for der in chain_der:
        try:
            chain.append(x509.load_der_x509_certificate(der))
        except ValueError:
            continue
    if not chain:
        return None
    now = now or datetime.datetime.now(datetime.UTC)
    path = _path(chain)
    leaf, top = path[0], path[-1]
    subject, issuer = shown_name(leaf.subject), shown_name(top.issuer)
    names = f'subject "{subject}", issuer "{issuer}"'
    self_signed = len(path) == 1 and leaf.issuer == leaf.subject
    noun = "it" if self_signed else "that issuer"
    expired, early, covered = now > leaf.not_valid_after_utc, now < leaf.not_valid_before_utc, _covers(leaf, host)
    if detail == FailureDetail.CERTIFICATE_EXPIRED:
        first, expired = f"it expired on {_day(leaf.not_valid_after_utc)} ({names})", False
    elif detail == FailureDetail.CERTIFICATE_NOT_YET_VALID:
        first, early = f"it is not valid before {_day(leaf.not_valid_before_utc)} ({names})", False
    elif detail == FailureDetail.CERTIFICATE_NAME:
        first, covered = f"it is not valid for {host}: it names {_listed(leaf)} ({names})", True
    elif verify_code is None or verify_code in _TRUST_CODES:
        first = f'unknown issuer "{issuer}" (subject "{subject}")'
        if self_signed:
            first = f'self-signed certificate "{subject}"'
    else:  # another refusal (a bad signature, an unsuitable CA): OpenSSL's words for it
        first = f"{_printable(verify_message or 'verification failed')} ({names})"
    parts = [first]
    clause = _trust_clause(store, store.knowledge(top), noun)
    if clause:
        parts.append(clause)
    if expired:
        parts.append(f"it also expired on {_day(leaf.not_valid_after_utc)}")
    if early:
        parts.append(f"it is also not valid before {_day(leaf.not_valid_before_utc)}")
    if not covered:
        parts.append(f"it is also not valid for {host} (it names {_listed(leaf)})")
    return f"the certificate presented for {shown_host(host, port)} was not accepted: " + "; ".join(parts)


async def certificate_finding(
    exc: BaseException,
    *,
    url: str,
    detail: str | None,
    env: Mapping[str, str],
    timeout: float,
    proxy: str | None = None,
    address: tuple[str, int] | None = None,
) -> Finding | None:
    """A :class:`Finding` naming the certificate ``url``'s server presents, with ``exc`` beneath it; None when
    it cannot be read again (the probe failed or timed out, a SOCKS or https proxy carries the request).

    ``address``: connect there instead of resolving ``url``'s host (``dsh doctor``, which has just done so).
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    if proxy is not None:
        tunnel = urlsplit(proxy)
        if tunnel.scheme != "http":
            return None  # only an http proxy's CONNECT is spoken here (dsh.llm.probe)
        target = (tunnel.hostname or "", tunnel.port or 80)
    else:
        target = address or (host, port)
    chain: list[bytes] = []
    with anyio.move_on_after(timeout):
        try:
            chain = await presented_chain(*target, host, port, proxy)
        except Exception:
            return None
    refusal = certificate_error(exc)
    code, message = verify_result(refusal) if refusal is not None else (None, None)
    store = request_store(env)
    try:
        text = await anyio.to_thread.run_sync(lambda: certificate_sentence(
            chain, host=host, port=port, detail=detail, verify_code=code, verify_message=message, store=store))
    except Exception:  # a certificate cryptography cannot take apart: the raw failure stays the line
        return None
    if text is None:
        return None
    finding = Finding(text)
    finding.__cause__ = exc
    return finding

