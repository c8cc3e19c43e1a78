"""The JSON body of a ``/chat/completions`` request (docs/contracts.md): what the client POSTs for a turn."""

from __future__ import annotations

import base64
import json
from typing import Any

from dsh.llm.events import ChatRequest, Message, ToolSpec
from dsh.llm.text import scrub_surrogates

__all__ = ["encoded_body", "request_body", "wire_message", "wire_tool"]


def request_body(request: ChatRequest) -> dict[str, Any]:
    """The exact JSON body; optional fields are omitted, never null."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_message_to_wire(message) for message in request.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [wire_tool(t) for t in request.tools]
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.thinking is not None:
        body["thinking"] = {"type": "enabled" if request.thinking else "disabled"}
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
    return body


def encoded_body(request: ChatRequest) -> bytes:
    """The body as UTF-8. Decoding boundaries keep lone surrogates out of the conversation; should one slip in
    anyway (a caller's own message), it is sent as U+FFFD instead of failing every later turn."""
    text = json.dumps(request_body(request), ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return scrub_surrogates(text).encode("utf-8")


def _message_to_wire(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": _content(message) if message.images
                            else message.content or ""}
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
    if message.prefix:
        wire["prefix"] = True
    return wire


def _content(message: Message) -> list[dict[str, Any]]:
    """A user message with images: its text, then each image as a ``data:`` URL (OpenAI's content parts, which
    DeepSeek's vision models read too); an image whose bytes were not kept is its placeholder text."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    for image in message.images:
        if image.data is None:
            parts.append({"type": "text", "text": image.placeholder})
        else:
            url = f"data:{image.media_type};base64,{base64.b64encode(image.data).decode('ascii')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def wire_message(message: Message) -> dict[str, Any]:
    """One message as the body gives it (the prompt-cache watch hashes it: agent_loop/cache_watch.py)."""
    return _message_to_wire(message)


def wire_tool(spec: ToolSpec) -> dict[str, Any]:
    """One tool as the body's ``tools`` list gives it."""
    return {"type": "function", "function": {"name": spec.name, "description": spec.description,
                                             "parameters": spec.parameters}}
