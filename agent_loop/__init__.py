"""dsh's agent loop: turns and steps, tool calls, turn-end reasons, retry policy, the session log.

Imports point one way: ``repl -> agent_loop -> llm``.
"""

from dsh.agent_loop.agent import DEFAULT_MAX_STEPS, Agent, Conversation
from dsh.agent_loop.events import DURABLE_TYPES, Event
from dsh.agent_loop.guard import PromptGuard, mask_secrets, secret_shape
from dsh.agent_loop.reasons import (
    Aborted,
    Completed,
    Disposed,
    Failed,
    Interrupted,
    MaxTokens,
    OtherEnd,
    Rejected,
    TurnEnd,
)
from dsh.agent_loop.retry import NEVER_RETRIED, RETRYABLE_CODES, RetryPolicy
from dsh.agent_loop.session_log import (
    SessionInfo,
    SessionLog,
    default_root,
    list_sessions,
    load_session_file,
    resolve_session,
)
from dsh.agent_loop.tools import (
    Approval,
    Approver,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    default_tools,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DURABLE_TYPES",
    "NEVER_RETRIED",
    "RETRYABLE_CODES",
    "Aborted",
    "Agent",
    "Approval",
    "Approver",
    "Completed",
    "Conversation",
    "Disposed",
    "Event",
    "Failed",
    "Interrupted",
    "MaxTokens",
    "OtherEnd",
    "PromptGuard",
    "Rejected",
    "RetryPolicy",
    "SessionInfo",
    "SessionLog",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "TurnEnd",
    "default_root",
    "default_tools",
    "list_sessions",
    "load_session_file",
    "mask_secrets",
    "resolve_session",
    "secret_shape",
]
