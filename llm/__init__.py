"""dsh's model layer: errors and their one-line cause chain, redaction, SSE, the DeepSeek client.

A leaf package: it imports nothing else from dsh. The public names are re-exported here and loaded on
first use, so ``import dsh.llm._version`` (``dsh --version``) does not pay for httpx.
"""

from __future__ import annotations

import importlib

from dsh.llm._version import __version__

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: `typing` alone costs ``dsh --version`` a few ms
if TYPE_CHECKING:
    from typing import Any

    from dsh.llm.codes import ErrorCode
    from dsh.llm.deepseek import DeepSeekClient
    from dsh.llm.defaults import DEFAULT_BASE_URL, DEFAULT_MODEL
    from dsh.llm.errors import ChainLink, HarnessError, LlmError, chain_links, error_chain, unwrap_group
    from dsh.llm.events import (
        ChatRequest,
        Finish,
        KeepAlive,
        Message,
        ModelClient,
        ReasoningDelta,
        SecretHolder,
        StreamEvent,
        TextDelta,
        ToolCall,
        ToolCallDelta,
        ToolSpec,
        Usage,
        client_secrets,
    )
    from dsh.llm.redact import RedactingFilter, Redactor, redact_text, redact_url, url_secrets
    from dsh.llm.reply import ReplyBuilder
    from dsh.llm.sse import SseComment, SseDecoder, SseEvent

_EXPORTS: dict[str, str] = {
    "DEFAULT_BASE_URL": "dsh.llm.defaults",
    "DEFAULT_MODEL": "dsh.llm.defaults",
    "DeepSeekClient": "dsh.llm.deepseek",
    "ErrorCode": "dsh.llm.codes",
    "ChainLink": "dsh.llm.errors",
    "HarnessError": "dsh.llm.errors",
    "LlmError": "dsh.llm.errors",
    "chain_links": "dsh.llm.errors",
    "error_chain": "dsh.llm.errors",
    "unwrap_group": "dsh.llm.errors",
    "ChatRequest": "dsh.llm.events",
    "Finish": "dsh.llm.events",
    "KeepAlive": "dsh.llm.events",
    "Message": "dsh.llm.events",
    "ModelClient": "dsh.llm.events",
    "ReasoningDelta": "dsh.llm.events",
    "SecretHolder": "dsh.llm.events",
    "client_secrets": "dsh.llm.events",
    "StreamEvent": "dsh.llm.events",
    "TextDelta": "dsh.llm.events",
    "ToolCall": "dsh.llm.events",
    "ToolCallDelta": "dsh.llm.events",
    "ToolSpec": "dsh.llm.events",
    "Usage": "dsh.llm.events",
    "RedactingFilter": "dsh.llm.redact",
    "Redactor": "dsh.llm.redact",
    "redact_text": "dsh.llm.redact",
    "redact_url": "dsh.llm.redact",
    "url_secrets": "dsh.llm.redact",
    "ReplyBuilder": "dsh.llm.reply",
    "SseComment": "dsh.llm.sse",
    "SseDecoder": "dsh.llm.sse",
    "SseEvent": "dsh.llm.sse",
}

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "ChainLink",
    "ChatRequest",
    "DeepSeekClient",
    "ErrorCode",
    "Finish",
    "HarnessError",
    "KeepAlive",
    "LlmError",
    "Message",
    "ModelClient",
    "ReasoningDelta",
    "RedactingFilter",
    "Redactor",
    "ReplyBuilder",
    "SecretHolder",
    "SseComment",
    "SseDecoder",
    "SseEvent",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
    "__version__",
    "chain_links",
    "client_secrets",
    "error_chain",
    "redact_text",
    "redact_url",
    "unwrap_group",
    "url_secrets",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)  # PEP 562 lazy export: the name is only known now
    globals()[name] = value
    return value
