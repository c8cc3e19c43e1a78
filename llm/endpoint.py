"""Whom a client talks to, and the words every message uses for it (docs/endpoints.md).

An :class:`Endpoint` is a name (``DeepSeek``, ``LiteLLM``, ...) or none, plus the ``host:port`` it was
reached at. ``DeepSeek`` only when the host is DeepSeek's API host; otherwise the name the server gives
itself where it really does (its host, or a response header; docs/failure-kit.md lists what each one
sends), else it stays unnamed and messages say ``the endpoint at <host:port>``. Each phrase of the
client's error table is a method here, so the named and unnamed forms live side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from dsh.llm.defaults import LEGACY_MODELS

__all__ = ["DEEPSEEK", "DIALECTS", "Endpoint", "default_dialect", "endpoint_for_url", "host_and_address",
           "legacy_note", "legacy_warning", "name_from_headers"]

DEEPSEEK = "DeepSeek"
# How dsh speaks to an endpoint and reads its answers (docs/endpoints.md, "Dialects"): DeepSeek's request
# extensions and DeepSeek-specific answers (the concurrency cap's 429, legacy model names), or plain OpenAI.
# A dialect never names a server: only the host makes one "DeepSeek".
DIALECTS = ("deepseek", "openai")

# A host that is the service itself (its documented API base URL); never a port.
_NAMES_BY_HOST = {
    "api.deepseek.com": DEEPSEEK,
    "openrouter.ai": "OpenRouter",
    "ollama.com": "Ollama",
}
# ``Server:`` values a server really sends about itself (llama.cpp's server sets it on every answer).
_NAMES_BY_SERVER_HEADER = {"llama.cpp": "llama.cpp"}
_LITELLM_HEADER = "x-litellm-"


def host_and_address(url: str) -> tuple[str, str]:
    """``(host, host:port)`` of a URL, the port filled in from the scheme; empty for a URL without a host."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "", ""
    if not host:
        return "", ""
    shown = f"[{host}]" if ":" in host else host
    return host, f"{shown}:{port}"


def endpoint_for_url(url: str, name: str | None = None) -> Endpoint:
    """The endpoint at a (redacted) URL: ``name`` when one is known (learnt from headers), else by its
    host where the host is the service's own."""
    host, address = host_and_address(url)
    return Endpoint(name or _NAMES_BY_HOST.get(host), address or url)


def default_dialect(url: str) -> str:
    """``deepseek`` for DeepSeek's own API host, ``openai`` for any other endpoint."""
    return DIALECTS[0] if endpoint_for_url(url).is_deepseek else DIALECTS[1]


def name_from_headers(headers: Mapping[str, str]) -> str | None:
    """The name a response's headers give the server, or None: LiteLLM by any ``x-litellm-*`` header,
    llama.cpp's server by its ``Server`` header. ``headers`` keys may be any case."""
    server = None
    for key, value in headers.items():
        lowered = key.lower()
        if lowered.startswith(_LITELLM_HEADER):
            return "LiteLLM"
        if lowered == "server":
            server = _NAMES_BY_SERVER_HEADER.get(value.strip().lower())
    return server


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A name, or None for a server that does not say who it is, and the ``host:port`` it was reached at."""

    name: str | None
    address: str

    @property
    def is_deepseek(self) -> bool:
        return self.name == DEEPSEEK

    def learn(self, headers: Mapping[str, str]) -> Endpoint:
        """This endpoint, named from a response's headers when its host did not name it already."""
        if self.name is not None:
            return self
        name = name_from_headers(headers)
        return self if name is None else replace(self, name=name)

    def __str__(self) -> str:
        """``DeepSeek``, ``LiteLLM``, ... or ``the endpoint at 127.0.0.1:4000``."""
        return self.name if self.name is not None else f"the endpoint at {self.address}"

    # The client's error table, one phrase per row (docs/failure-kit.md).

    def request_failed(self, url: str, via: str = "") -> str:
        if self.name:
            return f"{self.name} API request to {url}{via} failed"
        return f"request to the endpoint at {url}{via} failed"

    def stream_failed(self, url: str, via: str = "") -> str:
        if self.name:
            return f"{self.name} API stream from {url}{via} failed"
        return f"stream from the endpoint at {url}{via} failed"

    def aborted(self) -> str:
        return f"{self.name} request aborted by caller" if self.name else "request aborted by caller"

    def no_headers(self, limit: str) -> str:
        return f"no response headers from {self} within {limit}"

    def no_content(self, limit: str) -> str:
        return f"no content from {self} within {limit} (keep-alives only)"

    def idle(self, limit: str) -> str:
        if self.name:
            return f"{self.name} stream idle timeout after {limit}"
        return f"stream idle timeout after {limit} from {self}"

    def http_error(self, status: int) -> str:
        return f"{self.name} API error (HTTP {status})" if self.name else f"API error (HTTP {status}) from {self}"

    def no_body(self) -> str:
        return f"{self.name} API returned no response body" if self.name else f"{self} returned no response body"

    def finish_reason(self, reason: str) -> str:
        if self.name:
            return f'{self.name} stream finished with finish_reason "{reason}"'
        return f'stream from {self} finished with finish_reason "{reason}"'

    def empty_completion(self) -> str:
        return f"{self.name} API returned an empty completion" if self.name else f"{self} returned an empty completion"

    def error_event(self) -> str:
        """A relay's in-stream error event that carried no message of its own."""
        return f"{self} sent an error event in the stream"


def legacy_note(name: str) -> str | None:
    """The line for a legacy DeepSeek model name (what serves it, and the name to set), or None for any other.
    Only about DeepSeek's own host: :func:`legacy_warning` checks the endpoint."""
    if name not in LEGACY_MODELS:
        return None
    current, version = LEGACY_MODELS[name]
    return (f"model {name} is a legacy name: DeepSeek serves it with {current} ({version}) at "
            f"{version.rsplit('-', 1)[-1]} prices; set model = \"{current}\"")


def legacy_warning(model: str, base_url: str, source: str | None = None, dialect: str | None = None) -> str | None:
    """:func:`legacy_note` for a run whose endpoint is DeepSeek's own host or speaks the ``deepseek`` dialect
    (``dialect`` None: by the host), with where the model setting came from (``DSH_MODEL (environment)``) when that
    is known. Light enough for the start-up before the first prompt (the model table and its prices are not loaded
    for it)."""
    deepseek = endpoint_for_url(base_url).is_deepseek or dialect == DIALECTS[0]
    note = legacy_note(model) if deepseek else None
    if note is None:
        return None
    return f"{note} where the model is set: {source}" if source else note
