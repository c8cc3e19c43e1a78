"""dsh's model layer: errors and their one-line cause chain, redaction, SSE, the DeepSeek client.

A leaf package: it imports nothing else from dsh. The public names are re-exported here and loaded on
first use, so ``import dsh.llm._version`` (``dsh --version``) does not pay for httpx.
"""

from __future__ import annotations

import sys
import types

from dsh.llm._exports import lazy_getattr
from dsh.llm._version import __version__


def _httpx_command_line(*args: object, **kwargs: object) -> None:
    raise SystemExit("httpx's command line is not loaded inside dsh: run httpx from a shell")


# httpx's package imports its command line (httpx._main, with rich, click and pygments' lexers) whenever those
# are installed, as the mcp extra installs them: 100-200 ms at dsh's first request, for a program dsh never runs.
# A stand-in keeps that import out (docs/performance.md, "Editors' first chunk").
if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
    _stand_in = types.ModuleType("httpx._main", "httpx's command line: not loaded inside dsh (dsh.llm)")
    _stand_in.main = _httpx_command_line  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = _stand_in

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: `typing` alone costs ``dsh --version`` a few ms
if TYPE_CHECKING:
    from dsh.llm.codes import ErrorCode
    from dsh.llm.deepseek import DeepSeekClient
    from dsh.llm.defaults import DEFAULT_BASE_URL, DEFAULT_MODEL
    from dsh.llm.errors import ChainLink, HarnessError, LlmError, chain_links, error_chain, unwrap_group
    from dsh.llm.events import (
        ChatRequest,
        Finish,
        Image,
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

# module -> the names this package exports from it, loaded on first use (tests/test_package_exports.py)
_EXPORTS = {
    "dsh.llm.codes": "ErrorCode",
    "dsh.llm.deepseek": "DeepSeekClient",
    "dsh.llm.defaults": "DEFAULT_BASE_URL DEFAULT_MODEL",
    "dsh.llm.errors": "ChainLink HarnessError LlmError chain_links error_chain unwrap_group",
    "dsh.llm.events": "ChatRequest Finish Image KeepAlive Message ModelClient ReasoningDelta SecretHolder StreamEvent "
        "TextDelta ToolCall ToolCallDelta ToolSpec Usage client_secrets",
    "dsh.llm.redact": "RedactingFilter Redactor redact_text redact_url url_secrets",
    "dsh.llm.reply": "ReplyBuilder",
    "dsh.llm.sse": "SseComment SseDecoder SseEvent",
}

__all__ = [
    "DEFAULT_BASE_URL", "DEFAULT_MODEL", "ChainLink", "ChatRequest", "DeepSeekClient", "ErrorCode", "Finish",
    "HarnessError", "Image", "KeepAlive", "LlmError", "Message", "ModelClient", "ReasoningDelta", "RedactingFilter",
    "Redactor", "ReplyBuilder", "SecretHolder", "SseComment", "SseDecoder", "SseEvent", "StreamEvent", "TextDelta",
    "ToolCall", "ToolCallDelta", "ToolSpec", "Usage", "__version__", "chain_links", "client_secrets", "error_chain",
    "redact_text", "redact_url", "unwrap_group", "url_secrets",
]

if not TYPE_CHECKING:  # hidden from the type checker, so that a name not exported here is an error there
    __getattr__ = lazy_getattr(globals(), _EXPORTS)
