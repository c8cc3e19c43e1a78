"""The ``--record`` transport: httpx's own transport with every exchange written to a :class:`TraceWriter`.

Kept apart from :mod:`dsh.llm.wire_trace` because it is built on httpx: the client imports it when its
first request is made (docs/record-replay.md), and the trace's file checks stay free of httpx.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx

from dsh.llm.failure_chain import EXCHANGE_EXTENSION, UNTAPPED_EXTENSION
from dsh.llm.wire_trace import BodyTee, TraceWriter

__all__ = ["recording_transport"]


def recording_transport(inner: httpx.AsyncBaseTransport, trace: TraceWriter) -> httpx.AsyncBaseTransport:
    """``inner`` with every exchange written to ``trace`` as it happens."""
    return _Recording(inner, trace)


class _TeeStream(httpx.AsyncByteStream):
    """A response body that tees each chunk to the trace and records how the body ended, once."""

    def __init__(self, stream: httpx.AsyncByteStream, tee: BodyTee, trace: TraceWriter) -> None:
        self._stream = stream
        self._tee = tee
        self._trace = trace
        self._ended = False

    def _end(self, how: str, **fields: Any) -> None:
        if not self._ended:
            self._ended = True
            self._tee.flush()
            note = "undecodable" if self._tee.undecodable else "cut" if self._tee.cut else None
            self._trace.end(self._tee.n, time.monotonic() - self._tee.start, how, note=note, **fields)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._tee.feed(chunk)
                yield chunk
        except Exception as exc:
            self._end("error", where="body", error=exc)
            raise
        self._end("complete")

    async def aclose(self) -> None:
        self._end("closed")  # dsh stopped reading first (a deadline, a cancel, [DONE] drained)
        await self._stream.aclose()


class _Recording(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, trace: TraceWriter) -> None:
        self._inner = inner
        self._trace = trace

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.extensions.get(UNTAPPED_EXTENSION):
            return await self._inner.handle_async_request(request)
        trace = self._trace
        n = trace.next_exchange()
        request.extensions[EXCHANGE_EXTENSION] = n  # the client adds a finding to this exchange
        start = time.monotonic()
        try:
            body = request.content
        except httpx.RequestNotRead:  # a streamed upload (dsh sends bytes): not recorded
            body = b""
        trace.request(n, request.method, str(request.url), request.url.path, _pairs(request.headers.raw), body)
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else None
            trace.end(n, time.monotonic() - start, "error" if error else "closed", where=_phase(exc), error=error)
            raise
        return self._teed(response, n, start)

    def _teed(self, response: httpx.Response, n: int, start: float) -> httpx.Response:
        """``response`` recorded (status and headers now, the body as it is read); a compressed body is
        recorded inflated, so its ``content-encoding`` is left out of the recorded headers."""
        headers = _pairs(response.headers.raw)
        encoding = response.headers.get("content-encoding", "").strip().lower() or None
        decoded = encoding if encoding in ("gzip", "x-gzip", "deflate") else None
        if decoded:
            headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        self._trace.response(n, time.monotonic() - start, response.status_code, headers, decoded)
        tee = BodyTee(self._trace, n, start, "gzip" if decoded == "x-gzip" else decoded)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_TeeStream(response.stream, tee, self._trace), extensions=response.extensions)

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._trace.close()


def _phase(exc: BaseException) -> str:
    """Where a failure before any response struck: ``connect`` (TCP, TLS, proxy), ``send`` or ``headers``."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.ProxyError | httpx.PoolTimeout):
        return "connect"
    if isinstance(exc, httpx.WriteError | httpx.WriteTimeout):
        return "send"
    return "headers"  # the request went out; the answer's status line and headers did not come


def _pairs(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
