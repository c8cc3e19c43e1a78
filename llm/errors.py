"""The project's exception hierarchy and the one-line cause-chain renderer.

Every dsh error is a :class:`HarnessError` whose ``code`` is an :class:`~dsh.llm.codes.ErrorCode`
(or a computed ``HTTP_<status>`` / finish-reason code). Route on ``code``, never on message text.
Render with :func:`error_chain` at every diagnostic boundary (turn-end messages, log warnings, REPL
lines, startup failures). The hierarchy, drawn here only (docs/architecture.md points here, and
tests/test_contracts.py compares this drawing with the real classes): each class, the module it lives
in, and its codes::

    HarnessError              dsh.llm.errors                   any code: the base of every dsh error
    ├── LlmError              dsh.llm.errors                   a failed model request: TRANSPORT ... HTTP_<status>
    ├── TraceFileError        dsh.llm.wire_trace               CONFIG: a --record or report path dsh will not write
    ├── ReplayError           dsh.llm.loopback.replay_server   CONFIG: a recording that cannot be replayed
    ├── ProcessStartError     dsh.agent_loop.process           PROCESS_START: a child could not be spawned
    ├── LineTooLong           dsh.agent_loop.process           LINE_TOO_LONG: a child's line past the limit
    ├── JournalError          dsh.agent_loop.journal           SESSION_LOG: the undo journal cannot be used
    ├── SessionLogError       dsh.agent_loop.session_files     SESSION_LOG, SESSION_LOCKED, SESSION_NOT_FOUND, ...
    ├── ProtocolError         dsh.agent_loop.jsonrpc           PROTOCOL: a bad frame, or an error answer (rpc_code)
    ├── TransportClosed       dsh.agent_loop.jsonrpc           TRANSPORT_CLOSED: a JSON-RPC peer's stream ended
    ├── ChildFailure          dsh.agent_loop.child_words       /why's record of a child's failure, with its words
    │   ├── SubagentFailure   dsh.agent_loop.subagent.result   SUBAGENT: a subagent run that did not succeed
    │   ├── HookFailure       dsh.agent_loop.hook_run          HOOK: a hook that failed (docs/hooks.md)
    │   └── McpServerFailure  dsh.agent_loop.mcp.diagnostics   MCP: a failed MCP server or call
    │       └── McpStrayLines dsh.agent_loop.mcp.diagnostics   MCP: a stdout line that is not JSON-RPC, skipped
    ├── SettingsError         dsh.agent_loop.settings          CONFIG: a bad setting, naming file, table and key
    │   └── SubagentConfigError dsh.agent_loop.subagent.run    CONFIG: a bad [subagents.NAME] table
    └── StartupError          dsh.agent_loop.session_types     the cause's code, else STARTUP

``SettingsError`` is also known as ``ConfigError`` in dsh.repl.config (usage or configuration, exit status 2).

The agent loop raises plain ``HarnessError`` for AGENT_CLOSED, TURN_BUSY, MAX_STEPS and COMPACT; a turn that
fails with anything that is not a ``HarnessError`` ends with code UNKNOWN. The codes and what a user sees
for each are in docs/contracts.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ChainLink", "Evidence", "Finding", "HarnessError", "LlmError", "cause_beneath", "chain_links",
           "error_chain", "unwrap_group"]

MAX_DEPTH = 64
MAX_LENGTH = 16 * 1024
ELLIPSIS = "…"
CIRCULAR = "<circular cause>"
UNRENDERABLE = "<unrenderable value>"


class HarnessError(Exception):
    """Base of every dsh error. ``code`` (an :class:`ErrorCode`, or a computed code) is what callers route on."""

    def __init__(self, message: str, code: str, *, cause: BaseException | None = None) -> None:
        if not isinstance(message, str) or not message:
            raise ValueError("HarnessError message must be a non-empty string")
        if not isinstance(code, str) or not code:
            raise ValueError("HarnessError code must be a non-empty string")
        super().__init__(message)
        self.message = message
        self.code = code
        if cause is not None:
            self.__cause__ = cause

    def __str__(self) -> str:
        return self.message


class LlmError(HarnessError):
    """A failed model request, with the HTTP facts that were available.

    ``retry_limit`` caps the retries this one failure deserves below the code's policy (see
    :mod:`dsh.agent_loop.retry`).
    """

    def __init__(
        self,
        message: str,
        code: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        request_id: str | None = None,
        retry_limit: int | None = None,
        detail: str | None = None,
        endpoint: str | None = None,
        endpoint_name: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, code, cause=cause)
        if status is not None and (
            isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599
        ):
            raise ValueError(f"LlmError status must be an int in 100..599, got {status!r}")
        if retry_after_s is not None and (
            isinstance(retry_after_s, bool)
            or not isinstance(retry_after_s, int | float)
            or not math.isfinite(retry_after_s)
            or retry_after_s <= 0
        ):
            raise ValueError(f"LlmError retry_after_s must be positive and finite, got {retry_after_s!r}")
        if request_id is not None and (not isinstance(request_id, str) or not request_id):
            raise ValueError("LlmError request_id must be a non-empty string")
        if retry_limit is not None and (
            isinstance(retry_limit, bool) or not isinstance(retry_limit, int) or retry_limit < 0
        ):
            raise ValueError(f"LlmError retry_limit must be a non-negative int, got {retry_limit!r}")
        self.status = status
        self.retry_after_s = float(retry_after_s) if retry_after_s is not None else None
        self.request_id = request_id
        # At most this many retries, whatever the code's policy: 0 for a permanent failure (a name that
        # does not exist, an untrusted certificate), 1 for a first-token timeout. None: the policy decides.
        self.retry_limit = retry_limit
        # What the failure was below its code (dsh.llm.network.FailureDetail): the REPL's fix line routes on it.
        self.detail = detail
        # The redacted URL that failed, given by the client that made the request (the REPL's fix line names it).
        self.endpoint = endpoint
        # Who answered there (dsh.llm.endpoint: "DeepSeek", "LiteLLM", ...); None: a server that did not say.
        self.endpoint_name = endpoint_name


class Evidence(Exception):
    """Raw material beneath a failure (a relay's error payload, masked and bounded): ``/why`` shows it
    as a link of its own; the one-line chain (turn-end lines, logs) leaves it out."""


class Finding(Exception):
    """What dsh found out about a failure beyond what the failure itself said (the certificate a server
    presented: dsh.llm.certificate_truth). Its text tells everything beneath it that matters, so the one-line
    chain (turn-end lines, logs) ends with it; ``/why`` still shows every raw link beneath it."""


def unwrap_group(exc: BaseException) -> BaseException:
    """The one real failure inside single-member task-group wrappers (anyio wraps what a task raises)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@dataclass
class ChainLink:
    """One rendered node of a cause chain: its type name, its text, and group members."""

    type_name: str
    text: str
    members: list[list[ChainLink]] = field(default_factory=list)
    duplicate: bool = False  # same text as its parent: shown in /why, collapsed in one-liners
    evidence: bool = False  # an Evidence link: shown in /why, left out of one-liners
    finding: bool = False  # a Finding: the one-liner ends with it; /why shows the links beneath


def _type_name(value: object) -> str:
    try:
        cls = type(value)
        module = cls.__module__ or ""
        name = cls.__qualname__
        return name if module in ("builtins", "") else f"{module}.{name}"
    except Exception:
        return "object"


def _node_text(value: object) -> str:
    """Text of one node: ``str(exc)``, else the class name; message strings for non-exceptions."""
    try:
        if isinstance(value, BaseExceptionGroup):
            message = value.message
            text = message if isinstance(message, str) else str(value)
        elif isinstance(value, BaseException):
            text = str(value)
        elif isinstance(value, Mapping) and isinstance(value.get("message"), str):
            text = value["message"]
        # Duck typing: a cause may be any object with a ``message`` (an SDK's error payload, a JSON-RPC error).
        elif not isinstance(value, str) and isinstance(attribute := getattr(value, "message", None), str):
            text = attribute
        else:
            text = str(value)
        if not isinstance(text, str):
            return UNRENDERABLE
        if not text and isinstance(value, BaseException):
            return type(value).__name__
        return text[:MAX_LENGTH]
    except Exception:
        return UNRENDERABLE


def cause_beneath(value: object) -> object | None:
    """The cause beneath a node: ``__cause__``, else ``__context__`` (even if suppressed), else ``args[0]``."""
    if not isinstance(value, BaseException):
        return None
    try:
        if value.__cause__ is not None:
            return value.__cause__
        context = value.__context__
        if context is not None:
            # A task group re-raised while handling one of its own members: already shown in brackets.
            if isinstance(value, BaseExceptionGroup) and any(context is member for member in value.exceptions):
                return None
            return context
        args = value.args
        if args and isinstance(args[0], BaseException):
            return args[0]
    except Exception:
        return None
    return None


def _walk(value: object, on_path: set[int], budget: list[int]) -> list[ChainLink]:
    """Walk one chain iteratively; group members recurse with a shared depth budget."""
    links: list[ChainLink] = []
    current: object | None = value
    parent_text: str | None = None
    added: list[int] = []
    try:
        while current is not None:
            if budget[0] <= 0:
                links.append(ChainLink("", ELLIPSIS))
                break
            budget[0] -= 1
            if id(current) in on_path:
                links.append(ChainLink("", CIRCULAR))
                break
            on_path.add(id(current))
            added.append(id(current))
            text = _node_text(current)
            link = ChainLink(_type_name(current), text, duplicate=text == parent_text,
                             evidence=isinstance(current, Evidence), finding=isinstance(current, Finding))
            if isinstance(current, BaseExceptionGroup):
                try:
                    members = list(current.exceptions)
                except Exception:
                    members = []
                link.members = [_walk(member, on_path, budget) for member in members]
            links.append(link)
            parent_text = text
            current = cause_beneath(current)
    finally:
        for ident in added:
            on_path.discard(ident)
    return links


def chain_links(value: object) -> list[ChainLink]:
    """The structured chain beneath ``value`` (used by ``/why`` for one line per link)."""
    return _walk(value, set(), [MAX_DEPTH])


def _inline(links: list[ChainLink]) -> str:
    parts: list[str] = []
    for link in links:
        if (link.duplicate or link.evidence) and not link.members:
            continue
        text = link.text
        if link.members:
            text = f"{text} [{'; '.join(_inline(member) for member in link.members)}]"
        parts.append(text)
        if link.finding:
            break  # its text already says what the raw links beneath it say (see Finding)
    return ": ".join(parts)


def error_chain(value: object) -> str:
    """Render a thrown value and everything beneath it on one line, bounded in depth and length."""
    try:
        text = _inline(chain_links(value))
    except Exception:
        text = UNRENDERABLE
    if len(text) > MAX_LENGTH:
        text = text[: MAX_LENGTH - 1] + ELLIPSIS
    return text
