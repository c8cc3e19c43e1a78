"""dsh's agent loop: turns and steps, tool calls, turn-end reasons, retry policy, the session log.

Imports point one way: ``repl -> agent_loop -> llm``. The public names are re-exported here and loaded
on first use, so importing one module (the session log, say) does not load the whole loop.
"""

from __future__ import annotations

from dsh.llm._exports import lazy_getattr

TYPE_CHECKING = False  # not typing.TYPE_CHECKING, which would cost every importer `typing`
if TYPE_CHECKING:
    from dsh.agent_loop.agent import DEFAULT_MAX_STEPS, Agent
    from dsh.agent_loop.conversation import Conversation
    from dsh.agent_loop.events import (
        AssistantMessage,
        Event,
        JobNotice,
        LlmContinue,
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
    from dsh.agent_loop.session_files import SessionLogError, default_root
    from dsh.agent_loop.session_list import SessionInfo, list_sessions, resolve_session
    from dsh.agent_loop.session_log import SessionLog
    from dsh.agent_loop.session_read import load_session_file
    from dsh.agent_loop.tools import Approval, Approver, Tool, ToolContext, ToolOutput, ToolRegistry, default_tools

# module -> the names this package exports from it, loaded on first use (tests/test_package_exports.py)
_EXPORTS = {
    "dsh.agent_loop.agent": "DEFAULT_MAX_STEPS Agent",
    "dsh.agent_loop.conversation": "Conversation",
    "dsh.agent_loop.events": "AssistantMessage Event JobNotice LlmContinue LlmRetry ReasoningDelta StepStart "
        "StreamKeepAlive TextDelta ToolCallStart ToolResult TurnEnd TurnStart UnknownEvent from_wire to_wire",
    "dsh.agent_loop.guard": "PromptGuard mask_secrets secret_shape",
    "dsh.agent_loop.reasons": "Aborted Completed Disposed EndReason Failed Interrupted MaxTokens OtherEnd Rejected",
    "dsh.agent_loop.retry": "NEVER_RETRIED RETRYABLE_CODES RetryPolicy",
    "dsh.agent_loop.session_files": "SessionLogError default_root",
    "dsh.agent_loop.session_list": "SessionInfo list_sessions resolve_session",
    "dsh.agent_loop.session_log": "SessionLog",
    "dsh.agent_loop.session_read": "load_session_file",
    "dsh.agent_loop.tools": "Approval Approver Tool ToolContext ToolOutput ToolRegistry default_tools",
}

__all__ = [
    "DEFAULT_MAX_STEPS", "NEVER_RETRIED", "RETRYABLE_CODES", "Aborted", "Agent", "Approval", "Approver",
    "AssistantMessage", "Completed", "Conversation", "Disposed", "EndReason", "Event", "Failed", "Interrupted",
    "JobNotice", "LlmContinue", "LlmRetry", "MaxTokens", "OtherEnd", "PromptGuard", "ReasoningDelta", "Rejected",
    "RetryPolicy",
    "SessionInfo", "SessionLog", "SessionLogError", "StepStart", "StreamKeepAlive", "TextDelta", "Tool",
    "ToolCallStart", "ToolContext", "ToolOutput", "ToolRegistry", "ToolResult", "TurnEnd", "TurnStart", "UnknownEvent",
    "default_root", "default_tools", "from_wire", "list_sessions", "load_session_file", "mask_secrets",
    "resolve_session", "secret_shape", "to_wire",
]

if not TYPE_CHECKING:  # hidden from the type checker, so that a name not exported here is an error there
    __getattr__ = lazy_getattr(globals(), _EXPORTS)
