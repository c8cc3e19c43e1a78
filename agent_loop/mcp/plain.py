"""What dsh keeps of a server's tools and results: plain frozen data, no SDK types (docs/mcp.md).

:mod:`dsh.agent_loop.mcp.client` is the one module that reads the SDK's pydantic objects; it turns each
listed tool into a :class:`ListedTool` and each tools/call result into a :class:`CallResult` of content
blocks. The manager and :mod:`dsh.agent_loop.mcp.tools` work on these alone, so they need neither the SDK
(imported only when a server starts) nor duck typing on its objects. Text stays as the server sent it:
tools.py cleans and bounds it where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Block", "CallResult", "LinkBlock", "ListedTool", "MediaBlock", "OtherBlock", "ResourceBlock", "TextBlock"]


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One tool of a tools/list answer: its name (sent back in tools/call), what the model may see of it,
    and whether its annotations say ``readOnlyHint``."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    read_only: bool


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str


@dataclass(frozen=True, slots=True)
class MediaBlock:
    """An image or audio block: shown to the model as a placeholder with its type and decoded size."""

    kind: str  # "image" or "audio"
    mime_type: str | None
    data: str  # base64, as sent


@dataclass(frozen=True, slots=True)
class ResourceBlock:
    """An embedded resource: text (``text``) or binary (``blob``, base64)."""

    uri: str
    mime_type: str | None
    text: str | None = None
    blob: str | None = None


@dataclass(frozen=True, slots=True)
class LinkBlock:
    uri: str


@dataclass(frozen=True, slots=True)
class OtherBlock:
    """A block of a kind this client does not know (a newer protocol's): named, never shown raw."""

    kind: str


Block = TextBlock | MediaBlock | ResourceBlock | LinkBlock | OtherBlock


@dataclass(frozen=True, slots=True)
class CallResult:
    """A tools/call answer: its blocks, its structured content (any JSON value, or None) and its ``isError``."""

    content: tuple[Block, ...]
    structured: Any = None
    is_error: bool = False
