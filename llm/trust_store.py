"""Whether the trust a request verified against knows a certificate's issuer (docs/reliability.md, "Certificate
failures").

A request trusts ``SSL_CERT_FILE`` when it is set, else the operating system's store through truststore
(:func:`dsh.llm.network.ssl_context`). On Linux and the BSDs truststore hands verification to OpenSSL with the
system's default locations, so this module reads the same places truststore's ``_configure_context`` picks:
OpenSSL's default file and hashed directory (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` of the process move them),
else the first bundle of truststore's candidate list. On Windows it asks the ``ROOT`` and ``CA`` system stores
(:func:`ssl.enum_certificates`). On macOS the keychain cannot be listed cheaply: the answer is "cannot say".

"Knows the issuer" means: the store holds a certificate whose subject is that issuer's name *and* whose key
verifies the signature of the certificate that names it. A CA of that name whose key did not sign it is said
so apart (a forged or re-keyed CA). Loaded only when a certificate failed (it imports ``cryptography``).
"""

from __future__ import annotations

import base64
import os
import re
import ssl
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from cryptography import x509

__all__ = ["Knowledge", "TrustStore", "request_store"]

# truststore's own list (truststore/_openssl.py, after certifi-system-store): used when OpenSSL's defaults are empty.
_CA_FILE_CANDIDATES = (
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/cert.pem",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/ca-bundle.pem",
)
_HASHED_NAME = re.compile(r"^[0-9a-fA-F]{8}\.[0-9]$")
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)
# Bounds: a store is a few hundred certificates in well under 1 MB; anything far past that is not read.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024
MAX_FILES = 4096


class Knowledge(StrEnum):
    KNOWS = "knows"  # a CA of that name whose key signed the certificate
    NAME_ONLY = "name-only"  # a CA of that name, but its key did not sign the certificate
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class TrustStore:
    """Where a request's trust came from: ``label`` names it in the line, ``files`` are read to answer."""

    label: str  # "the OS trust store", "the bundle in SSL_CERT_FILE"
    files: tuple[str, ...] = ()
    windows: bool = False  # the Windows system stores, asked through ssl.enum_certificates
    listable: bool = True  # False: dsh cannot list it here (macOS)

    def knowledge(self, certificate: x509.Certificate) -> Knowledge | None:
        """Whether this store knows the issuer of ``certificate``; None when it cannot be listed."""
        if not self.listable:
            return None
        wanted = certificate.issuer.public_bytes()
        named = False
        for der in self._certificates():
            if wanted not in der:  # the subject's encoding is inside the DER: a cheap filter before parsing
                continue
            try:
                candidate = x509.load_der_x509_certificate(der)
            except ValueError:
                continue
            if candidate.subject != certificate.issuer:
                continue
            named = True
            try:
                certificate.verify_directly_issued_by(candidate)
            except Exception:  # InvalidSignature, ValueError (names), TypeError (key types)
                continue
            return Knowledge.KNOWS
        return Knowledge.NAME_ONLY if named else Knowledge.UNKNOWN

    def _certificates(self) -> Iterator[bytes]:
        if self.windows:
            for name in ("ROOT", "CA"):
                try:
                    found = ssl.enum_certificates(name)  # type: ignore[attr-defined]  # Windows only
                except (AttributeError, OSError, ssl.SSLError):
                    continue
                for data, encoding, _trust in found:
                    if encoding == "x509_asn":
                        yield data
            return
        budget = MAX_TOTAL_BYTES
        for path in self.files:
            data = _read(path, min(budget, MAX_FILE_BYTES))
            budget -= len(data)
            for block in _PEM.findall(data):
                try:
                    yield base64.b64decode(b"".join(block.split()), validate=True)
                except ValueError:
                    continue
            if budget <= 0:
                return


def _read(path: str, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _hashed_files(directory: str) -> list[str]:
    try:
        names = sorted(name for name in os.listdir(directory) if _HASHED_NAME.match(name))
    except OSError:
        return []
    return [os.path.join(directory, name) for name in names[:MAX_FILES]]


def _system_files() -> tuple[str, ...]:
    """The files OpenSSL verifies against under truststore, as truststore picks them."""
    defaults = ssl.get_default_verify_paths()
    hashed = _hashed_files(defaults.capath) if defaults.capath else []
    if defaults.cafile or hashed:
        return tuple(([defaults.cafile] if defaults.cafile else []) + hashed)
    return next(((path,) for path in _CA_FILE_CANDIDATES if os.path.isfile(path)), ())


def request_store(env: Mapping[str, str]) -> TrustStore:
    """The trust a request made with ``env`` verified against (the rule of :func:`dsh.llm.network.ssl_context`)."""
    cafile = env.get("SSL_CERT_FILE", "").strip()
    if cafile:
        return TrustStore("the bundle in SSL_CERT_FILE", (cafile,))
    if sys.platform == "darwin":
        return TrustStore("the OS trust store", listable=False)
    if sys.platform == "win32":
        return TrustStore("the OS trust store", windows=True)
    return TrustStore("the OS trust store", _system_files())
