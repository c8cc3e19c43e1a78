"""What ``web_fetch`` checks before it fetches and says when it fails (docs/tools.md, "The web: web_fetch and
web_search"): the URL, the host's addresses, and a failure's line and fix line.

Addresses: every address the host resolves to must be a public one (``ipaddress``'s ``is_global``); loopback,
private, link-local and the other special ranges are refused unless the host is in ``web_allow``. The literal in
the URL is checked, and so is what the name resolves to (a public-looking name that points at 127.0.0.1). A
direct fetch connects to the very address that was checked (:func:`resolve_checked`), so a name whose answer
changes between the check and the connection (DNS rebinding) cannot reach an address the check refused.

A failure reads like a turn's (docs/reliability.md, "Proxies, permanent failures, fix lines, TLS trust"): the
failure is classified by :func:`dsh.llm.network.classify_transport`, a refused certificate is read again and told
as it is (:func:`dsh.llm.certificate_truth.certificate_finding`, loaded by name on that failure only), and the
fix line names the setting to change: the URL, the proxy variable or config key, ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import importlib
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import anyio

from dsh.llm import error_chain
from dsh.llm.fix_lines import (
    FIX_CERTIFICATE,
    FIX_CERTIFICATE_EXPIRED,
    FIX_CERTIFICATE_NOT_YET_VALID,
    FIX_NAME_NOT_FOUND,
    FIX_PLAIN_HTTP,
    FIX_PROXY_AUTH,
    FIX_PROXY_NAME,
    FIX_PROXY_REFUSED,
    FIX_REFUSED,
)
from dsh.llm.network import CERTIFICATE_DETAILS, FailureDetail, classify_transport, httpx_errors
from dsh.llm.redact import redact_url

__all__ = ["Resolved", "clean_url", "failure_lines", "host_allowed", "proxy_answer_lines", "resolve_checked",
           "url_port"]

CERTIFICATE_PROBE_TIMEOUT = 5.0
_MAX_URL = 8192

# The fix lines, by what the failure was (dsh.llm.network.FailureDetail): the turn's (dsh.llm.fix_lines), with
# "the URL" as the setting to check, and these of web_fetch's own.
FIX_CERTIFICATE_NAME = "  fix: the certificate is for other host names — the server needs a certificate for {name}"
FIX_PROXY = "  fix: the proxy failed the request — check the proxy, or unset {source} (NO_PROXY lists hosts it skips)"
_THE_URL = "the URL"
_CERTIFICATE_FIXES: dict[str, str] = {
    FailureDetail.CERTIFICATE: FIX_CERTIFICATE,
    FailureDetail.CERTIFICATE_EXPIRED: FIX_CERTIFICATE_EXPIRED,
    FailureDetail.CERTIFICATE_NOT_YET_VALID: FIX_CERTIFICATE_NOT_YET_VALID,
}


def shown_host(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets (as dsh.llm.probe says it; that module loads httpx)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def clean_url(raw: object) -> tuple[str, str]:
    """``(url, host)`` of a web_fetch argument: http or https, a host, no credentials (they are dropped: web_fetch
    never sends a user name or password), no fragment. ValueError with the reason otherwise."""
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("url must be a non-empty string")
    if len(raw) > _MAX_URL:
        raise ValueError(f"url is longer than {_MAX_URL} characters")
    try:
        parts = urlsplit(raw.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"url is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("url must be an http:// or https:// URL")
    if not host:
        raise ValueError("url has no host")
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in raw.strip()):
        raise ValueError("url holds spaces or control characters")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path or "/", parts.query, "")), host.lower()


def host_allowed(host: str, allow: Sequence[str]) -> bool:
    """Whether ``host`` is in ``web_allow`` (host names compared without case and a trailing dot)."""
    wanted = host.lower().rstrip(".").strip("[]")
    return any(wanted == entry.lower().rstrip(".").strip("[]") for entry in allow)


def _kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    address = mapped or address
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    return "not a public address"


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a host resolved to here, checked: why it may not be fetched (``refusal``), or the address a direct
    fetch connects to (``address``; None for a literal host, or a name that did not resolve: ``failure``)."""

    refusal: str | None = None
    address: str | None = None
    failure: OSError | None = None


def url_port(url: str) -> int:
    """The port a URL names, or its scheme's."""
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


async def resolve_checked(host: str, port: int) -> Resolved:
    """``host``'s addresses, every one checked: the first refused one's reason, else the first address. A name
    that does not resolve here is no refusal (a proxy may know it): a direct fetch reports ``failure``."""
    literal = _literal(host)
    if literal is not None:
        addresses = [literal]
    else:  # outside the parse's except: the failure's chain is the look-up's alone
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            return Resolved(failure=exc)
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        if not (mapped or address).is_global:
            words = "is" if literal is not None else f"resolves to {address},"
            return Resolved(refusal=f"{host} {words} {_kind(address)}")
    return Resolved(address=None if literal is not None or not addresses else str(addresses[0]))


def _proxy_fix(detail: str | None, proxy: str, source: str) -> str:
    parts = urlsplit(proxy)
    host = parts.hostname or ""
    if detail == FailureDetail.PROXY_AUTH:
        return FIX_PROXY_AUTH.format(source=source)
    if detail == FailureDetail.REFUSED and host:
        return FIX_PROXY_REFUSED.format(host=shown_host(host, parts.port or 80), source=source)
    if detail == FailureDetail.NAME_NOT_FOUND and host:
        return FIX_PROXY_NAME.format(name=host, source=source)
    return FIX_PROXY.format(source=source)


def _fix(detail: str | None, url: str, proxy_failed: bool, proxy: str | None, source: str) -> str | None:
    if proxy_failed and proxy is not None:
        return _proxy_fix(detail, proxy, source)
    parts = urlsplit(url)
    host = parts.hostname or ""
    if detail in _CERTIFICATE_FIXES:
        return _CERTIFICATE_FIXES[detail]
    if detail == FailureDetail.CERTIFICATE_NAME:
        return FIX_CERTIFICATE_NAME.format(name=host)
    if detail == FailureDetail.REFUSED:
        return FIX_REFUSED.format(host=shown_host(host, url_port(url)), source=_THE_URL)
    if detail == FailureDetail.NAME_NOT_FOUND:
        return FIX_NAME_NOT_FOUND.format(name=host, source=_THE_URL)
    if detail == FailureDetail.PLAIN_HTTP and parts.scheme == "https":
        return FIX_PLAIN_HTTP.format(url=redact_url("http" + url[len("https"):]))
    return None


def _proxy_failed(exc: BaseException, detail: str | None, proxy: str | None) -> bool:
    """A proxy carries every connection: a refused or unknown host is the proxy's; TLS is the site's."""
    if proxy is None:
        return False
    if detail in (FailureDetail.REFUSED, FailureDetail.NAME_NOT_FOUND, FailureDetail.PROXY_AUTH,
                  FailureDetail.PROXY_DEPENDENCY):
        return True
    proxy_error = httpx_errors().ProxyError
    node: BaseException | None = exc
    for _ in range(64):
        if node is None:
            break
        if isinstance(node, proxy_error):
            return True
        node = node.__cause__ or node.__context__
    return False


def proxy_answer_lines(status: int, reason: str, *, url: str, proxy: str, source: str) -> str:
    """The failure line and fix line of an error the proxy answered itself (tinyproxy's 401, squid's 503)."""
    detail = FailureDetail.PROXY_AUTH if status in (401, 407) else None
    line = f"web_fetch {redact_url(url)} via proxy {redact_url(proxy)}: the proxy answered HTTP {status} {reason[:80]}"
    return f"{line}\n{_proxy_fix(detail, proxy, source)}"


async def failure_lines(exc: BaseException, *, url: str, proxy: str | None, proxy_source: str,
                        env: Mapping[str, str], address: str | None = None) -> tuple[str, BaseException]:
    """The failure line of a fetch that got no answer, its fix line below it when there is one, and the cause to
    keep for ``/why`` (the certificate finding above the raw chain, when the certificate was read again: at
    ``address``, the one the fetch was pinned to, when there was one)."""
    detail = classify_transport(exc)
    shown: BaseException = exc
    if detail in CERTIFICATE_DETAILS:
        # By name: it imports cryptography (~80 ms), which only a refused certificate needs (as dsh.llm.deepseek).
        truth = importlib.import_module("dsh.llm.certificate_truth")
        pinned = None if address is None else (address, url_port(url))
        finding = await truth.certificate_finding(exc, url=url, detail=detail, env=env, proxy=proxy,
                                                  timeout=CERTIFICATE_PROBE_TIMEOUT, address=pinned)
        if finding is not None:
            shown = finding
    proxy_failed = _proxy_failed(exc, detail, proxy)
    via = f" via proxy {redact_url(proxy)}" if proxy is not None else ""
    chain = error_chain(shown) or type(exc).__name__
    line = f"web_fetch {redact_url(url)}{via}: {chain}"
    fix = _fix(detail, url, proxy_failed, proxy, proxy_source)
    return (line if fix is None else f"{line}\n{fix}"), shown
