"""dsh's agent loop: turns and steps, tool calls, turn-end reasons, retry policy, the session log.

Imports point one way: ``repl -> agent_loop -> llm``. The public names are re-exported here and loaded
on first use, so importing one module (the session log, say) does not load the whole loop.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing.TYPE_CHECKING, which would cost every importer `typing`
if TYPE_CHECKING:
    from typing import Any

    from dsh.agent_loop.agent import DEFAULT_MAX_STEPS, Agent, Conversation
    from dsh.agent_loop.events import (
        AssistantMessage,
        Event,
        JobNotice,
        LlmRetry,
        ReasoningDelta,
        StepStart,
        StreamKeepAlive,
        TextDelta,
        ToolCallStart,
        ToolResult,
        TurnEnd,
        TurnStart,
        UnknownEvent,
        from_wire,
        to_wire,
    )
    from dsh.agent_loop.guard import PromptGuard, mask_secrets, secret_shape
    from dsh.agent_loop.reasons import (
        Aborted,
        Completed,
        Disposed,
        EndReason,
        Failed,
        Interrupted,
        MaxTokens,
        OtherEnd,
        Rejected,
    )
    from dsh.agent_loop.retry import NEVER_RETRIED, RETRYABLE_CODES, RetryPolicy
    from dsh.agent_loop.session_log import (
        SessionInfo,
        SessionLog,
        SessionLogError,
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

_EXPORTS: dict[str, str] = {
    "DEFAULT_MAX_STEPS": "dsh.agent_loop.agent",
    "Agent": "dsh.agent_loop.agent",
    "Conversation": "dsh.agent_loop.agent",
    "AssistantMessage": "dsh.agent_loop.events",
    "Event": "dsh.agent_loop.events",
    "JobNotice": "dsh.agent_loop.events",
    "LlmRetry": "dsh.agent_loop.events",
    "ReasoningDelta": "dsh.agent_loop.events",
    "StepStart": "dsh.agent_loop.events",
    "StreamKeepAlive": "dsh.agent_loop.events",
    "TextDelta": "dsh.agent_loop.events",
    "ToolCallStart": "dsh.agent_loop.events",
    "ToolResult": "dsh.agent_loop.events",
    "TurnEnd": "dsh.agent_loop.events",
    "TurnStart": "dsh.agent_loop.events",
    "UnknownEvent": "dsh.agent_loop.events",
    "from_wire": "dsh.agent_loop.events",
    "to_wire": "dsh.agent_loop.events",
    "PromptGuard": "dsh.agent_loop.guard",
    "mask_secrets": "dsh.agent_loop.guard",
    "secret_shape": "dsh.agent_loop.guard",
    "Aborted": "dsh.agent_loop.reasons",
    "Completed": "dsh.agent_loop.reasons",
    "Disposed": "dsh.agent_loop.reasons",
    "EndReason": "dsh.agent_loop.reasons",
    "Failed": "dsh.agent_loop.reasons",
    "Interrupted": "dsh.agent_loop.reasons",
    "MaxTokens": "dsh.agent_loop.reasons",
    "OtherEnd": "dsh.agent_loop.reasons",
    "Rejected": "dsh.agent_loop.reasons",
    "NEVER_RETRIED": "dsh.agent_loop.retry",
    "RETRYABLE_CODES": "dsh.agent_loop.retry",
    "RetryPolicy": "dsh.agent_loop.retry",
    "SessionInfo": "dsh.agent_loop.session_log",
    "SessionLog": "dsh.agent_loop.session_log",
    "SessionLogError": "dsh.agent_loop.session_log",
    "default_root": "dsh.agent_loop.session_log",
    "list_sessions": "dsh.agent_loop.session_log",
    "load_session_file": "dsh.agent_loop.session_log",
    "resolve_session": "dsh.agent_loop.session_log",
    "Approval": "dsh.agent_loop.tools",
    "Approver": "dsh.agent_loop.tools",
    "Tool": "dsh.agent_loop.tools",
    "ToolContext": "dsh.agent_loop.tools",
    "ToolOutput": "dsh.agent_loop.tools",
    "ToolRegistry": "dsh.agent_loop.tools",
    "default_tools": "dsh.agent_loop.tools",
}

__all__ = [
    "DEFAULT_MAX_STEPS",
    "NEVER_RETRIED",
    "RETRYABLE_CODES",
    "Aborted",
    "Agent",
    "Approval",
    "Approver",
    "AssistantMessage",
    "Completed",
    "Conversation",
    "Disposed",
    "EndReason",
    "Event",
    "Failed",
    "Interrupted",
    "JobNotice",
    "LlmRetry",
    "MaxTokens",
    "OtherEnd",
    "PromptGuard",
    "ReasoningDelta",
    "Rejected",
    "RetryPolicy",
    "SessionInfo",
    "SessionLog",
    "SessionLogError",
    "StepStart",
    "StreamKeepAlive",
    "TextDelta",
    "Tool",
    "ToolCallStart",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "TurnEnd",
    "TurnStart",
    "UnknownEvent",
    "default_root",
    "default_tools",
    "from_wire",
    "list_sessions",
    "load_session_file",
    "mask_secrets",
    "resolve_session",
    "secret_shape",
    "to_wire",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)  # PEP 562 lazy export: the name is only known now
    globals()[name] = value
    return value
