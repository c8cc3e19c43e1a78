"""One GET of ``web_fetch``, over dsh's own connection pool (docs/tools.md, "The web: web_fetch and web_search").

The pool is the model client's (:func:`dsh.llm.http_transport.open_http_transport`): the proxy dsh picked, and
the trust store of ``SSL_CERT_FILE`` or the system's; httpx reads neither from the environment itself. Each
request gets a new client, so no cookie a server sets is ever sent back; redirects are not followed here (the
tool asks before another host). The body is read raw and inflated here, in bounded pieces, so a compressed
bomb never costs more than the limit.

Imports httpx: ``dsh.agent_loop.tools.web`` loads this module by name on the first fetch, so building the
tools never does (docs/architecture.md, "Start-up and lazy imports").
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from dsh.llm.http_transport import open_http_transport

__all__ = ["Answer", "get_once"]

_READ_CHUNK = 64 * 1024
_PROXY_HEADERS = ("server", "via", "proxy-authenticate", "x-squid-error")


@dataclass(frozen=True, slots=True)
class Answer:
    """What one GET brought back: status, the headers web_fetch reads, and at most ``limit`` bytes of body."""

    status: int
    reason: str
    content_type: str
    location: str | None
    body: bytes
    cut: bool  # the body went on past the limit: the rest was not read
    headers: dict[str, str]  # those that say a proxy answered (dsh.llm.http_status.proxy_answered reads them)


class _Inflater:
    """``Content-Encoding`` undone in bounded steps: identity as is, gzip and deflate with zlib."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._inflate: zlib._Decompress | None = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            self._inflate = zlib.decompressobj(47)  # 32 + 15: a gzip or a zlib header, told apart by zlib
        else:
            raise ValueError(f"the server sent Content-Encoding {encoding[:40]!r}, which web_fetch does not decode")

    def piece(self, chunk: bytes, room: int) -> tuple[bytes, bool]:
        """At most ``room`` bytes of ``chunk`` decoded, and whether more would have followed."""
        if self._inflate is None:
            return chunk[:room], len(chunk) > room
        out = self._inflate.decompress(chunk, room + 1)
        return out[:room], len(out) > room or bool(self._inflate.unconsumed_tail)


async def get_once(url: str, *, proxy: str | None, connect_to: str | None, env: Mapping[str, str],
                   headers: Mapping[str, str], connect_timeout: float, read_timeout: float, limit: int) -> Answer:
    """GET ``url`` through ``proxy`` (None: directly) with exactly ``headers``; at most ``limit`` body bytes.

    ``connect_to``: the address to connect to instead of resolving the URL's host again (the one web_guard
    checked); the Host header and TLS's server name and certificate check stay the URL's host."""
    transport = open_http_transport(proxy=proxy, env=env, replaying=False, tap=None)
    timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
    target = httpx.URL(url)
    async with httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False,
                                 trust_env=False) as client:
        pinned = {} if connect_to is None else {"sni_hostname": target.host}
        request = client.build_request("GET", target if connect_to is None else target.copy_with(host=connect_to),
                                       extensions=pinned)
        request.headers.clear()  # httpx's defaults (its own Accept-Encoding, User-Agent) are not what is sent
        request.headers.update({"Host": target.netloc.decode("ascii"), **headers})
        response = await client.send(request, stream=True)
        try:
            inflater = _Inflater(response.headers.get("content-encoding", ""))
            body = bytearray()
            cut = False
            async for chunk in response.aiter_raw(_READ_CHUNK):
                piece, more = inflater.piece(chunk, limit - len(body))
                body += piece
                if more:
                    cut = True
                    break
        finally:
            await response.aclose()
    told = {name: response.headers[name] for name in _PROXY_HEADERS if name in response.headers}
    return Answer(response.status_code, response.reason_phrase, response.headers.get("content-type", ""),
                  response.headers.get("location"), bytes(body), cut, told)
