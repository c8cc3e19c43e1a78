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

_EXPORTS: dict[str, str] = {
    "DEFAULT_MAX_STEPS": "dsh.agent_loop.agent",
    "Agent": "dsh.agent_loop.agent",
    "Conversation": "dsh.agent_loop.agent",
    "DURABLE_TYPES": "dsh.agent_loop.events",
    "Event": "dsh.agent_loop.events",
    "PromptGuard": "dsh.agent_loop.guard",
    "mask_secrets": "dsh.agent_loop.guard",
    "secret_shape": "dsh.agent_loop.guard",
    "Aborted": "dsh.agent_loop.reasons",
    "Completed": "dsh.agent_loop.reasons",
    "Disposed": "dsh.agent_loop.reasons",
    "Failed": "dsh.agent_loop.reasons",
    "Interrupted": "dsh.agent_loop.reasons",
    "MaxTokens": "dsh.agent_loop.reasons",
    "OtherEnd": "dsh.agent_loop.reasons",
    "Rejected": "dsh.agent_loop.reasons",
    "TurnEnd": "dsh.agent_loop.reasons",
    "NEVER_RETRIED": "dsh.agent_loop.retry",
    "RETRYABLE_CODES": "dsh.agent_loop.retry",
    "RetryPolicy": "dsh.agent_loop.retry",
    "SessionInfo": "dsh.agent_loop.session_log",
    "SessionLog": "dsh.agent_loop.session_log",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
