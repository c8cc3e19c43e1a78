"""An MCP server's tools as dsh :class:`~dsh.agent_loop.tools.Tool` objects (docs/mcp.md).

* Names: ``mcp__<server>__<tool>``, sanitized to what the API accepts (``[A-Za-z0-9_-]``, at most 64
  characters); a name cut short or taken already gets a suffix from a hash of the tool's own name, so the
  same listing always gives the same names. A tool whose own name is not printable (a newline, an escape, a
  bidi control, a lone surrogate) is left out: that name would be shown in the approval question and sent
  back in tools/call, and no real tool needs one.
* Limits: at most :data:`MAX_TOOLS_PER_SERVER` tools and :data:`MAX_SCHEMA_BYTES_PER_SERVER` of descriptions
  and schemas per server, in the server's order; what is left out is said in one line (:func:`offer`).
* Descriptions: controls removed, bounded, masked. Schemas: the server's, or an empty object when it sends
  none usable; every string in them cleaned and masked like a description.
* Results: text as it is; structured content as JSON; images, audio and resources as short placeholders;
  bounded here and again by the registry (MAX_RESULT_CHARS), masked by the agent like every tool result.
* Approval: ``readOnlyHint`` tools run without asking; the others ask the approver with a
  :class:`McpCallRequest` (yes / no / always for this tool, kept in ``session_state`` under the server and
  the server's own name for the tool, never dsh's name, which a re-listing may give another tool); with no approver
  they are denied unless the server is ``approve = "auto"`` or the session allows MCP.

Tools and results arrive as plain data (agent_loop/mcp/plain.py, converted by client.py), so this module
does not import the SDK.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dsh.agent_loop.mcp.plain import (
    Block,
    CallResult,
    LinkBlock,
    ListedTool,
    MediaBlock,
    OtherBlock,
    ResourceBlock,
    TextBlock,
)
from dsh.agent_loop.permissions import Action
from dsh.agent_loop.tools.registry import (
    MAX_RESULT_CHARS,
    McpCallRequest,
    Tool,
    ToolContext,
    ToolOutput,
    ask_approval,
)

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "MCP_DENIED",
    "MCP_NO_APPROVER",
    "McpCallRequest",
    "McpToolSpec",
    "Offer",
    "always_key",
    "build_tool",
    "clean_arguments",
    "format_result",
    "offer",
    "tool_names",
]

MAX_NAME_CHARS = 64  # the function-name limit of the OpenAI-compatible APIs
MAX_DESCRIPTION_CHARS = 2048
_MAX_SCHEMA_CHARS = 64 * 1024
# Per server, what goes to the model in every request. 128 is the most functions OpenAI's API takes in one
# request; 256 KiB (~64k tokens) is already half a 128k context, ~35x what server-filesystem lists (14 tools,
# 7.4 KB of descriptions and schemas) and ~60x server-everything (13 tools, 4.3 KB).
MAX_TOOLS_PER_SERVER = 128
MAX_SCHEMA_BYTES_PER_SERVER = 256 * 1024
LEFT_OUT_NAME = "names with control characters"
LEFT_OUT_COUNT = f"past the limit of {MAX_TOOLS_PER_SERVER} tools per server"
LEFT_OUT_BYTES = f"past the limit of {MAX_SCHEMA_BYTES_PER_SERVER >> 10} KiB of schemas per server"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
# A lone surrogate cannot be encoded as UTF-8: in a result or in arguments it would fail the session log,
# the request to the model, or the SDK's writer (which ends the transport); it becomes U+FFFD.
_SURROGATES = re.compile(r"[\ud800-\udfff]")
MCP_DENIED = "Error: the user denied this MCP tool call"
MCP_NO_APPROVER = (
    "Error: this MCP tool needs approval and no one is available to approve it here "
    "(run dsh with --allow-mcp, or set approve = \"auto\" for the server)"
)
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class McpToolSpec:
    """One listed tool as dsh keeps it: the server's own name, dsh's name for it, and what the model sees."""

    server: str
    tool: str  # the server's name, sent back in tools/call
    name: str  # mcp__<server>__<tool>, sanitized and unique
    description: str
    parameters: dict[str, Any]
    read_only: bool


def _suffix(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def tool_names(server: str, tools: Iterable[str], taken: set[str]) -> list[str]:
    """dsh's name for each of ``server``'s ``tools``, in order; every name added to ``taken``."""
    names: list[str] = []
    for tool in tools:
        base = f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
        name = base
        if len(base) > MAX_NAME_CHARS or base in taken or base != f"mcp__{server}__{tool}":
            name = f"{base[: MAX_NAME_CHARS - 9]}_{_suffix(tool)}"
        while name in taken:  # two tools whose names hash alike: extremely unlikely, still deterministic
            name = f"{name[: MAX_NAME_CHARS - 9]}_{_suffix(name)}"
        taken.add(name)
        names.append(name)
    return names


@dataclass(frozen=True, slots=True)
class Offer:
    """What of one server's (allowed) listing goes to the model: each kept tool with its cleaned description
    and schema, in the server's order, and how many were left out for each reason."""

    kept: tuple[tuple[ListedTool, str, dict[str, Any]], ...]
    left_out: dict[str, int]
    listed: int

    def line(self, server: str) -> str | None:
        """One line naming what was left out, or None. Closed facts only: the server's name is a config
        name, the tools are counted, never named."""
        if not self.left_out:
            return None
        total = sum(self.left_out.values())
        if len(self.left_out) == 1:
            why = next(iter(self.left_out))
        else:
            why = "; ".join(f"{count}: {reason}" for reason, count in self.left_out.items())
        return f"MCP server {server}: {total} of {self.listed} tools left out ({why})"


def offer(listed: Iterable[ListedTool], mask: Callable[[str], str]) -> Offer:
    """The tools of one server to offer: printable names only, then in order while the count and the bytes
    of descriptions and schemas stay within the server's limits (a tool that does not fit is left out, a
    smaller one after it may still fit)."""
    kept: list[tuple[ListedTool, str, dict[str, Any]]] = []
    left_out: dict[str, int] = {}
    size = count = 0
    for tool in listed:
        count += 1
        if not (tool.name and tool.name.isprintable()):
            reason: str | None = LEFT_OUT_NAME
        elif len(kept) == MAX_TOOLS_PER_SERVER:
            reason = LEFT_OUT_COUNT
        else:
            description, schema = mask(clean_description(tool.description)), clean_schema(tool.input_schema, mask)
            cost = len(description.encode("utf-8", "replace")) + len(json.dumps(schema).encode("utf-8", "replace"))
            reason = LEFT_OUT_BYTES if size + cost > MAX_SCHEMA_BYTES_PER_SERVER else None
            if reason is None:
                size += cost
                kept.append((tool, description, schema))
        if reason is not None:
            left_out[reason] = left_out.get(reason, 0) + 1
    return Offer(tuple(kept), left_out, count)


def clean_description(text: object) -> str:
    if not isinstance(text, str):
        return ""
    text = _CONTROLS.sub("", text).strip()
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


def clean_schema(schema: object, mask: Callable[[str], str]) -> dict[str, Any]:
    """The server's input schema when it is a JSON object schema of bounded size, else an empty object.

    Every string in it -- property names, descriptions, titles, enum values, defaults -- is cleaned of
    controls and masked as a description is: the schema reaches the model and the session log as it is.
    """
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return dict(_EMPTY_SCHEMA)
    try:
        if len(json.dumps(schema)) > _MAX_SCHEMA_CHARS:
            return dict(_EMPTY_SCHEMA)
        cleaned = _clean_strings(schema, mask)
    except (TypeError, ValueError, RecursionError):
        return dict(_EMPTY_SCHEMA)
    return {"type": "object", **cleaned}


def _clean_strings(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return mask(_CONTROLS.sub("", value))
    if isinstance(value, dict):
        return {_clean_strings(key, mask): _clean_strings(item, mask) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean_strings(item, mask) for item in value]
    return value


def _decoded_size(data: object) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _placeholder_text(value: object, limit: int = 200) -> str:
    text = _CONTROLS.sub("", str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _block_text(block: Block) -> str:
    match block:
        case TextBlock(text=text):
            return text
        case MediaBlock(kind=kind, mime_type=mime_type, data=data):
            return f"[{kind}: {_placeholder_text(mime_type or 'unknown', 80)}, {_decoded_size(data)} bytes]"
        case ResourceBlock(uri=uri, mime_type=mime_type, text=text, blob=blob):
            where = f"{_placeholder_text(uri)}, {_placeholder_text(mime_type or 'unknown', 80)}"
            if text is not None:
                return f"[resource: {where}, {len(text)} characters]"
            return f"[resource: {where}, {_decoded_size(blob)} bytes]"
        case LinkBlock(uri=uri):
            return f"[resource link: {_placeholder_text(uri)}]"
        case OtherBlock(kind=kind):
            return f"[{_placeholder_text(kind or 'unknown', 40)} content]"


def format_result(result: CallResult) -> ToolOutput:
    """A tools/call result as the model gets it (the server's own ``isError`` kept): bounded as it is built."""
    parts: list[str] = []
    size = 0
    for block in result.content:
        text = _block_text(block)
        parts.append(text)
        size += len(text)
        if size > MAX_RESULT_CHARS:
            break
    if result.structured is not None and not any(isinstance(block, TextBlock) for block in result.content):
        try:
            parts.append(json.dumps(result.structured, ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):
            parts.append("[structured content that is not JSON]")
    text = _SURROGATES.sub("\ufffd", "\n".join(parts)) if parts else "(no content)"
    if len(text) > MAX_RESULT_CHARS:
        omitted = len(text) - MAX_RESULT_CHARS
        text = text[:MAX_RESULT_CHARS] + f"\n[tool output truncated: {omitted} characters omitted]"
    return ToolOutput(f"Error: {text}" if result.is_error else text, is_error=result.is_error)


def clean_arguments(value: Any) -> Any:
    """Model-produced arguments with every lone surrogate (in keys too) replaced by U+FFFD, before tools/call."""
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if isinstance(value, dict):
        return {clean_arguments(key): clean_arguments(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clean_arguments(item) for item in value]
    return value


CallTool = Callable[[McpToolSpec, dict[str, Any]], Awaitable[ToolOutput]]


def always_key(server: str, tool: str) -> str:
    """Where an "always" for ``server``'s own ``tool`` is kept: both names, unambiguously (JSON)."""
    return "mcp.always." + json.dumps([server, tool])


def build_tool(spec: McpToolSpec, call: CallTool, *, auto: Callable[[], bool]) -> Tool:
    """The dsh tool for ``spec``; ``auto()`` says whether calls run without asking (approve = "auto", allow_mcp)."""
    key = always_key(spec.server, spec.tool)

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        args = clean_arguments(args)  # what the approver sees is what the server gets
        if not spec.read_only:  # the mode may refuse even a trusted server's tool (plan; docs/safety.md)
            denial = await ask_approval(ctx, ctx.approver, McpCallRequest(spec.server, spec.tool, dict(args)),
                                        always_key=key, denied=MCP_DENIED, no_approver=MCP_NO_APPROVER,
                                        action=Action.MCP_TRUSTED if auto() else Action.MCP)
            if denial is not None:
                return denial
        return await call(spec, args)

    description = spec.description or f"The {spec.tool} tool of the MCP server {spec.server}."
    return Tool(spec.name, description, spec.parameters, run, concurrency_safe=spec.read_only)
