"""The error table's routing: an HTTP status (or a relay's error event) to an error code, and the
headers an answer carries about itself (docs/contracts.md, "Error codes"; docs/failure-kit.md).

Pure functions on plain values, so the client (an HTTP error answer) and the stream decoder (a relay's
``data: {"error": {...}}`` event) route by one table.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Mapping

from dsh.llm.codes import ErrorCode
from dsh.llm.network import FailureDetail
from dsh.llm.text import scrub_surrogates

__all__ = ["code_for_relay", "code_for_status", "error_kinds", "provider_message", "proxy_answered", "relayed_upstream",
           "request_id", "retry_after_seconds", "upstream_detail"]

_QUOTA_WORDING = re.compile(r"(?i)insufficient.?balance|quota|top.?up|billing")
# Context overflow in each server's own words (docs/endpoints.md, "Local servers"): OpenAI's and vLLM's "maximum
# context length", llama.cpp's "exceeds the available context size", vLLM's "longer than the maximum model length",
# Ollama's "longer than the context length", LM Studio's "context length of only".
_CONTEXT_WORDING = re.compile(
    r"(?i)context.?(length|window|size)|maximum.{0,20}tokens|too many tokens|prompt is too long|reduce the length"
    r"|maximum model length"
)
# A gateway relaying its upstream's refusal names the upstream's exception: LiteLLM writes
# ``litellm.AuthenticationError: AuthenticationError: DeepseekException - Authentication Fails ...``.
_UPSTREAM_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*Exception - ")

# A relay's error ``type`` (or non-numeric ``code``) as the status it stands for (OpenAI's and
# Anthropic's type names, which the relays pass on); anything else is the relay's own failure: 500.
_STATUS_BY_TYPE = {
    "invalid_request_error": 400,
    "bad_request": 400,
    "authentication_error": 401,
    "auth_error": 401,
    "invalid_api_key": 401,
    "insufficient_quota": 402,
    "billing_hard_limit_reached": 402,
    "permission_error": 403,
    "permission_denied": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit": 429,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "too_many_requests": 429,
    "internal_server_error": 500,
    "server_error": 500,
    "api_error": 500,
    "service_unavailable": 503,
    "overloaded_error": 529,
}
# OpenAI's ``code``, and llama.cpp's ``type`` for a prompt over its ``--ctx-size`` (``format_error_response``).
_CONTEXT_TYPES = frozenset({"context_length_exceeded", "context_window_exceeded", "exceed_context_size_error"})
# Kinds that say only "the request" or "the server": a specific kind beside one wins, in either field.
# OpenAI sends ``type: invalid_request_error, code: invalid_api_key``; DeepSeek ``type: authentication_error,
# code: invalid_request_error``.
_GENERIC_KINDS = frozenset({"invalid_request_error", "bad_request", "api_error", "server_error",
                            "internal_server_error"})

# Where an answer says when to come back, most precise first (the OpenAI SDK reads ``retry-after-ms``
# before ``retry-after``); LiteLLM passes its upstream's under an ``llm_provider-`` prefix.
_RETRY_AFTER_HEADERS = (
    ("retry-after-ms", True),
    ("retry-after", False),
    ("llm_provider-retry-after-ms", True),
    ("llm_provider-retry-after", False),
)
_PROXY_SERVER = re.compile(r"(?i)squid|tinyproxy|privoxy|polipo|ziproxy|3proxy|ccproxy|proxy")
_REQUEST_ID_HEADERS = ("x-request-id", "x-deepseek-request-id", "x-litellm-call-id")


def code_for_status(status: int, message: str | None, kinds: tuple[str, ...] = ()) -> str:
    """The code of an HTTP error answer: by status, and by its provider message's wording; a 4xx whose error
    ``type`` or ``code`` (``kinds``: :func:`error_kinds`) names a context overflow is CONTEXT_WINDOW_EXCEEDED."""
    text = message or ""
    if 400 <= status < 500 and status not in (401, 403, 429) and any(kind.lower() in _CONTEXT_TYPES for kind in kinds):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    if status in (401, 403):
        return ErrorCode.AUTH
    if status == 402 or _QUOTA_WORDING.search(text):
        return ErrorCode.QUOTA
    if status == 429:
        return ErrorCode.RATE_LIMIT
    if status == 400 and _CONTEXT_WORDING.search(text):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    if status in (400, 413):
        return ErrorCode.INVALID_REQUEST
    if status >= 500:
        return ErrorCode.SERVER
    return f"HTTP_{status}"


def code_for_relay(status: int | None, kinds: tuple[str, ...], message: str | None) -> str:
    """The code of a relay's in-stream error event, by the same table as an HTTP answer.

    ``status`` is the event's numeric ``code`` (LiteLLM sends ``"500"``), ``kinds`` its ``type`` and a
    ``code`` that is a word; a specific kind (``invalid_api_key``) outranks a generic one
    (``invalid_request_error``) in either field. A context-length kind or wording is
    CONTEXT_WINDOW_EXCEEDED whatever the status; with neither a status nor a known kind the failure is the
    relay's own: SERVER.
    """
    lowered = [kind.lower() for kind in kinds]
    if any(kind in _CONTEXT_TYPES for kind in lowered):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    if status is None:
        known = sorted((kind in _GENERIC_KINDS, position) for position, kind in enumerate(lowered)
                       if kind in _STATUS_BY_TYPE)
        status = _STATUS_BY_TYPE[lowered[known[0][1]]] if known else 500
    if 400 <= status < 500 and _CONTEXT_WORDING.search(message or ""):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    return code_for_status(status, message)


def relayed_upstream(message: str | None) -> bool:
    """Whether an error message is a gateway's relay of its upstream's failure (``<Provider>Exception - ``)."""
    return bool(message) and _UPSTREAM_EXCEPTION.search(message or "") is not None


_UPSTREAM_DETAILS: dict[str, str] = {
    ErrorCode.AUTH: FailureDetail.UPSTREAM_AUTH,
    ErrorCode.QUOTA: FailureDetail.UPSTREAM_QUOTA,
}


def upstream_detail(code: str, message: str | None) -> str | None:
    """``UPSTREAM_AUTH`` / ``UPSTREAM_QUOTA`` for an AUTH / QUOTA failure that a gateway relayed from its
    upstream (the gateway's own credential or account, not the user's), else None."""
    detail = _UPSTREAM_DETAILS.get(code)
    return detail if detail is not None and relayed_upstream(message) else None


def _seconds(value: str) -> float | None:
    """Delta-seconds or an HTTP-date, as seconds from now."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return None if when is None else when.timestamp() - time.time()


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """When to retry, as positive seconds, from the first of ``retry-after-ms``, ``retry-after`` and their
    ``llm_provider-`` forms that holds a usable value; zero, past or garbage ones are skipped."""
    for name, in_milliseconds in _RETRY_AFTER_HEADERS:
        value = (headers.get(name) or "").strip()
        if not value:
            continue
        seconds = _milliseconds(value) if in_milliseconds else _seconds(value)
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            return seconds
    return None


def _milliseconds(value: str) -> float | None:
    try:
        return float(value) / 1000.0
    except ValueError:
        return None


def request_id(headers: Mapping[str, str]) -> str | None:
    """``x-request-id``, else ``x-deepseek-request-id``, else ``x-litellm-call-id`` (docs/failure-kit.md)."""
    for name in _REQUEST_ID_HEADERS:
        value = (headers.get(name) or "").strip()
        if value:
            return value
    return None


def _parsed(body: bytes) -> dict[str, object] | None:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def provider_message(body: bytes) -> str | None:
    """The message an error answer's JSON body carries (``{"error": {"message"}}``, ``{"message"}``, or LM Studio's
    and Ollama's native ``{"error": "<text>"}``), if any."""
    parsed = _parsed(body)
    if parsed is None:
        return None
    error = parsed.get("error")
    for text in (error.get("message") if isinstance(error, dict) else error, parsed.get("message")):
        if isinstance(text, str) and text.strip():
            return scrub_surrogates(text.strip())
    return None


def error_kinds(body: bytes) -> tuple[str, ...]:
    """The words an error answer names its kind by: the ``type`` and a ``code`` that is a word, of its ``error``
    object or (vLLM's older shape) of the body itself (``exceed_context_size_error``, ``context_length_exceeded``)."""
    parsed = _parsed(body)
    if parsed is None:
        return ()
    error = parsed.get("error")
    fields = error if isinstance(error, dict) else parsed
    return tuple(value for key in ("type", "code") if isinstance(value := fields.get(key), str) and value)


def proxy_answered(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a proxy, not the endpoint, produced this error answer (docs/contracts.md, "Error codes": PROXY)."""
    if status == 407 or "proxy-authenticate" in headers or "x-squid-error" in headers:
        return True
    if status >= 400 and _PROXY_SERVER.search(headers.get("server", "")):
        return True
    return status >= 500 and "via" in headers
