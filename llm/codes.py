"""Every error code dsh spells, in one place.

A :class:`~dsh.llm.errors.HarnessError` carries one of these as its ``code``; callers, the retry
policy and the REPL's fix lines route on it, never on message text. Two families are computed rather
than listed: ``HTTP_<status>`` for an HTTP status no member covers, and a model's unexpected
``finish_reason`` in upper snake case (``CONTENT_FILTER``). Codes are UPPER_SNAKE strings: a member
compares equal to its text, so a code read back from a session log (a plain ``str``) matches it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorCode"]


class ErrorCode(StrEnum):
    # A model request (dsh.llm.deepseek).
    TRANSPORT = "TRANSPORT"  # connect, TLS or read failure
    ABORTED = "ABORTED"  # the caller cancelled
    TIMEOUT = "TIMEOUT"  # a header, first-token or idle deadline fired
    AUTH = "AUTH"  # HTTP 401, 403
    QUOTA = "QUOTA"  # HTTP 402, or "insufficient balance" wording
    RATE_LIMIT = "RATE_LIMIT"  # HTTP 429
    CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED"  # HTTP 400 about the context length
    INVALID_REQUEST = "INVALID_REQUEST"  # other HTTP 400, and 413
    SERVER = "SERVER"  # HTTP 5xx
    PROXY = "PROXY"  # the proxy that carried the request failed it
    EMPTY_RESPONSE = "EMPTY_RESPONSE"  # no body, or a stop with no content
    STREAM_CLOSED = "STREAM_CLOSED"  # the stream ended without [DONE] or a finish reason
    MALFORMED_RESPONSE = "MALFORMED_RESPONSE"  # an SSE payload that is not the expected JSON
    UNKNOWN_FINISH = "UNKNOWN_FINISH"  # a finish reason with no letters or digits to name it by

    # The agent loop (dsh.agent_loop).
    UNKNOWN = "UNKNOWN"  # a failure that is not a HarnessError
    AGENT_CLOSED = "AGENT_CLOSED"
    TURN_BUSY = "TURN_BUSY"  # a turn is already running
    MAX_STEPS = "MAX_STEPS"  # the model kept calling tools past the step limit
    COMPACT = "COMPACT"  # a compaction with nothing to compact, or a summary that cannot stand in
    SESSION_LOG = "SESSION_LOG"  # the session log cannot be read or written
    SESSION_LOCKED = "SESSION_LOCKED"  # another dsh process has the session open
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_AMBIGUOUS = "SESSION_AMBIGUOUS"  # an id prefix that matches several sessions
    PROTOCOL = "PROTOCOL"  # a bad JSON-RPC frame, or a JSON-RPC error response
    TRANSPORT_CLOSED = "TRANSPORT_CLOSED"  # a JSON-RPC peer's stream ended or broke
    PROCESS_START = "PROCESS_START"  # a child process could not be spawned
    LINE_TOO_LONG = "LINE_TOO_LONG"  # a child's output line exceeded the stream limit
    SUBAGENT = "SUBAGENT"  # a subagent run that did not succeed (/why's record of it)
    MCP = "MCP"  # an MCP server or call that failed (/why's record of it)
    HOOK = "HOOK"  # a hook that failed (/why's record of it; docs/hooks.md)

    # Configuration and start-up (dsh.repl).
    CONFIG = "CONFIG"  # a usage or configuration problem (exit status 2)
    STARTUP = "STARTUP"  # the main agent could not be built
