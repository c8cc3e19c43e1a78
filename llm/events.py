"""What a chat-completions stream yields, and what a request carries. Plain data classes."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "USAGE_COUNT_LIMIT",
    "ChatRequest",
    "Finish",
    "Image",
    "KeepAlive",
    "Message",
    "ModelClient",
    "ReasoningDelta",
    "SecretHolder",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
    "client_secrets",
]


# --- stream events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One fragment of a tool call. ``id`` and ``name`` are sticky per ``index`` (first fragment)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


USAGE_COUNT_LIMIT = 2**53  # each Usage count is an int below this, so any float arithmetic on it is exact


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts from a usage chunk; the client keeps each in ``0 <= n < USAGE_COUNT_LIMIT``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_cache_hit_tokens: int = 0
    prompt_cache_miss_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Finish:
    """The stream finished normally (held until ``[DONE]``): ``stop``, ``tool_calls`` or ``length``."""

    reason: Literal["stop", "tool_calls", "length"]


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """An SSE comment arrived: the socket is alive, but this is not content."""


StreamEvent = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish | KeepAlive


class ModelClient(Protocol):
    """What the agent loop and the front ends need from a model client: one streamed completion per request.

    :class:`dsh.llm.deepseek.DeepSeekClient` conforms, as do the demo's client and the tests' fakes
    (structurally: nothing subclasses this). Callers close the stream with ``contextlib.aclosing``. A client
    may also offer ``secrets`` (values to redact: read them with :func:`client_secrets`), ``base_url_display``
    and ``aclose()``; those are optional.
    """

    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]: ...


@runtime_checkable
class SecretHolder(Protocol):
    """A client that knows values to mask (its key, URL and proxy credentials), as ``DeepSeekClient`` does."""

    @property
    def secrets(self) -> tuple[str, ...]: ...


def client_secrets(client: object) -> tuple[str, ...]:
    """The strings ``client`` asks to have masked; none for a client without ``secrets`` (a test's fake)."""
    secrets = client.secrets if isinstance(client, SecretHolder) else ()
    return tuple(s for s in secrets if isinstance(s, str)) if isinstance(secrets, tuple | list) else ()


# --- request -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it


@dataclass(frozen=True, slots=True)
class Image:
    """An image a user message sends (docs/prompt.md, "Images"): checked before it gets here (magic bytes, size,
    pixels). ``data`` is None where its bytes were not kept (a resumed session log without ``keep_images``): the
    request then carries :attr:`placeholder` instead. ``keep``: its bytes go into the session log."""

    name: str  # as the user or the model named it
    media_type: str  # image/png, image/jpeg, image/gif or image/webp
    sha256: str  # of the bytes, hex
    size: int  # bytes
    tokens: int  # estimated
    data: bytes | None = field(default=None, compare=False, repr=False)
    keep: bool = field(default=False, compare=False)

    @property
    def placeholder(self) -> str:
        """What stands for the image where its bytes are not sent or kept."""
        return f"[image {self.name}: {self.media_type}, {self.size} bytes, sha256 {self.sha256[:16]}]"


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # The last message of a prefix-completion request: the model continues this assistant text (DeepSeek's
    # beta "chat prefix completion"; the client sends it to the beta route: docs/endpoints.md, "DeepSeek").
    prefix: bool = False
    images: tuple[Image, ...] = ()  # a user message's images, sent after its text


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    thinking: bool | None = None  # None: field omitted
    reasoning_effort: Literal["low", "high", "max"] | None = None

    @property
    def continues(self) -> bool:
        """Whether this is a prefix-completion request: its last message is an assistant ``prefix``."""
        return bool(self.messages) and self.messages[-1].prefix
