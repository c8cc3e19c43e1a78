"""Which proxy carries a request, which TLS trust verifies it, and which transport failures are permanent.

Proxies are picked the way httpx picks them from the environment (``<scheme>_proxy``, then
``all_proxy``, lowercase before uppercase, ``no_proxy`` honoured); the client then passes the one it
found to httpx explicitly, so the proxy it names in messages is the one that carried the request.
TLS verifies against the operating system's trust store (``truststore``, as pip does); ``SSL_CERT_FILE``
wins when set. See docs/reliability.md.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from dsh.llm.failure_chain import failure_fields

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CERTIFICATE_DETAILS",
    "FailureDetail",
    "HttpxErrors",
    "certificate_error",
    "classify_transport",
    "environment_proxy",
    "no_proxy",
    "ssl_context",
    "verify_result",
]


class FailureDetail(StrEnum):
    """What a failure was, below its code: the fix line routes on it (never on message text). Transport
    failures by kind; ``UPSTREAM_AUTH``: a gateway accepted the key, and its own upstream refused the
    gateway's credential (an AUTH that the user's key cannot fix); ``UPSTREAM_QUOTA``: the same for quota
    or credit (a QUOTA that the user's own account cannot fix); ``NOTHING_TO_COMPACT``: a CONTEXT_WINDOW_EXCEEDED
    whose request held nothing to compact.

    Members are ``str``: they compare, hash and serialize (JSON, session log) as their values."""

    REFUSED = "refused"
    NAME_NOT_FOUND = "name-not-found"  # the resolver's answer: no such name (NXDOMAIN, EAI_NONAME)
    NAME_UNRESOLVED = "name-unresolved"  # no answer: a resolver failure, a timeout, no network (transient)
    PLAIN_HTTP = "plain-http"
    CERTIFICATE = "certificate"  # not trusted: an unknown issuer, a self-signed certificate
    CERTIFICATE_NAME = "certificate-name"  # trusted, but issued for other host names
    CERTIFICATE_EXPIRED = "certificate-expired"
    CERTIFICATE_NOT_YET_VALID = "certificate-not-yet-valid"
    INVALID_URL = "invalid-url"
    PROXY_AUTH = "proxy-auth"
    PROXY_DEPENDENCY = "proxy-dependency"
    UPSTREAM_AUTH = "upstream-auth"
    UPSTREAM_QUOTA = "upstream-quota"
    CONCURRENCY_CAP = "concurrency-cap"  # a deepseek-dialect 429: the account's concurrent requests passed its cap
    # A context overflow with nothing before the turn's prompt but the system prompt (the agent says so, not the
    # server): compacting or starting over cannot make that request shorter.
    NOTHING_TO_COMPACT = "nothing-to-compact"


# Permanent: retrying cannot change the answer (docs/contracts.md). Refused, reset, timeouts and a name that could
# not be resolved stay transient.
PERMANENT = frozenset(
    {
        FailureDetail.NAME_NOT_FOUND,
        FailureDetail.PLAIN_HTTP,
        FailureDetail.CERTIFICATE,
        FailureDetail.CERTIFICATE_NAME,
        FailureDetail.CERTIFICATE_EXPIRED,
        FailureDetail.CERTIFICATE_NOT_YET_VALID,
        FailureDetail.INVALID_URL,
        FailureDetail.PROXY_AUTH,
        FailureDetail.PROXY_DEPENDENCY,
    }
)

# The certificate failures, and OpenSSL's X509_V_ERR_* codes (``SSLCertVerificationError.verify_code``) that
# are not a trust failure: 62 host name, 63 e-mail, 64 IP address mismatch; 10 expired; 9 not yet valid.
CERTIFICATE_DETAILS = frozenset({FailureDetail.CERTIFICATE, FailureDetail.CERTIFICATE_NAME,
                                 FailureDetail.CERTIFICATE_EXPIRED, FailureDetail.CERTIFICATE_NOT_YET_VALID})
_VERIFY_CODE_DETAILS = {
    62: FailureDetail.CERTIFICATE_NAME,
    63: FailureDetail.CERTIFICATE_NAME,
    64: FailureDetail.CERTIFICATE_NAME,
    10: FailureDetail.CERTIFICATE_EXPIRED,
    9: FailureDetail.CERTIFICATE_NOT_YET_VALID,
}

# EAI_NODATA is glibc's (macOS has only EAI_NONAME), hence getattr.
_NAME_NOT_FOUND_ERRNOS = frozenset({socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)})
_NAME_NOT_FOUND_TEXT = ("Name or service not known", "No address associated with hostname", "nodename nor servname")


def environment_proxy(url: str, env: Mapping[str, str]) -> tuple[str, str] | None:
    """``(proxy_url, variable)`` that httpx would use for ``url`` from ``env``, or None."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return None  # the request itself fails with the URL's own error
    if _bypassed(host, port, no_proxy(env)):
        return None
    for name in (f"{parts.scheme}_proxy", "all_proxy"):
        for variable in (name, name.upper()):
            value = env.get(variable, "").strip()
            if value:
                if "://" not in value:
                    value = "http://" + value  # httpx's reading of a bare host:port
                return value, variable
    return None


def no_proxy(env: Mapping[str, str]) -> str:
    """The hosts ``env`` sends around any proxy: ``no_proxy``, else ``NO_PROXY`` (as httpx reads them)."""
    return env.get("no_proxy", "") or env.get("NO_PROXY", "")


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    for entry in (item.strip().lower() for item in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        name, _, entry_port = entry.partition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and port is not None and entry_port != str(port):
            continue
        name = name.lstrip(".")
        if host.lower() == name or host.lower().endswith("." + name):
            return True
    return False


def ssl_context(env: Mapping[str, str]) -> ssl.SSLContext:
    """``SSL_CERT_FILE`` when set, else the operating system's trust store."""
    cafile = env.get("SSL_CERT_FILE", "").strip()
    if cafile:
        return ssl.create_default_context(cafile=cafile)
    try:
        import truststore  # the OS trust store: loaded with the first client's SSL context
    except ImportError:  # pragma: no cover - a dependency; the stdlib default is the fallback
        return ssl.create_default_context()
    return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 64 and all(current is not node for node in seen):
        seen.append(current)
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            current = current.exceptions[0]
        elif current.__cause__ is not None:
            current = current.__cause__
        elif current.__context__ is not None:
            current = current.__context__
        elif current.args and isinstance(current.args[0], BaseException):
            current = current.args[0]
        else:
            current = None
    return seen


def certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure beneath ``exc``, if that is what it is."""
    return next((node for node in _chain(exc) if isinstance(node, ssl.SSLCertVerificationError)), None)


def verify_result(refusal: ssl.SSLCertVerificationError) -> tuple[int | None, str | None]:
    """OpenSSL's verify code (``X509_V_ERR_*``) and message for a refused certificate, each None when not set."""
    fields = failure_fields(refusal)
    code, message = fields.get("verify_code"), fields.get("verify_message")
    return code if isinstance(code, int) else None, message if isinstance(message, str) else None


class HttpxErrors(NamedTuple):
    """httpx's exception classes that name a failure before any response."""

    TransportError: type[httpx.TransportError]
    ProxyError: type[httpx.ProxyError]
    UnsupportedProtocol: type[httpx.UnsupportedProtocol]
    InvalidURL: type[httpx.InvalidURL]


def httpx_errors() -> HttpxErrors:
    """httpx's exception classes, for code that runs once a request was tried: httpx is loaded by then, with the
    first request (docs/architecture.md, "Start-up and lazy imports")."""
    import httpx  # loaded already: see above

    return HttpxErrors(httpx.TransportError, httpx.ProxyError, httpx.UnsupportedProtocol, httpx.InvalidURL)


def classify_transport(exc: BaseException) -> str | None:
    """The :class:`FailureDetail` of a failure that happened before any response, or None."""
    errors = httpx_errors()
    for node in _chain(exc):
        if isinstance(node, ssl.SSLCertVerificationError):
            # OpenSSL's code; truststore on macOS and Windows sets none: a trust failure then.
            code, _ = verify_result(node)
            return _VERIFY_CODE_DETAILS.get(code, FailureDetail.CERTIFICATE) if code is not None else (
                FailureDetail.CERTIFICATE)
        if isinstance(node, ssl.SSLError) and "WRONG_VERSION_NUMBER" in (str(node.reason or "") + str(node)):
            return FailureDetail.PLAIN_HTTP
        if isinstance(node, socket.gaierror):
            if node.errno in _NAME_NOT_FOUND_ERRNOS or any(text in str(node) for text in _NAME_NOT_FOUND_TEXT):
                return FailureDetail.NAME_NOT_FOUND
            # EAI_AGAIN ("Temporary failure in name resolution": SERVFAIL, no answer, no network), EAI_FAIL: the
            # name was not found not to exist, so it is not blamed on a setting and stays transient.
            return FailureDetail.NAME_UNRESOLVED
        if isinstance(node, ConnectionRefusedError) or (
            isinstance(node, OSError) and node.errno == errno.ECONNREFUSED
        ):
            return FailureDetail.REFUSED
        if isinstance(node, OverflowError):
            return FailureDetail.INVALID_URL  # a port outside 0-65535 reaching getaddrinfo
        if isinstance(node, ImportError):
            return FailureDetail.PROXY_DEPENDENCY  # httpx: a SOCKS proxy without socksio
        if isinstance(node, errors.UnsupportedProtocol | errors.InvalidURL):
            return FailureDetail.INVALID_URL
        if isinstance(node, errors.ProxyError) and str(node)[:4] in ("407 ", "401 "):  # tinyproxy says 401
            return FailureDetail.PROXY_AUTH
    return None
