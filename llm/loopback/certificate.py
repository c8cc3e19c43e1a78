"""The fault server's TLS certificate: fresh and truly self-signed, for 127.0.0.1, ::1 and localhost.

Made with ``cryptography`` (a dependency: the demo's bad-cert scenario needs it). Its import costs ~80 ms,
so :mod:`dsh.llm.loopback.fault_server` loads this module only when a TLS listener is asked for.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["self_signed_certificate"]


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
