"""dsh's model layer: errors and their one-line cause chain, redaction, SSE, the DeepSeek client.

A leaf package: it imports nothing else from dsh.
"""

from llm._version import __version__
from llm.deepseek import DEFAULT_BASE_URL, DEFAULT_MODEL, DeepSeekClient
from llm.errors import ChainLink, HarnessError, LlmError, chain_links, error_chain, unwrap_group
from llm.events import (
    ChatRequest,
    Finish,
    KeepAlive,
    Message,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from llm.redact import RedactingFilter, redact_text, redact_url, url_secrets
from llm.reply import ReplyBuilder
from llm.sse import SseComment, SseDecoder, SseEvent

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "ChainLink",
    "ChatRequest",
    "DeepSeekClient",
    "Finish",
    "HarnessError",
    "KeepAlive",
    "LlmError",
    "Message",
    "ReasoningDelta",
    "RedactingFilter",
    "ReplyBuilder",
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
    "error_chain",
    "redact_text",
    "redact_url",
    "unwrap_group",
    "url_secrets",
]
