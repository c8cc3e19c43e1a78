"""The ``/chat/completions`` streaming client and its error table (docs/architecture.md, "Errors").

DeepSeek's API by default; any OpenAI-compatible server otherwise. Every message names the endpoint as
:mod:`dsh.llm.endpoint` knows it: by its host, or by what its answers' headers say about it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from dsh.llm._version import __version__
from dsh.llm.client_settings import ClientSettings
from dsh.llm.codes import ErrorCode
from dsh.llm.defaults import (
    DEFAULT_BASE_URL,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    DEFAULT_STREAM_IDLE_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT,
)
from dsh.llm.endpoint import Endpoint, endpoint_for_url
from dsh.llm.errors import Finding, LlmError
from dsh.llm.events import (
    ChatRequest,
    Message,
    StreamEvent,
)
from dsh.llm.exchange_ring import ExchangeRing
from dsh.llm.failure_chain import EXCHANGE_EXTENSION
from dsh.llm.http_status import code_for_status, request_id, retry_after_seconds, upstream_detail
from dsh.llm.network import (
    CERTIFICATE_DETAILS,
    PERMANENT,
    FailureDetail,
    classify_transport,
    environment_proxy,
    ssl_context,
)
from dsh.llm.redact import redact_text, redact_url, url_secrets
from dsh.llm.stream_decoder import PAYLOAD_PREVIEW, BadEncoding, Inflater, StreamDecoder, malformed_payload
from dsh.llm.text import scrub_surrogates
from dsh.llm.wire_trace import TraceWriter

if TYPE_CHECKING:
    # httpx is imported when the first request is made: its import and the client's SSL context
    # cost ~100 ms, which the first prompt should not wait for (the agent and this client are built
    # behind it: tests/repl/test_first_prompt_imports.py). Each ``import httpx`` below is this one.
    import httpx

__all__ = ["DeepSeekClient", "StreamTrace", "open_client"]

_ERROR_BODY_LIMIT = 64 * 1024
_ACCEPT_ENCODING = "gzip, deflate"  # what Inflater decodes; a server that sends anything else is refused
_JSON_BODY_LIMIT = 1024 * 1024  # a GET answer (``/models``, ``/user/balance``) larger than this is not one
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


def _with_recorded_finding(error: LlmError, cause: BaseException) -> LlmError:
    """``error`` with the finding its recording holds (dsh.llm.replay_transport) beneath it, as the live run had it."""
    from dsh.llm.replay_transport import recorded_finding  # only a replay gets here

    text = recorded_finding(cause)
    if text:
        finding = Finding(text)
        finding.__cause__ = cause
        error.__cause__ = finding
    return error


def _message_to_wire(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
        # Thinking mode answers 400 unless tool-call turns carry their reasoning back, even "".
        wire["reasoning_content"] = message.reasoning_content or ""
    elif message.role == "assistant" and message.reasoning_content is not None:
        wire["reasoning_content"] = message.reasoning_content
    if message.role == "tool" and message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _encode_body(text: str) -> bytes:
    """The request body as UTF-8. Decoding boundaries keep lone surrogates out of the conversation;
    should one slip in anyway (a caller's own message), it is sent as U+FFFD instead of failing every
    later turn."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return scrub_surrogates(text).encode("utf-8")


def _provider_message(body: bytes) -> str | None:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
            return scrub_surrogates(error["message"].strip())
        if isinstance(parsed.get("message"), str) and parsed["message"].strip():
            return scrub_surrogates(parsed["message"].strip())
    return None


def _transport_error() -> type[httpx.TransportError]:
    """httpx's transport failure, for code that runs once a response exists (httpx is loaded by then)."""
    import httpx  # the first request (see the note at the top)

    return httpx.TransportError


class _ProxyAnswer(Exception):
    """What the proxy said about its own answer (squid's ``X-Squid-Error``), as the cause beneath it."""


_PROXY_SERVER = re.compile(r"(?i)squid|tinyproxy|privoxy|polipo|ziproxy|3proxy|ccproxy|proxy")


def _proxy_answered(status: int, headers: httpx.Headers) -> bool:
    """Whether a proxy, not the endpoint, produced this error answer (docs/contracts.md, "Error codes": PROXY)."""
    if status == 407 or "proxy-authenticate" in headers or "x-squid-error" in headers:
        return True
    if status >= 400 and _PROXY_SERVER.search(headers.get("server", "")):
        return True
    return status >= 500 and "via" in headers


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
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT,
        first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        http_client: httpx.AsyncClient | None = None,
        proxy: str | None = None,
        trust_env: bool = True,
        env: Mapping[str, str] | None = None,
        record: str | os.PathLike[str] | None = None,
        shown_as: tuple[str, str | None] | None = None,
        ring_bytes: int = 0,
    ) -> None:
        """``record``: write a masked wire trace of every exchange there (dsh.llm.wire_trace).
        ``ring_bytes``: keep the last exchanges' masked records in memory, up to about that many bytes, for
        a failure capsule (:attr:`ring`, docs/reporting.md); 0 keeps none.
        ``shown_as``: the endpoint and proxy that messages name instead of the real ones (a replay
        names the recorded ones, so that its lines are the live run's)."""
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.base_url_display = redact_url(self._base_url)
        self._env = dict(os.environ if env is None else env)
        if proxy is None and trust_env and http_client is None:
            found = environment_proxy(self._base_url, self._env)
            proxy = found[0] if found else None
        self.proxy = proxy
        self.proxy_display = redact_url(proxy) if proxy else None
        self._replaying = shown_as is not None
        if shown_as is not None:
            self.base_url_display, self.proxy_display = shown_as
        # Whom messages name: by the host now, by the answers' headers once one arrives (then kept).
        self.endpoint: Endpoint = endpoint_for_url(self.base_url_display)
        self._via = f" via proxy {self.proxy_display}" if self.proxy_display else ""
        self.stream_idle_timeout = stream_idle_timeout
        self.first_token_timeout = first_token_timeout
        self._owns_http = http_client is None
        self._http = http_client  # built on first use (see the httpx import note above)
        self._connect_timeout = connect_timeout
        self._closed = False
        self._trace: TraceWriter | None = None
        if record is not None and http_client is not None:
            raise ValueError("record= wraps the client's own transport; it cannot record a caller's http_client")
        # The ring needs the client's own transport to tee, as a recording does.
        self.ring = ExchangeRing(ring_bytes) if ring_bytes > 0 and http_client is None else None
        if record is not None or self.ring is not None:
            timeouts = {"stream_idle_timeout": stream_idle_timeout, "first_token_timeout": first_token_timeout}
            self._trace = TraceWriter(record, secrets=self.secrets, base_url=self.base_url_display,
                                      proxy=self.proxy_display, timeouts=timeouts, ring=self.ring)

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
        if self._trace is not None:
            self._trace.close()

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx  # the first request (see above)

            if self._closed:
                raise RuntimeError("Cannot send a request, as the client has been closed.")
            # The proxy was picked above (environment_proxy) and the trust store by ssl_context, so
            # httpx reads neither from the environment itself.
            verify = ssl_context(self._env)
            transport: httpx.AsyncBaseTransport | None = None
            if self._replaying or self._trace is not None:
                # The transport the client would build itself (proxy included), wrapped.
                wrapped: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(verify=verify, proxy=self.proxy,
                                                                            trust_env=False)
                if self._replaying:
                    # A failure recorded before any response is raised again, not met as a reset (record-replay.md).
                    from dsh.llm.replay_transport import replaying_transport  # built on httpx, as above

                    wrapped = replaying_transport(wrapped)
                if self._trace is not None:
                    # The recorder tees every exchange (a --record file, the capsule's ring).
                    from dsh.llm.wire_recorder import recording_transport  # built on httpx, as above

                    wrapped = recording_transport(wrapped, self._trace)
                transport = wrapped
            self._http = httpx.AsyncClient(
                proxy=self.proxy if transport is None else None,
                transport=transport,
                verify=verify,
                trust_env=False,
                timeout=httpx.Timeout(
                    connect=self._connect_timeout,
                    read=self.stream_idle_timeout,
                    write=DEFAULT_WRITE_TIMEOUT,
                    pool=DEFAULT_POOL_TIMEOUT,
                )
            )
        return self._http

    @staticmethod
    def build_body(request: ChatRequest) -> dict[str, Any]:
        """The exact JSON body; optional fields are omitted, never null."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [_message_to_wire(message) for message in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.thinking is not None:
            body["thinking"] = {"type": "enabled" if request.thinking else "disabled"}
        if request.reasoning_effort is not None:
            body["reasoning_effort"] = request.reasoning_effort
        return body

    def _url(self, path: str) -> httpx.URL:
        """``{base_url}{path}``; raises ``httpx.InvalidURL`` for a base URL httpx cannot use."""
        import httpx  # the first request (see above)

        # The path goes before any query; userinfo is dropped because httpx would turn it into
        # Basic auth that overwrites the bearer key.
        base = httpx.URL(self._base_url)
        return base.copy_with(path=base.path.rstrip("/") + path, userinfo=b"")

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
        proxy = url_secrets(self.proxy) if self.proxy else ()
        return ((self._api_key,) if self._api_key else ()) + url_secrets(self._base_url) + proxy

    def transport_failure(self, exc: BaseException) -> LlmError:
        """A failure before any response: permanent ones get no retry; a proxy's own is ``PROXY``.

        Public because ``dsh doctor``'s probes name their failures with it, so they read as a turn's would.
        """
        import httpx  # a request was tried (see above)

        detail = classify_transport(exc)
        code = ErrorCode.TRANSPORT
        status = None
        if self.proxy_display is not None:  # a replay names the recorded proxy: its failures are that proxy's
            # Every connection goes to the proxy, so a refused or unknown host is the proxy's; TLS is
            # the upstream's (through the CONNECT tunnel) and stays TRANSPORT.
            proxy_own = detail in (
                FailureDetail.REFUSED, FailureDetail.NAME_NOT_FOUND, FailureDetail.PROXY_AUTH,
                FailureDetail.PROXY_DEPENDENCY,
            )
            if proxy_own or any(isinstance(node, httpx.ProxyError) for node in _nodes(exc)):
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

    async def certificate_named(self, error: LlmError, address: tuple[str, int] | None = None) -> LlmError:
        """``error``, and when it is a certificate failure, what the server presented named beneath it: a
        :class:`~dsh.llm.errors.Finding` (issuer, subject, whether the trust store knows that issuer) above the
        raw chain. The certificate is read again without verifying it (dsh.llm.certificate_truth); when that
        fails, ``error`` is left as it was. A replay (``shown_as``) is never probed (its server is not the one
        that failed): the finding its recording holds is put there instead. ``address``: where to connect instead
        of resolving the host again (``dsh doctor``)."""
        cause = error.__cause__
        if error.detail not in CERTIFICATE_DETAILS or cause is None:
            return error
        if self._replaying:
            return _with_recorded_finding(error, cause)
        from dsh.llm.certificate_truth import certificate_finding  # cryptography: only on this failure path

        finding = await certificate_finding(
            cause, url=self._base_url, detail=error.detail, env=self._env, proxy=self.proxy, address=address,
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
            if isinstance(exc, _transport_error()):
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
        self, method: str, path: str, headers: dict[str, str], content: bytes | None = None
    ) -> tuple[httpx.Response, _Watchdog]:
        """Send and wait for the response headers under the first deadline; each failure is a turn's error."""
        response: httpx.Response | None = None
        http_request: httpx.Request | None = None
        try:
            with self._translating():
                http = self._client()
                http_request = http.build_request(method, self._url(path), content=content, headers=headers)
                # The clock starts once the request is ready: the first call's lazy client setup is ours.
                watchdog = _Watchdog(self.stream_idle_timeout, self.first_token_timeout)
                with anyio.CancelScope(deadline=watchdog.deadline()) as scope:
                    response = await http.send(http_request, stream=True)
        except LlmError as exc:
            if exc.detail not in CERTIFICATE_DETAILS:
                raise
            with self._translating():  # a cancel while the certificate is read again is still ABORTED
                named = await self.certificate_named(exc)
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
        body = _encode_body(json.dumps(self.build_body(request), ensure_ascii=False))
        with self._naming():
            response, watchdog = await self._send("POST", "/chat/completions", self._headers(), body)
        if trace is not None:
            trace.started_at, trace.headers_at = watchdog.start, anyio.current_time()
        try:
            with self._naming():
                if response.status_code >= 300:
                    await self._raise_for_status(response, watchdog)
                # `_events` hands over one list per read, so each event crosses a single generator.
                async for batch in self._events(response, watchdog, trace):
                    for event in batch:
                        yield event
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def get_json(self, path: str) -> tuple[int, Any]:
        """``GET {base_url}{path}`` with the key: ``(200, parsed JSON)``, or ``(404, None)`` for a route the
        endpoint does not have. Every other failure raises the :class:`LlmError` a turn would raise for it
        (same transport classification, same status table), so ``dsh doctor`` and a turn agree."""
        headers = {**self._headers(), "Accept": "application/json"}
        headers.pop("Content-Type", None)
        with self._naming():
            return await self._get_json(path, headers)

    async def _get_json(self, path: str, headers: dict[str, str]) -> tuple[int, Any]:
        response, watchdog = await self._send("GET", path, headers)
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

    async def _raise_for_status(self, response: httpx.Response, watchdog: _Watchdog) -> None:
        body = bytearray()
        # A status line and headers are enough to classify; a broken error body is not news.
        with self._translating(response), suppress(_transport_error(), BadEncoding):
            await self._read_body(response, watchdog, body, _ERROR_BODY_LIMIT - 1)
        status = response.status_code
        if self.proxy_display is not None and _proxy_answered(status, response.headers):
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
        provider = _provider_message(bytes(body))
        message = redact_text(provider, self.secrets) if provider else self.endpoint.http_error(status)
        code = code_for_status(status, provider)
        raise LlmError(
            message + self._via_suffix(),
            code,
            status=status if 100 <= status <= 599 else None,
            retry_after_s=retry_after_seconds(response.headers),
            request_id=self._request_id(response),
            detail=upstream_detail(code, provider),
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
            except _transport_error():
                pass


def open_client(settings: ClientSettings) -> DeepSeekClient:
    """The one place dsh builds a model client: the turn's, a replay's, the doctor's, the demo's, a child's."""
    return DeepSeekClient(
        base_url=settings.base_url, api_key=settings.api_key, stream_idle_timeout=settings.stream_idle_timeout,
        first_token_timeout=settings.first_token_timeout, connect_timeout=settings.connect_timeout,
        proxy=settings.proxy, trust_env=settings.trust_env, env=settings.env, record=settings.record,
        shown_as=settings.shown_as, ring_bytes=settings.ring_bytes,
    )
