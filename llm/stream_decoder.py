"""The body of a chat-completions stream, decoded without I/O: raw bytes in, stream events out.

:class:`StreamDecoder` is everything between the socket and the events (docs/architecture.md,
"Errors"; docs/reliability.md, "Hostile streams"): the Content-Encoding, inflated in bounded pieces;
SSE framing (:mod:`dsh.llm.sse`); each ``data:`` payload parsed into deltas, usage and the finish
reason; ``[DONE]``; and the error a stream that ended badly is (docs/contracts.md: ``MALFORMED_RESPONSE``,
``STREAM_CLOSED``, ``EMPTY_RESPONSE``, a finish reason that is a failure, a relay's ``{"error": {...}}``
event). The client only reads, keeps the deadlines and lets a cancel in between pieces.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from dsh.llm.codes import ErrorCode
from dsh.llm.defaults import DEFAULT_BASE_URL
from dsh.llm.endpoint import Endpoint, endpoint_for_url
from dsh.llm.errors import Evidence, LlmError
from dsh.llm.events import (
    USAGE_COUNT_LIMIT,
    Finish,
    KeepAlive,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from dsh.llm.http_status import code_for_relay, upstream_detail
from dsh.llm.redact import redact_text
from dsh.llm.sse import MAX_LINE_BYTES, SseComment, SseDecoder, SseLineTooLong
from dsh.llm.text import SurrogateJoiner, scrub_surrogates

__all__ = [
    "PAYLOAD_PREVIEW", "PIECE", "RELAY_MESSAGE_LIMIT", "RELAY_PAYLOAD_LIMIT", "BadEncoding", "Inflater",
    "StreamDecoder", "malformed_payload", "relay_failure",
]

PIECE = 256 * 1024  # the most bytes one inflate step may produce (docs/reliability.md, "Hostile streams")
PAYLOAD_PREVIEW = 120
RELAY_MESSAGE_LIMIT = 500  # a relay's error message, as the failure's one line shows it
RELAY_PAYLOAD_LIMIT = 2000  # the relay's whole error object, as /why shows it
_NORMAL_FINISH = frozenset({"stop", "tool_calls", "length"})
_WHITESPACE = re.compile(r"\s+")
_ELLIPSIS = "…"


def malformed_payload(payload: str, secrets: tuple[str, ...], request_id: str | None) -> LlmError:
    """``malformed SSE payload: <first 120 characters, masked>`` (docs/contracts.md, "Error codes")."""
    preview = redact_text(payload[:PAYLOAD_PREVIEW], secrets)
    return LlmError(f"malformed SSE payload: {preview}", ErrorCode.MALFORMED_RESPONSE, request_id=request_id)


def _shown(text: str, secrets: tuple[str, ...], limit: int) -> str:
    """Untrusted text as one masked line of at most ``limit`` characters. Masked whole before it is cut,
    so a cut never leaves the start of a secret that the masking would have caught."""
    line = _WHITESPACE.sub(" ", redact_text(scrub_surrogates(text), secrets)).strip()
    return line if len(line) <= limit else line[: limit - 1] + _ELLIPSIS


def _relay_status(error: dict[str, Any]) -> int | None:
    """The event's numeric ``code`` (``500`` or ``"500"``; else its ``status``) when it is an HTTP status."""
    for key in ("code", "status"):
        value = error.get(key)
        if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) == 3:
            value = int(value.strip())
        if type(value) is int and 100 <= value <= 599:
            return value
    return None


def _relay_kinds(error: dict[str, Any]) -> tuple[str, ...]:
    """The event's ``type`` and a ``code`` that is a word (``"context_length_exceeded"``), in that order."""
    values = (error.get("type"), error.get("code"))
    return tuple(value.strip() for value in values if isinstance(value, str) and value.strip()
                 and not value.strip().isdigit())


def _masked(value: object, secrets: tuple[str, ...]) -> object:
    """A parsed JSON value with every string (keys too) masked; RecursionError past Python's depth."""
    if isinstance(value, str):
        return redact_text(scrub_surrogates(value), secrets)
    if isinstance(value, dict):
        return {_masked(key, secrets): _masked(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, secrets) for item in value]
    return value


def relay_failure(error: object, endpoint: Endpoint, secrets: tuple[str, ...], request_id: str | None) -> LlmError:
    """A relay's in-stream ``{"error": ...}`` event as the failure it is (docs/failure-kit.md, "Relays").

    The line is the relay's ``error.message`` (masked, one line, at most ``RELAY_MESSAGE_LIMIT``); the code
    follows its status or type as an HTTP answer's would; the whole object, masked and bounded, is an
    :class:`Evidence` link beneath it for ``/why``.
    """
    fields = error if isinstance(error, dict) else {"message": error}
    raw_message = fields.get("message")
    message = _shown(raw_message, secrets, RELAY_MESSAGE_LIMIT) if isinstance(raw_message, str) else ""
    status = _relay_status(fields)
    code = code_for_relay(status, _relay_kinds(fields), message)
    try:
        # Each string masked before it is re-encoded: an escape (``\u001c``) glued to a key would hide it.
        payload = json.dumps({"error": _masked(error, secrets)}, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        payload = "(nested too deeply to show)"
    return LlmError(
        message or endpoint.error_event(),
        code,
        status=status,
        request_id=request_id,
        detail=upstream_detail(code, message),
        cause=Evidence(f"error event: {_shown(payload, secrets, RELAY_PAYLOAD_LIMIT)}"),
    )


class BadEncoding(Exception):
    """A body in a Content-Encoding dsh did not offer, or one that does not inflate."""


class Inflater:
    """Decodes a response body in pieces of at most ``PIECE`` bytes.

    httpx's own decoders inflate each network read whole: a 64 KiB read of a gzip bomb becomes 64 MiB
    in one call. Reading the raw body and inflating with ``max_length`` bounds both the memory of one
    piece and the time between two chances to cancel or time out.
    """

    def __init__(self, header: str | None) -> None:
        codings = [c.strip().lower() for c in (header or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        self._deflate_started = codings != ["deflate"]  # deflate may be zlib-wrapped or raw: try both
        if not codings:
            self._inflate: Any = None
        elif codings in (["gzip"], ["x-gzip"]):
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif codings == ["deflate"]:
            self._inflate = zlib.decompressobj()
        else:
            raise BadEncoding(f"unsupported Content-Encoding: {scrub_surrogates(', '.join(codings))[:80]}")

    def pieces(self, data: bytes) -> Iterator[bytes]:
        if self._inflate is None:
            for start in range(0, len(data), PIECE):
                yield data[start : start + PIECE]
            return
        while data and not self._inflate.eof:
            try:
                piece = self._inflate.decompress(data, PIECE)
            except zlib.error as exc:
                if self._deflate_started:
                    raise BadEncoding(f"the response body does not inflate: {exc}") from None
                self._deflate_started = True
                self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self._deflate_started = True
            data = self._inflate.unconsumed_tail
            if piece:
                yield piece


class _Malformed(Exception):
    """A payload that is not JSON, or JSON of the wrong shape (its text joins the rendered chain)."""


class _RelayError(Exception):
    """A payload that is a relay's error event (``error`` set, no ``choices``): the stream failed there."""

    def __init__(self, error: object) -> None:
        super().__init__("error event")
        self.error = error

_WRONG_SHAPE = "not a chat.completion.chunk object"


# The C scanner that json.loads wraps (set on the instance at run time; typeshed does not declare it).
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _load_payload(payload: str) -> Any:
    """``json.loads`` minus its Python-level wrapper, which costs a third of a small chunk's parse.

    A payload that is exactly one JSON value (every DeepSeek chunk) takes the C scanner directly;
    anything else (surrounding whitespace, extra data, not JSON) goes to ``json.loads``, which
    accepts or raises exactly as before.
    """
    try:
        value, end = _scan_json(payload, 0)
    except StopIteration:
        return json.loads(payload)
    return value if end == len(payload) else json.loads(payload)


def _count(value: object) -> int:
    """A token count as the server reported it, or 0 when it is not one dsh can believe.

    Only an int in ``0 <= n < 2**53`` counts: a bool, a float (``1e400`` parses to inf), a string, a
    negative number or a huge one (``10**400`` parses to an int that no float can hold) is treated like a
    missing field, never clamped into a number that looks real (docs/reliability.md, "Attacks on the
    renderer and usage").
    """
    return value if type(value) is int and 0 <= value < USAGE_COUNT_LIMIT else 0


def _detail(raw: dict[str, Any], group: str, key: str) -> object:
    """``raw[group][key]`` of a usage chunk's details object (OpenAI's shape), or None."""
    details = raw.get(group)
    return details.get(key) if isinstance(details, dict) else None


def _usage(raw: dict[str, Any]) -> Usage:
    """Usage in DeepSeek's shape (``prompt_cache_hit_tokens``) or OpenAI's, which gateways send
    (``prompt_tokens_details.cached_tokens``); reasoning tokens from ``completion_tokens_details``."""
    # DeepSeek's field wins whenever it is present (even 0, or clamped to 0): one count, never a mix of shapes.
    hit = _count(raw["prompt_cache_hit_tokens"] if "prompt_cache_hit_tokens" in raw
                 else _detail(raw, "prompt_tokens_details", "cached_tokens"))
    prompt = _count(raw.get("prompt_tokens"))
    miss = _count(raw.get("prompt_cache_miss_tokens"))
    cached = _detail(raw, "prompt_tokens_details", "cached_tokens")
    deepseek_shape = "prompt_cache_hit_tokens" in raw or "prompt_cache_miss_tokens" in raw
    if not deepseek_shape and type(cached) is int and _count(cached) == cached:
        # OpenAI's shape gives the hits only: the misses are the rest, so a real ``cached_tokens: 0`` reads as 0%
        # hits while an absent one stays unknown (hits and misses both 0: docs/contracts.md, "The prompt cache").
        miss = max(prompt - hit, 0)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_count(raw.get("completion_tokens")),
        total_tokens=_count(raw.get("total_tokens")),
        prompt_cache_hit_tokens=hit,
        prompt_cache_miss_tokens=miss,
        reasoning_tokens=_count(_detail(raw, "completion_tokens_details", "reasoning_tokens")),
    )


class _ChunkParser:
    """Turns one ``data:`` payload into stream events and remembers the finish reason."""

    def __init__(self) -> None:
        self.finish_reason: str | None = None
        self.content_events = 0  # text, reasoning and tool-call deltas seen so far
        self._joiner = SurrogateJoiner()  # rejoins a surrogate pair split across two deltas

    @property
    def has_content(self) -> bool:
        return self.content_events > 0

    def parse(self, payload: str, out: list[StreamEvent]) -> None:
        try:
            chunk = _load_payload(payload)
        except (ValueError, RecursionError) as exc:
            raise _Malformed(str(exc)) from exc
        if not isinstance(chunk, dict):
            raise _Malformed(_WRONG_SHAPE)
        if chunk.get("error") and not chunk.get("choices"):
            raise _RelayError(chunk["error"])
        choices = chunk.get("choices", [])
        usage = chunk.get("usage")
        if not isinstance(choices, list) or (usage is not None and not isinstance(usage, dict)):
            raise _Malformed(_WRONG_SHAPE)
        for choice in choices:
            if not isinstance(choice, dict):
                raise _Malformed(_WRONG_SHAPE)
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise _Malformed(_WRONG_SHAPE)
            self._text(delta.get("reasoning_content"), ReasoningDelta, out)
            self._text(delta.get("content"), TextDelta, out)
            tool_calls = delta.get("tool_calls")
            if tool_calls:
                self._tool_calls(tool_calls, out)
            finish = choice.get("finish_reason")
            if finish is not None:
                if not isinstance(finish, str):
                    raise _Malformed(_WRONG_SHAPE)
                self.finish_reason = finish
        if usage:
            out.append(_usage(usage))

    def _text(self, text: object, kind: type[TextDelta | ReasoningDelta], out: list[StreamEvent]) -> None:
        """A delta's ``content`` (``kind`` TextDelta) or ``reasoning_content`` (ReasoningDelta), if any."""
        if not text:
            return
        if not isinstance(text, str):
            raise _Malformed(_WRONG_SHAPE)
        self.content_events += 1
        text = self._joiner.feed(kind, text)
        if text:  # empty when it was only half a surrogate pair, held for the next delta
            out.append(kind(text))

    def _tool_calls(self, tool_calls: object, out: list[StreamEvent]) -> None:
        if not isinstance(tool_calls, list):
            raise _Malformed(_WRONG_SHAPE)
        for position, call in enumerate(tool_calls):
            if not isinstance(call, dict):
                raise _Malformed(_WRONG_SHAPE)
            function = call.get("function") or {}
            if not isinstance(function, dict):
                raise _Malformed(_WRONG_SHAPE)
            index = call.get("index", position)
            call_id, name = call.get("id"), function.get("name")
            arguments = function.get("arguments") or ""
            if (
                not isinstance(index, int)
                or not isinstance(arguments, str)
                or (call_id is not None and not isinstance(call_id, str))
                or (name is not None and not isinstance(name, str))
            ):
                raise _Malformed(_WRONG_SHAPE)
            self.content_events += 1
            if arguments:
                arguments = self._joiner.feed(index, arguments)
            name = scrub_surrogates(name) if name else name
            call_id = scrub_surrogates(call_id) if call_id else call_id
            out.append(ToolCallDelta(index, call_id or None, name or None, arguments))

    def flush(self) -> list[StreamEvent]:
        """The U+FFFD of a surrogate pair whose second half never came, per channel, before Finish."""
        out: list[StreamEvent] = []
        for channel, text in self._joiner.flush().items():
            if channel is TextDelta:
                out.append(TextDelta(text))
            elif channel is ReasoningDelta:
                out.append(ReasoningDelta(text))
            else:
                out.append(ToolCallDelta(channel, None, None, text))  # type: ignore[arg-type]
        return out


class StreamDecoder:
    """One response body: feed it the raw reads, then :meth:`close` it at the end of the body.

    :meth:`pieces` gives one list of events per bounded piece of inflated body, so that the reader can
    hand events over, let a cancel in and hold its deadlines between two pieces; :meth:`feed` is the
    same for one whole read. A stream that goes bad raises its :class:`LlmError` right after the
    events that came before the bad part. Once ``[DONE]`` arrived, :attr:`done` is set, what follows
    is ignored, and :meth:`close` gives the last events.
    """

    def __init__(
        self,
        content_encoding: str | None = None,
        *,
        request_id: str | None = None,
        secrets: tuple[str, ...] = (),
        max_line_bytes: int = MAX_LINE_BYTES,
        endpoint: Endpoint | None = None,
    ) -> None:
        """``endpoint``: whom the stream comes from, as its failures name it (DeepSeek's by default)."""
        self.request_id = request_id
        self.endpoint = endpoint if endpoint is not None else endpoint_for_url(DEFAULT_BASE_URL)
        self.done = False  # ``data: [DONE]`` arrived
        self._secrets = secrets
        self._sse = SseDecoder(max_line_bytes)
        self._parser = _ChunkParser()
        self._received = False  # any body byte at all (else the body was empty)
        try:
            self._inflater = Inflater(content_encoding)
        except BadEncoding as exc:
            raise LlmError(str(exc), ErrorCode.MALFORMED_RESPONSE, request_id=request_id)

    @property
    def content_events(self) -> int:
        """Text, reasoning and tool-call deltas so far: what the idle deadline counts as content."""
        return self._parser.content_events

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events of one read (raises the stream's error; :meth:`pieces` hands over what came before it)."""
        return [event for events in self.pieces(chunk) for event in events]

    def pieces(self, chunk: bytes) -> Iterator[list[StreamEvent]]:
        """The events of one read, one list per inflated piece of at most ``PIECE`` bytes."""
        if self.done or not chunk:
            return
        self._received = True
        inflated = self._inflater.pieces(chunk)
        while not self.done:
            try:
                piece = next(inflated, None)
            except BadEncoding as exc:
                raise LlmError(str(exc), ErrorCode.MALFORMED_RESPONSE, request_id=self.request_id)
            if piece is None:
                return
            out: list[StreamEvent] = []
            try:
                self._decode(piece, out)
            except LlmError:
                yield out  # the events before the bad part first; the error keeps its cause chain
                raise
            yield out

    def _decode(self, piece: bytes, out: list[StreamEvent]) -> None:
        """Append the events of ``piece`` to ``out``, up to ``[DONE]``; raise the stream's error if it went bad."""
        try:
            items = self._sse.feed_compact(piece)
        except SseLineTooLong as exc:
            raise malformed_payload(exc.head, self._secrets, self.request_id)
        for item in items:
            # An unnamed event arrives as its bare data string (the hot path); named ones count too.
            if isinstance(item, str):
                data = item
            elif isinstance(item, SseComment):
                out.append(KeepAlive())
                continue
            else:
                data = item.data
            if data == "[DONE]":
                self.done = True
                return
            try:
                self._parser.parse(data, out)
            except _Malformed:
                raise malformed_payload(data, self._secrets, self.request_id)
            except _RelayError as relay:
                raise relay_failure(relay.error, self.endpoint, self._secrets, self.request_id)

    def close(self) -> list[StreamEvent]:
        """The end of the body (or ``[DONE]``): the last events, or the error this stream's end is.

        Only a ``[DONE]`` counts in a last event left unterminated. A finish reason then a clean close
        without ``[DONE]`` is a whole answer (every peer client accepts it); a close with no finish
        reason may have cut the answer: ``STREAM_CLOSED``.
        """
        if not self.done:
            self.done = any(
                not isinstance(item, SseComment) and (item if isinstance(item, str) else item.data) == "[DONE]"
                for item in self._sse.close_compact()
            )
        if self.done or self._parser.finish_reason is not None:
            return self._finish()
        if not self._received:
            raise LlmError(self.endpoint.no_body(), ErrorCode.EMPTY_RESPONSE, request_id=self.request_id)
        raise LlmError("SSE stream ended without [DONE]", ErrorCode.STREAM_CLOSED, request_id=self.request_id)

    def _finish(self) -> list[StreamEvent]:
        """Any half surrogate pair still held, then ``Finish``; a finish reason that is a failure raises."""
        parser = self._parser
        reason = parser.finish_reason or "stop"
        if reason not in _NORMAL_FINISH:
            raise LlmError(
                self.endpoint.finish_reason(reason),
                re.sub(r"[^A-Z0-9]+", "_", reason.upper()).strip("_") or ErrorCode.UNKNOWN_FINISH,
                request_id=self.request_id,
            )
        if reason == "stop" and not parser.has_content:
            raise LlmError(
                self.endpoint.empty_completion(), ErrorCode.EMPTY_RESPONSE, request_id=self.request_id
            )
        return [*parser.flush(), Finish(reason)]  # type: ignore[arg-type]
