"""The fault server's TLS certificates: fresh and truly self-signed, for 127.0.0.1, ::1 and localhost; or a
leaf issued by a test "corporate" root CA (:func:`corporate_chain`), as a TLS-intercepting proxy presents one.

Made with ``cryptography`` (a dependency: the demo's bad-cert scenario needs it). Its import costs ~80 ms,
so :mod:`dsh.llm.loopback.fault_server` loads this module only when a TLS listener is asked for.
"""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CORPORATE_ROOT", "ServedIdentity", "corporate_chain", "self_signed_certificate"]

CORPORATE_ROOT = "dsh test corporate root CA"


def self_signed_certificate(address: str) -> tuple[bytes, bytes]:
    """A certificate for ``address``, ::1 and localhost, signed by its own key: ``(PEM cert, PEM key)``.

    Not a trustme leaf: a CA-issued leaf makes clients say "unable to get local issuer certificate",
    while users pointing dsh at a self-signed server see "self-signed certificate", which is the failure
    worth reproducing.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dsh fault server (self-signed)")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address(address)),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert_pem, key_pem


@dataclass(frozen=True, slots=True)
class ServedIdentity:
    """What a TLS listener presents: ``chain_pem`` (the leaf first, then any CA sent with it) and its key;
    ``ca_pem`` is the root a client must trust to accept it."""

    chain_pem: bytes
    key_pem: bytes
    ca_pem: bytes


def _name(text: str) -> x509.Name:
    # Unvalidated: a test may give a name far past the 64 characters RFC 5280 allows (a hostile server does);
    # cryptography would warn about it on every use.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text, _validate=False)])


def corporate_chain(
    address: str = "127.0.0.1",
    *,
    root_name: str = CORPORATE_ROOT,
    subject: str | None = None,
    names: Sequence[str] | None = None,
    valid_days: tuple[int, int] = (-1, 2),
    send_root: bool = False,
) -> ServedIdentity:
    """A root CA named ``root_name`` and a leaf it issued for ``names`` (IP addresses or DNS names; default
    ``address``) with common name ``subject`` (default the first name), valid from ``valid_days[0]`` to
    ``valid_days[1]`` days from now (``(-3, -1)``: expired). ``send_root``: the listener sends the root too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _corporate_chain(address, root_name, subject, names, valid_days, send_root)


def _corporate_chain(address: str, root_name: str, subject: str | None, names: Sequence[str] | None,
                     valid_days: tuple[int, int], send_root: bool) -> ServedIdentity:
    now = datetime.datetime.now(datetime.UTC)
    root_key = ec.generate_private_key(ec.SECP256R1())
    root = (
        x509.CertificateBuilder()
        .subject_name(_name(root_name))
        .issuer_name(_name(root_name))
        .public_key(root_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .sign(root_key, hashes.SHA256())
    )
    names = list(names or [address])
    alternatives: list[x509.GeneralName] = []
    for entry in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            alternatives.append(x509.DNSName(entry))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(subject if subject is not None else names[0]))
        .issuer_name(root.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=valid_days[0]))
        .not_valid_after(now + datetime.timedelta(days=valid_days[1]))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(root_key, hashes.SHA256())
    )
    root_pem = root.public_bytes(serialization.Encoding.PEM)
    chain_pem = leaf.public_bytes(serialization.Encoding.PEM) + (root_pem if send_root else b"")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return ServedIdentity(chain_pem, key_pem, root_pem)
