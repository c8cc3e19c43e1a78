"""``--replay``'s transport: a failure recorded before any response is raised again, as the live run met it.

It marks each request (``x-dsh-replay``) to the embedded replay server, which answers an exchange that failed
before any response with the recorded cause chain (dsh.llm.failure_chain) instead of a reset. Here that chain is
rebuilt, only ever from the closed list of classes :data:`~dsh.llm.failure_chain.ALLOWED`, and raised where httpx's
own transport would have raised it, so the client classifies it, names it and fixes it exactly as live. A
certificate failure's recorded finding rides on the request (``FINDING_EXTENSION``): a replay never probes a server
(docs/record-replay.md, "How the replay answers").

Built on httpx: the client imports it when a replay makes its first request.
"""

from __future__ import annotations

import builtins
import json
import socket
import ssl
from types import ModuleType
from typing import Any

import anyio
import httpcore
import httpx

from dsh.llm.failure_chain import (
    ALLOWED,
    FIELDS,
    FINDING_EXTENSION,
    REPLAY_FAILURE_HEADER,
    REPLAY_REQUEST_HEADER,
    check_chain,
    rebuildable,
)

__all__ = ["rebuild_chain", "replaying_transport"]

_MARKER_LIMIT = 1 << 20  # bytes of a marker body read: a checked chain is far smaller
# Where each allowed name's class is looked up: these modules only, and only names in ALLOWED.
_MODULES: dict[str, ModuleType] = {"": builtins, "httpx": httpx, "httpcore": httpcore, "anyio": anyio,
                                   "ssl": ssl, "socket": socket}


def replaying_transport(inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """``inner`` with its requests marked, and a recorded failure raised again (see the module docstring)."""
    return _Replaying(inner)


class _Replaying(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers[REPLAY_REQUEST_HEADER] = "1"
        response = await self._inner.handle_async_request(request)
        if response.headers.get(REPLAY_FAILURE_HEADER) != "1":
            return response
        body = bytearray()
        try:
            async for chunk in response.stream:  # type: ignore[union-attr]
                body += chunk
                if len(body) > _MARKER_LIMIT:
                    break
        finally:
            await response.aclose()
        raise _failure(bytes(body), request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _failure(body: bytes, request: httpx.Request) -> Exception:
    """The exception a marker body describes; a plain connect error when it cannot be rebuilt. The finding recorded
    with it (a certificate's issuer and subject) goes into the request's extensions."""
    try:
        marker = json.loads(body)
    except (ValueError, RecursionError):
        marker = None
    chain = marker.get("chain") if isinstance(marker, dict) else None
    exc = rebuild_chain(chain) if check_chain(chain) is None else None
    if exc is None:
        return httpx.ConnectError("the replay could not rebuild the recorded failure")
    finding = marker.get("finding") if isinstance(marker, dict) else None
    if isinstance(finding, str) and finding:
        request.extensions[FINDING_EXTENSION] = finding
    return exc


def rebuild_chain(chain: Any) -> Exception | None:
    """The exceptions of a checked ``chain`` (top first), each ``__cause__`` the next; None if any cannot be built."""
    if not isinstance(chain, list) or not chain or not rebuildable(chain):
        return None
    beneath: Exception | None = None
    for link in reversed(chain):
        built = _link(link)
        if built is None:
            return None
        built.__cause__ = beneath
        beneath = built
    return beneath


def _class(name: str) -> type[Exception] | None:
    if name not in ALLOWED:
        return None
    module, _, attribute = name.rpartition(".")
    # By name, as the module offers it: anyio hands out its exceptions through its module __getattr__.
    value = getattr(_MODULES[module], attribute, None) if module in _MODULES else None
    return value if isinstance(value, type) and issubclass(value, Exception) else None


def _link(link: dict[str, Any]) -> Exception | None:
    cls, text = _class(link["class"]), link["text"]
    if cls is None:
        return None
    try:
        if link.get("members"):
            members = [rebuild_chain(member) for member in link["members"]]
            if not issubclass(cls, ExceptionGroup) or any(m is None for m in members):
                return None
            return ExceptionGroup(text, [m for m in members if m is not None])
        built = cls(text)
    except Exception:
        return None
    for key in FIELDS:
        if key in link:
            setattr(built, key, link[key])
    if isinstance(built, OSError) and str(built) != text:
        # OSError shows "[Errno N] strerror" when both are set, ssl's errors their strerror: keep the recorded text.
        built.strerror = text if isinstance(built, ssl.SSLError) else None
    return built
