"""One POST to DeepSeek's Search or Fetch API, over dsh's own connection pool (docs/endpoints.md, "DeepSeek: web
search and fetch").

The pool is the model client's (:func:`dsh.llm.http_transport.open_http_transport`): the endpoint's proxy and the
trust store of ``SSL_CERT_FILE`` or the system's. The key goes in the ``Authorization`` header of this one request,
to the URL the caller built from the configured base URL's origin; redirects are never followed, so it cannot be
carried to another host. At most ``limit`` bytes of the answer are read.

Imports httpx: ``dsh.agent_loop.tools.web_deepseek`` loads this module by name on the first call, so building the
tools never does (docs/architecture.md, "Start-up and lazy imports").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from dsh.llm.http_transport import open_http_transport

__all__ = ["ApiAnswer", "post_json"]

_READ_CHUNK = 64 * 1024
_KEPT_HEADERS = ("server", "via", "proxy-authenticate", "x-squid-error", "x-request-id", "x-deepseek-request-id",
                 "retry-after")


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """What one POST brought back: status, a few headers, at most ``limit`` bytes of body."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    cut: bool  # the body went on past the limit


async def post_json(url: str, payload: Mapping[str, Any], *, api_key: str | None, proxy: str | None,
                    env: Mapping[str, str], user_agent: str, connect_timeout: float, read_timeout: float,
                    limit: int) -> ApiAnswer:
    """POST ``payload`` as JSON to ``url`` with the key as a Bearer token; no redirect followed."""
    transport = open_http_transport(proxy=proxy, env=env, replaying=False, tap=None)
    timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": user_agent}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    async with httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False,
                                 trust_env=False) as client:
        request = client.build_request("POST", url, content=json.dumps(payload).encode(), headers=headers)
        response = await client.send(request, stream=True)
        try:
            body = bytearray()
            cut = False
            async for chunk in response.aiter_bytes(_READ_CHUNK):
                body += chunk[:limit - len(body)]
                if len(body) >= limit:
                    cut = True
                    break
        finally:
            await response.aclose()
    kept = {name: response.headers[name] for name in _KEPT_HEADERS if name in response.headers}
    return ApiAnswer(response.status_code, response.reason_phrase, kept, bytes(body), cut)
