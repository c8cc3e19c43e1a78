"""The ``/chat/completions`` streaming client and its error table (docs/architecture.md, "Errors").

DeepSeek's API by default; any OpenAI-compatible server otherwise. Every message names the endpoint as
:mod:`dsh.llm.endpoint` knows it: by its host, or by what its answers' headers say about it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Unpack

import anyio
import anyio.lowlevel

from dsh.llm._version import __version__
from dsh.llm.client_settings import ClientSettings, TransportOptions
from dsh.llm.codes import ErrorCode
from dsh.llm.defaults import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    DEFAULT_STREAM_IDLE_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT,
)
from dsh.llm.endpoint import Endpoint, default_dialect, endpoint_for_url
from dsh.llm.errors import Finding, LlmError
from dsh.llm.events import ChatRequest, StreamEvent
from dsh.llm.failure_chain import EXCHANGE_EXTENSION, FINDING_EXTENSION, UNTAPPED_EXTENSION
from dsh.llm.http_status import (
    code_for_status,
    error_kinds,
    provider_message,
    proxy_answered,
    request_id,
    retry_after_seconds,
    upstream_detail,
)
from dsh.llm.network import CERTIFICATE_DETAILS, PERMANENT, FailureDetail, classify_transport, httpx_errors
from dsh.llm.redact import redact_text
from dsh.llm.request_body import encoded_body
from dsh.llm.request_gate import RequestGate, concurrency_cap_message, is_concurrency_cap
from dsh.llm.stream_decoder import PAYLOAD_PREVIEW, BadEncoding, Inflater, StreamDecoder, malformed_payload
from dsh.llm.text import scrub_surrogates
from dsh.llm.transport import Transport, open_transport

if TYPE_CHECKING:
    # httpx is imported when the first request is made: its import and the client's SSL context
    # cost ~100 ms, which the first prompt should not wait for (the agent and this client are built
    # behind it: tests/repl/test_first_prompt_imports.py). ``_request`` imports it; what runs after a request
    # reads its exception classes from dsh.llm.network.httpx_errors.
    import httpx

    from dsh.llm.exchange_ring import ExchangeRing

__all__ = ["DeepSeekClient", "StreamTrace", "open_client"]

_ERROR_BODY_LIMIT = 64 * 1024
_ACCEPT_ENCODING = "gzip, deflate"  # what Inflater decodes; a server that sends anything else is refused
_JSON_BODY_LIMIT = 1024 * 1024  # a GET answer (``/models``, ``/user/balance``) larger than this is not one
# DeepSeek's chat prefix completion (beta): base_url https://api.deepseek.com/beta, the last message an assistant
# ``prefix`` (api-docs.deepseek.com, "Chat Prefix Completion (Beta)").
PREFIX_COMPLETION_PATH = "/beta/chat/completions"
CERTIFICATE_PROBE_TIMEOUT = 5.0  # seconds (at most the connect timeout) to read a refused certificate again


@dataclass(slots=True)
class StreamTrace:
    """What ``dsh doctor`` wants to see of one stream that its events do not show (docs/doctor.md).

    Times are ``anyio.current_time()`` readings; None until it happened.
    """

    started_at: float | None = None  # the request was ready to send
    headers_at: float | None = None  # the response's status line and headers arrived
    done: bool = False  # ``data: [DONE]`` ended the stream (not only a finish reason and a clean close)


def _nodes(exc: BaseException) -> list[BaseException]:
    nodes: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(nodes) < 64:
        nodes.append(current)
        current = current.__cause__ or current.__context__
    return nodes


def _with_recorded_finding(error: LlmError, cause: BaseException, request: httpx.Request | None) -> LlmError:
    """``error`` with the finding its recording holds beneath it, as the live run had it (the replay's transport put
    it on the failed ``request``: dsh.llm.replay_transport)."""
    text = request.extensions.get(FINDING_EXTENSION) if request is not None else None
    if isinstance(text, str) and text:
        finding = Finding(text)
        finding.__cause__ = cause
        error.__cause__ = finding
    return error


class _ProxyAnswer(Exception):
    """What the proxy said about its own answer (squid's ``X-Squid-Error``), as the cause beneath it."""


class _Watchdog:
    """Content-idle timer plus first-token deadline. Keep-alives prove liveness but are not content."""

    def __init__(self, idle: float, first_token: float) -> None:
        self.idle = idle
        self.first_token = first_token
        self.start = anyio.current_time()
        self.last_activity = self.start
        self.last_content: float | None = None

    def deadline(self) -> float:
        if self.last_content is None:
            return min(self.last_activity + self.idle, self.start + self.first_token)
        return self.last_content + self.idle

    def _first_token_due_first(self) -> bool:
        return self.last_content is None and self.start + self.first_token <= self.last_activity + self.idle

    def first_token_fired(self) -> bool:
        """Whether the deadline that fired is the first-token one: keep-alives came, content never did."""
        return self._first_token_due_first() and self.last_activity > self.start

    def expired_limit(self) -> float:
        """The limit that fired, in seconds, for the message."""
        return self.first_token if self._first_token_due_first() else self.idle

    def saw_bytes(self, content: bool) -> None:
        now = anyio.current_time()
        self.last_activity = now
        if content:
            self.last_content = now


class DeepSeekClient:
    """Streams chat completions; every failure is an :class:`~dsh.llm.errors.LlmError` with a code."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT,
        first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        http_client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
        dialect: str | None = None,
        max_parallel: int = 0,
        request_gate: str | None = None,
        **options: Unpack[TransportOptions],
    ) -> None:
        """``transport``: how requests reach the endpoint and what messages name (dsh.llm.transport, as
        :func:`open_client` opens it); without one, it is opened from ``options`` (base_url, proxy, trust_env, env,
        record, shown_as, ring_bytes: :class:`~dsh.llm.client_settings.ClientSettings`' fields of those names).
        ``http_client``: a caller's httpx client, which carries its own transport (then nothing is recorded).
        ``dialect``: ``deepseek`` or ``openai`` (None: by the host); ``max_parallel``: requests at once (0: none);
        ``request_gate``: the shared gate directory of a parent dsh to join (a child dsh's: dsh.llm.request_gate)."""
        if transport is None:
            settings = ClientSettings(api_key=api_key, stream_idle_timeout=stream_idle_timeout,
                                      first_token_timeout=first_token_timeout, **options)
            transport = open_transport(settings if http_client is None else _around(settings))
        elif options:
            raise TypeError(f"transport= already holds {', '.join(sorted(options))}")
        self._transport = transport
        self._api_key = api_key
        self.base_url_display, self.proxy_display = transport.base_url_display, transport.proxy_display
        # Whom messages name: by the host now, by the answers' headers once one arrives (then kept).
        self.endpoint: Endpoint = endpoint_for_url(self.base_url_display)
        self.dialect = dialect or default_dialect(self.base_url_display)
        # The chat requests in flight, counted (and bounded) here only, or with a parent dsh and its children.
        self.requests = RequestGate(max_parallel, request_gate)
        self._via = f" via proxy {self.proxy_display}" if self.proxy_display else ""
        self.stream_idle_timeout = stream_idle_timeout
        self.first_token_timeout = first_token_timeout
        self._owns_http = http_client is None
        self._http = http_client  # built on first use (see the httpx import note above)
        self._connect_timeout = connect_timeout
        self._closed = False
        self._trace = transport.tap

    @property
    def ring(self) -> ExchangeRing | None:
        """The last exchanges' masked records, for a failure capsule (docs/reporting.md); None keeps none."""
        return self._transport.ring

    @property
    def trace_header(self) -> dict[str, Any] | None:
        """The header a recording of this client starts with (a capsule's copies it), None with neither a
        recording nor a ring."""
        return dict(self._trace.header) if self._trace is not None else None

    async def __aenter__(self) -> DeepSeekClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._owns_http and self._http is not None:
            await self._http.aclose()
        self._transport.close()
        self.requests.close()  # a gate shared with child dsh subagents: its directory goes

    def _request(self, method: str, path: str, headers: dict[str, str], content: bytes | None, *,
                 tapped: bool = True, from_origin: bool = False) -> tuple[httpx.AsyncClient, httpx.Request]:
        """The HTTP client (built on the first request) and the request for ``{base_url}{path}`` (``{origin}{path}``
        when ``from_origin``); raises ``httpx.InvalidURL`` for a base URL httpx cannot use."""
        import httpx  # the first request (see the note at the top)

        if self._http is None:
            if self._closed:
                raise RuntimeError("Cannot send a request, as the client has been closed.")
            self._http = httpx.AsyncClient(
                transport=self._transport.open(),
                trust_env=False,
                timeout=httpx.Timeout(
                    connect=self._connect_timeout,
                    read=self.stream_idle_timeout,
                    write=DEFAULT_WRITE_TIMEOUT,
                    pool=DEFAULT_POOL_TIMEOUT,
                )
            )
        # The path goes before any query; userinfo is dropped because httpx would turn it into
        # Basic auth that overwrites the bearer key.
        base = httpx.URL(self._transport.base_url)
        url = base.copy_with(path=("" if from_origin else base.path.rstrip("/")) + path, userinfo=b"")
        request = self._http.build_request(method, url, content=content, headers=headers)
        if not tapped:
            request.extensions[UNTAPPED_EXTENSION] = True
        return self._http, request

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "text/event-stream",
            "Accept-Encoding": _ACCEPT_ENCODING,
            "Content-Type": "application/json",
            "User-Agent": f"dsh/{__version__}",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values to mask wherever this client's errors are rendered: the key, base-URL credentials."""
        return ((self._api_key,) if self._api_key else ()) + self._transport.url_secrets

    def transport_failure(self, exc: BaseException) -> LlmError:
        """A failure before any response: permanent ones get no retry; a proxy's own is ``PROXY``.

        Public because ``dsh doctor``'s probes name their failures with it, so they read as a turn's would.
        """
        detail = classify_transport(exc)
        code = ErrorCode.TRANSPORT
        status = None
        if self.proxy_display is not None:  # a replay names the recorded proxy: its failures are that proxy's
            # Every connection goes to the proxy, so a refused or unknown host is the proxy's; TLS is
            # the upstream's (through the CONNECT tunnel) and stays TRANSPORT.
            proxy_own = detail in (
                FailureDetail.REFUSED, FailureDetail.NAME_NOT_FOUND, FailureDetail.NAME_UNRESOLVED,
                FailureDetail.PROXY_AUTH, FailureDetail.PROXY_DEPENDENCY,
            )
            if proxy_own or any(isinstance(node, httpx_errors().ProxyError) for node in _nodes(exc)):
                code = ErrorCode.PROXY
                match = re.match(r"(\d{3}) ", str(exc))
                status = int(match.group(1)) if match and 100 <= int(match.group(1)) <= 599 else None
        return LlmError(
            self.endpoint.request_failed(self.base_url_display, self._via),
            code,
            status=status,
            retry_limit=0 if detail in PERMANENT else None,
            detail=detail,
            endpoint=self.proxy_display if code == ErrorCode.PROXY else self.base_url_display,
            endpoint_name=self.endpoint.name,
            cause=exc,
        )

    async def certificate_named(self, error: LlmError, address: tuple[str, int] | None = None, *,
                                request: httpx.Request | None = None) -> LlmError:
        """``error``, and when it is a certificate failure, what the server presented named beneath it: a
        :class:`~dsh.llm.errors.Finding` (issuer, subject, whether the trust store knows that issuer) above the
        raw chain. The certificate is read again without verifying it (dsh.llm.certificate_truth); when that
        fails, ``error`` is left as it was. A replay (``shown_as``) is never probed (its server is not the one
        that failed): the finding its recording put on the failed ``request`` is put there instead. ``address``:
        where to connect instead of resolving the host again (``dsh doctor``)."""
        cause = error.__cause__
        if error.detail not in CERTIFICATE_DETAILS or cause is None:
            return error
        if self._transport.replaying:
            return _with_recorded_finding(error, cause, request)
        from dsh.llm.certificate_truth import certificate_finding  # cryptography: only on this failure path

        finding = await certificate_finding(
            cause, url=self._transport.base_url, detail=error.detail, env=self._transport.env,
            proxy=self._transport.proxy, address=address,
            timeout=min(self._connect_timeout, CERTIFICATE_PROBE_TIMEOUT),
        )
        if finding is not None:
            error.__cause__ = finding
        return error

    def _record_finding(self, request: httpx.Request | None, error: LlmError) -> None:
        """A finding goes into the trace beside its exchange's end: a replay shows it without probing."""
        n = request.extensions.get(EXCHANGE_EXTENSION) if request is not None else None
        if self._trace is not None and isinstance(error.__cause__, Finding) and isinstance(n, int):
            self._trace.finding(n, str(error.__cause__))

    @contextmanager
    def _naming(self) -> Iterator[None]:
        """Every :class:`LlmError` that leaves the client names where it failed: the URL (unless a proxy's
        failure named the proxy) and who answered there, for the REPL's fix line."""
        try:
            yield
        except LlmError as exc:
            if exc.endpoint is None:
                exc.endpoint = self.base_url_display
            if exc.endpoint_name is None:
                exc.endpoint_name = self.endpoint.name
            raise

    @contextmanager
    def _translating(self, response: httpx.Response | None = None) -> Iterator[None]:
        """Every failure of an exchange as the :class:`LlmError` a turn raises for it (docs/contracts.md).

        The caller's cancellation is ``ABORTED``. Before a ``response`` exists anything else is the
        request's transport failure (httpx errors, and the OSError or ExceptionGroup that escapes
        anyio's connect, e.g. port 99999); while its body is read, a transport error is the stream's
        and a body that does not decode is ``MALFORMED_RESPONSE``.
        """
        try:
            yield
        except LlmError:
            raise
        except anyio.get_cancelled_exc_class() as exc:
            raise self._aborted(exc)
        except Exception as exc:
            if response is None:
                raise self.transport_failure(exc)
            request_id = self._request_id(response)
            if isinstance(exc, httpx_errors().TransportError):
                message = self.endpoint.stream_failed(self.base_url_display, self._via)
                raise LlmError(message, ErrorCode.TRANSPORT, request_id=request_id, cause=exc)
            if isinstance(exc, BadEncoding):
                raise LlmError(str(exc), ErrorCode.MALFORMED_RESPONSE, request_id=request_id)
            raise

    def _aborted(self, exc: BaseException) -> LlmError:
        error = LlmError(self.endpoint.aborted(), ErrorCode.ABORTED)
        error.__cause__ = exc
        return error

    def _timeout(self, watchdog: _Watchdog, *, headers: bool = True) -> LlmError:
        """Which deadline fired, in words: no headers, keep-alives but no content, or idle after content.

        A first-token timeout is retried at most once: a server that only sends keep-alives would
        otherwise hold a turn for the whole retry budget (six times the deadline).
        """
        limit = f"{watchdog.expired_limit():g}s"
        if not headers:
            return LlmError(self.endpoint.no_headers(limit), ErrorCode.TIMEOUT)
        if watchdog.first_token_fired():
            return LlmError(self.endpoint.no_content(limit), ErrorCode.TIMEOUT, retry_limit=1)
        return LlmError(self.endpoint.idle(limit), ErrorCode.TIMEOUT)

    async def _send(
        self, method: str, path: str, headers: dict[str, str], content: bytes | None = None, *, tapped: bool = True,
        from_origin: bool = False,
    ) -> tuple[httpx.Response, _Watchdog]:
        """Send and wait for the response headers under the first deadline; each failure is a turn's error."""
        response: httpx.Response | None = None
        http_request: httpx.Request | None = None
        try:
            with self._translating():
                http, http_request = self._request(method, path, headers, content, tapped=tapped,
                                                   from_origin=from_origin)
                # The clock starts once the request is ready: the first call's lazy client setup is ours.
                watchdog = _Watchdog(self.stream_idle_timeout, self.first_token_timeout)
                with anyio.CancelScope(deadline=watchdog.deadline()) as scope:
                    response = await http.send(http_request, stream=True)
        except LlmError as exc:
            if exc.detail not in CERTIFICATE_DETAILS:
                raise
            with self._translating():  # a cancel while the certificate is read again is still ABORTED
                named = await self.certificate_named(exc, request=http_request)
            self._record_finding(http_request, named)
            raise named
        if scope.cancelled_caught or response is None:
            raise self._timeout(watchdog, headers=False)
        self.endpoint = self.endpoint.learn(response.headers)
        return response, watchdog

    async def stream(
        self, request: ChatRequest, *, trace: StreamTrace | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """POST the request and yield events as they arrive; ``Finish`` only after ``[DONE]``.

        ``trace``, when given, is filled in with what the events do not show (``dsh doctor``).
        """
        body = encoded_body(request)
        # Prefix completion is served on the origin's beta route, whatever path base_url has (docs/endpoints.md).
        path = PREFIX_COMPLETION_PATH if request.continues else "/chat/completions"
        async with self.requests.admitted():  # in flight from here until the response is over
            with self._naming():
                response, watchdog = await self._send("POST", path, self._headers(), body,
                                                      from_origin=request.continues)
            if trace is not None:
                trace.started_at, trace.headers_at = watchdog.start, anyio.current_time()
            try:
                with self._naming():
                    if response.status_code >= 300:
                        await self._raise_for_status(response, watchdog, request.model)
                    # `_events` hands over one list per read, so each event crosses a single generator.
                    async for batch in self._events(response, watchdog, trace):
                        for event in batch:
                            yield event
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()

    async def get_json(self, path: str, *, tapped: bool = True, from_origin: bool = False) -> tuple[int, Any]:
        """``GET {base_url}{path}`` with the key: ``(200, parsed JSON)``, or ``(404, None)`` for a route the
        endpoint does not have. Every other failure raises the :class:`LlmError` a turn would raise for it
        (same transport classification, same status table), so ``dsh doctor`` and a turn agree. ``tapped``
        False keeps the exchange out of a ``--record`` file and the capsule's ring (a side look of dsh's own);
        ``from_origin``: ``{origin}{path}`` (llama.cpp's ``/props``), whatever path base_url has."""
        headers = {**self._headers(), "Accept": "application/json"}
        headers.pop("Content-Type", None)
        with self._naming():
            return await self._get_json(path, headers, tapped, from_origin)

    async def _get_json(self, path: str, headers: dict[str, str], tapped: bool = True,
                        from_origin: bool = False) -> tuple[int, Any]:
        response, watchdog = await self._send("GET", path, headers, tapped=tapped, from_origin=from_origin)
        try:
            if response.status_code == 404:
                return 404, None
            if response.status_code >= 300:
                await self._raise_for_status(response, watchdog)
            body = bytearray()
            with self._translating(response):
                in_time = await self._read_body(response, watchdog, body, _JSON_BODY_LIMIT)
            if len(body) > _JSON_BODY_LIMIT:
                raise LlmError(f"the answer to GET {path} is larger than {_JSON_BODY_LIMIT} bytes",
                               ErrorCode.MALFORMED_RESPONSE, request_id=self._request_id(response))
            if not in_time:
                raise self._timeout(watchdog)
            try:
                return response.status_code, json.loads(body)
            except (ValueError, UnicodeDecodeError):
                preview = bytes(body[:PAYLOAD_PREVIEW]).decode("utf-8", "replace")
                raise malformed_payload(preview, self.secrets, self._request_id(response))
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _read_body(self, response: httpx.Response, watchdog: _Watchdog, body: bytearray, limit: int) -> bool:
        """Inflate the body into ``body`` until it ends or passes ``limit`` bytes; False if the deadline fired."""
        inflater = Inflater(response.headers.get("content-encoding"))
        with anyio.CancelScope(deadline=watchdog.deadline()) as scope:
            async for chunk in response.aiter_raw():
                for piece in inflater.pieces(chunk):
                    body += piece
                    if len(body) > limit:
                        return True
        return not scope.cancelled_caught

    async def _raise_for_status(self, response: httpx.Response, watchdog: _Watchdog, model: str | None = None) -> None:
        body = bytearray()
        # A status line and headers are enough to classify; a broken error body is not news.
        with self._translating(response), suppress(httpx_errors().TransportError, BadEncoding):
            await self._read_body(response, watchdog, body, _ERROR_BODY_LIMIT - 1)
        status = response.status_code
        if self.proxy_display is not None and proxy_answered(status, response.headers):
            squid = response.headers.get("x-squid-error")
            raise LlmError(
                f"proxy {self.proxy_display} answered HTTP {status}",
                ErrorCode.PROXY,
                status=status if 100 <= status <= 599 else None,
                retry_limit=0 if status in (401, 407) else None,
                detail=FailureDetail.PROXY_AUTH if status in (401, 407) else None,
                endpoint=self.proxy_display,
                cause=_ProxyAnswer(redact_text(scrub_surrogates(squid), self.secrets)) if squid else None,
            )
        provider = provider_message(bytes(body))
        message = redact_text(provider, self.secrets) if provider else self.endpoint.http_error(status)
        code = code_for_status(status, provider, error_kinds(bytes(body)))
        detail = upstream_detail(code, provider)
        if model is not None and is_concurrency_cap(status, provider, self.dialect):  # DeepSeek's cap, in words
            message = concurrency_cap_message(model, self.requests.counted(), subagents=self.requests.shared)
            detail = FailureDetail.CONCURRENCY_CAP
        raise LlmError(
            message + self._via_suffix(),
            code,
            status=status if 100 <= status <= 599 else None,
            retry_after_s=retry_after_seconds(response.headers),
            request_id=self._request_id(response),
            detail=detail,
        )

    def _via_suffix(self) -> str:
        return f" (via proxy {self.proxy_display})" if self.proxy_display else ""

    @staticmethod
    def _request_id(response: httpx.Response) -> str | None:
        return request_id(response.headers)

    async def _events(
        self, response: httpx.Response, watchdog: _Watchdog, trace: StreamTrace | None = None
    ) -> AsyncIterator[list[StreamEvent]]:
        """The events of each piece of each read, as one list (the per-event hop is ``stream``'s)."""
        with self._translating(response):
            decoder = StreamDecoder(
                response.headers.get("content-encoding"), request_id=self._request_id(response), secrets=self.secrets,
                endpoint=self.endpoint,
            )
        chunks = response.aiter_raw()
        while not decoder.done:
            with self._translating(response), anyio.CancelScope(deadline=watchdog.deadline()) as scope:
                chunk = await anext(chunks, None)
            if scope.cancelled_caught:
                raise self._timeout(watchdog)
            if chunk is None:
                break
            content_before = decoder.content_events
            for index, events in enumerate(decoder.pieces(chunk)):
                if index:
                    await self._between_pieces(watchdog)
                watchdog.saw_bytes(content=decoder.content_events != content_before)
                content_before = decoder.content_events
                if events:
                    yield events
        try:
            last = decoder.close()
        finally:
            if trace is not None:
                trace.done = decoder.done
        if chunk is not None:  # [DONE] came before the end of the body
            await self._drain(chunks)
        yield last

    async def _between_pieces(self, watchdog: _Watchdog) -> None:
        """One read of a compressed body can inflate to GBs: let a cancel in and hold the deadlines
        between two bounded pieces (docs/reliability.md, "Hostile streams")."""
        with self._translating():
            await anyio.lowlevel.checkpoint()
        if anyio.current_time() >= watchdog.deadline():
            raise self._timeout(watchdog)

    @staticmethod
    async def _drain(chunks: AsyncIterator[bytes]) -> None:
        """Read (and ignore) what follows ``[DONE]`` so httpcore can return the connection to the pool."""
        with anyio.move_on_after(0.5):
            received = 0
            try:
                async for chunk in chunks:
                    received += len(chunk)
                    if received > 64 * 1024:
                        return
            except httpx_errors().TransportError:
                pass


def open_client(settings: ClientSettings) -> DeepSeekClient:
    """The one place dsh builds a model client: the turn's, a replay's, the doctor's, the demo's, a child's."""
    return DeepSeekClient(
        api_key=settings.api_key, stream_idle_timeout=settings.stream_idle_timeout,
        first_token_timeout=settings.first_token_timeout, connect_timeout=settings.connect_timeout,
        transport=open_transport(settings), dialect=settings.dialect, max_parallel=settings.max_parallel,
        request_gate=settings.request_gate,
    )


def _around(settings: ClientSettings) -> ClientSettings:
    """The settings of a client that sends through a caller's httpx client: the caller's transport carries the
    requests, so no proxy is read from the environment and no ring is kept (a recording cannot be made)."""
    if settings.record is not None:
        raise ValueError("record= wraps the client's own transport; it cannot record a caller's http_client")
    return replace(settings, trust_env=False, ring_bytes=0)
