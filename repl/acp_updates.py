"""What ``dsh acp`` tells an ACP client: a session's events as ``session/update`` payloads, a turn's end as a
stop reason or a JSON-RPC error, a saved session's history replayed (docs/editors.md, "How dsh acp maps turns").

Pure translation to plain dicts in the protocol's field names (no I/O; :mod:`dsh.repl.acp_session` sends them
as :mod:`dsh.repl.acp_wire` frames; a field the schema has as optional is left out rather than null). Every
text from the model, a tool or a log is hostile: it travels inside JSON, so no terminal escaping is needed,
but it is masked (the session's secrets and the secret shapes) and its lone surrogates are replaced, so the
frame always encodes as UTF-8.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.agent_loop.continuation import continue_words
from dsh.agent_loop.events import (
    AssistantMessage,
    Event,
    LlmContinue,
    LlmRetry,
    PlanUpdate,
    ReasoningDelta,
    TextDelta,
    ToolCallStart,
    ToolResult,
    TurnStart,
    from_wire,
)
from dsh.agent_loop.reasons import Aborted, BudgetStop, Disposed, EndReason, Failed, MaxTokens, Rejected
from dsh.agent_loop.tools.edits import EditRequest
from dsh.agent_loop.tools.registry import AskedText, McpCallRequest, SandboxedCommand
from dsh.llm import ErrorCode, HarnessError, Redactor, chain_links, redact_url
from dsh.llm.text import scrub_surrogates
from dsh.repl.sanitize import one_line
from dsh.repl.turn_end import fix_line, turn_end_line
from dsh.repl.why import link_lines

__all__ = [
    "TURN_FAILED",
    "TextChunk",
    "Translator",
    "clean",
    "coalesced",
    "history_updates",
    "plan_update",
    "stop_reason",
    "text_update",
    "turn_error",
]

# The JSON-RPC error code of a failed turn's answer to session/prompt: "Internal error" is what every ACP client
# shows with its message (the turn-end line); -32000 would ask an editor to log in, -32002 means "not found".
TURN_FAILED = -32603
_TITLE_CHARS = 120
_APPROVED_TOOLS = frozenset({"run_shell", "write_file", "edit_file", "web_fetch"})  # the tools that may ask (and MCP's)
_KINDS: dict[str, str] = {  # ACP's tool kinds
    "read_file": "read",
    "list_dir": "read",
    "search_text": "search",
    "glob": "search",
    "write_file": "edit",
    "edit_file": "edit",
    "run_shell": "execute",
    "web_fetch": "fetch",
    "web_search": "fetch",
    "todo_write": "think",
}
_PLAN_STATUS: dict[str, str] = {"pending": "pending", "in_progress": "in_progress",
                                                   "completed": "completed"}


def clean(text: str, redact: Redactor | None = None) -> str:
    """Hostile text made fit for a frame: masked (when ``redact`` is given), lone surrogates replaced."""
    text = scrub_surrogates(text)
    return redact(text) if redact is not None else text


def _clean_value(value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        return clean(value, redact)
    if isinstance(value, Mapping):
        return {clean(str(key), redact): _clean_value(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_value(item, redact) for item in value]
    return value


def stop_reason(reason: EndReason) -> str | None:
    """The ACP stop reason of a turn that did not fail; None for a failed one (answered as an error)."""
    if isinstance(reason, Failed):
        return "refusal" if reason.code == "CONTENT_FILTER" else None
    if isinstance(reason, MaxTokens):
        return "max_tokens"
    if isinstance(reason, Aborted | Disposed):
        return "cancelled"
    if isinstance(reason, Rejected):
        return "refusal"
    if isinstance(reason, BudgetStop):
        return "max_turn_requests"  # max_cost held the next request back (agent_loop/budget.py)
    return "end_turn"  # Completed, and an end this version does not know


def turn_error(reason: Failed, failure: BaseException | None, *, secrets: Sequence[str],
               sources: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """A failed turn's JSON-RPC error: the message is what the REPL prints when a turn fails (the turn-end line
    with its root cause, then the fix line on a line of its own); the data has the code, the fix line (or None)
    and the links ``/why`` shows, all masked."""
    redact = Redactor(secrets)
    line = turn_end_line(reason, secrets) or "[turn failed]"
    fix = fix_line(reason, sources)
    links = link_lines(chain_links(failure), 0, tuple(secrets)) if failure is not None else []
    if failure is not None and isinstance(failure, HarnessError) and not links:
        links = [one_line(str(failure))]
    data = {
        "code": clean(reason.code or ErrorCode.UNKNOWN, redact),
        "fix": clean(fix, redact) if fix else None,
        "chain": [clean(link.strip(), redact) for link in links],
    }
    message = clean(line, redact) if not fix else f"{clean(line, redact)}\n{clean(fix, redact)}"
    return message, data


def _arguments(raw: str) -> Any:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {"arguments": raw}
    return value


def text_update(kind: str, text: str) -> dict[str, Any]:
    """A ``user_message_chunk``, ``agent_message_chunk`` or ``agent_thought_chunk`` update of one text block."""
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def _thought(text: str) -> dict[str, Any]:
    return text_update("agent_thought_chunk", text)


def _progress(tool_call_id: str, status: str, content: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``tool_call_update``: the call's new status, and its content when it has some."""
    update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": status}
    if content is not None:
        update["content"] = content
    return update


def _diff(path: str, new_text: str, old_text: str | None) -> dict[str, Any]:
    diff = {"type": "diff", "path": path, "newText": new_text}
    return diff if old_text is None else diff | {"oldText": old_text}


def plan_update(event: PlanUpdate, redact: Redactor) -> dict[str, Any]:
    """ACP's ``plan`` session update: the whole plan each time, as todo_write sent it (dsh keeps no priority)."""
    return {"sessionUpdate": "plan",
            "entries": [{"content": clean(item.content, redact), "priority": "medium",
                         "status": _PLAN_STATUS.get(item.status, "pending")} for item in event.items]}


def _first_line(text: str) -> str:
    line = one_line(text.strip().split("\n", 1)[0]) if text.strip() else ""
    return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1] + "…"


@dataclass(slots=True)
class TextChunk:
    """An answer or reasoning delta on its way to a frame: plain text until :func:`coalesced` merges a run of
    them and builds the one update (an object per 1-character delta cost more than the stream itself). ``more``:
    the deltas of its kind that came after it while it was still queued (repl/acp_session.py), in order."""

    thought: bool
    text: str
    more: list[str] = field(default_factory=list)


def coalesced(updates: Sequence[Any]) -> list[Any]:
    """The updates to send, in order, each run of consecutive :class:`TextChunk` of one kind as one update: a
    stream faster than its client costs one frame per batch that queued while the last frame went out."""
    merged: list[Any] = []
    run: list[str] = []
    thought = False

    def close_run() -> None:
        if run:
            text = clean("".join(run))  # scrubbed whole: a surrogate pair split across deltas stays a pair
            merged.append(text_update("agent_thought_chunk" if thought else "agent_message_chunk", text))
            run.clear()

    for update in updates:
        if isinstance(update, TextChunk):
            if run and update.thought != thought:
                close_run()
            thought = update.thought
            run.append(update.text)
            run.extend(update.more)
        else:
            close_run()
            merged.append(update)
    close_run()
    return merged


def _where(request: object) -> str:
    """A permission request for a command that will run in the sandbox says so, as the terminal's question does
    (docs/safety.md)."""
    return " (sandboxed)" if isinstance(request, SandboxedCommand) else ""


def tool_kind(name: str) -> str:
    return _KINDS.get(name, "other")


def tool_title(name: str, args: Any) -> str:
    """``Read notes.txt``, ``Run pytest -q``, ``mcp server: tool``: what an editor lists for the call."""
    get = args.get if isinstance(args, Mapping) else (lambda key: None)
    path, pattern, command = get("path"), get("pattern"), get("command")
    if name == "read_file" and isinstance(path, str):
        return f"Read {_first_line(path)}"
    if name == "list_dir":
        return f"List {_first_line(path) if isinstance(path, str) else '.'}"
    if name in ("search_text", "glob") and isinstance(pattern, str):
        return f"{'Search' if name == 'search_text' else 'Find'} {_first_line(pattern)}"
    if name == "web_search" and isinstance(query := get("query"), str):
        return f"Search the web for {_first_line(query)}"
    if name == "write_file" and isinstance(path, str):
        return f"Write {_first_line(path)}"
    if name == "edit_file" and isinstance(path, str):
        return f"Edit {_first_line(path)}"
    if name == "run_shell" and isinstance(command, str):
        return f"Run {_first_line(command)}"
    if name == "web_fetch" and isinstance(url := get("url"), str):
        return f"Fetch {_first_line(redact_url(url))}"
    if name.startswith("mcp__"):
        server, _, tool = name[len("mcp__"):].partition("__")
        return f"{server}: {tool}" if tool else name
    return name


@dataclass(slots=True)
class _Call:
    name: str
    acp_id: str
    title: str
    kind: str
    raw_input: Any
    diff: tuple[str, str | None, str] | None = None  # (path, old text, new text) once an edit was approved


@dataclass
class Translator:
    """One ACP session's view of its dsh session's events: updates to send, and the tool calls still running
    (an approval belongs to the one call that may ask: those run one at a time, agent_loop/tools/registry.py).
    """

    redact: Redactor
    cwd: str
    _turn: int = 0
    _running: dict[str, _Call] = field(default_factory=dict)  # by dsh's call id

    def updates(self, event: Event) -> list[Any]:
        """The ``session/update`` payloads of one live event (none for most); text as :class:`TextChunk`, made
        a payload by :func:`coalesced`."""
        if isinstance(event, TextDelta):
            return [TextChunk(False, event.text)] if event.text else []
        if isinstance(event, ReasoningDelta):
            return [TextChunk(True, event.text)] if event.text else []
        if isinstance(event, TurnStart):
            self._turn = event.turn
            self._running.clear()
            return []
        if isinstance(event, ToolCallStart):
            return [self._start(event)]
        if isinstance(event, ToolResult):
            return [self._finish(event)]
        if isinstance(event, PlanUpdate):  # the editor's plan view (docs/editors.md)
            return [plan_update(event, self.redact)]
        if isinstance(event, LlmContinue):  # the REPL's continuation line, where the editor shows progress
            return [_thought(continue_words(event) + "\n")]
        if isinstance(event, LlmRetry):  # the REPL's retry line, where an editor shows progress
            line = f"[retry {event.attempt}/{event.max_attempts} in {event.delay_s:.1f}s] {event.code}: "
            return [_thought(clean(line + one_line(event.message), self.redact) + "\n")]
        return []

    def _start(self, event: ToolCallStart) -> dict[str, Any]:
        args = _clean_value(_arguments(scrub_surrogates(event.arguments)), self.redact)
        call = _Call(event.name, f"{event.turn}:{clean(event.id)}", clean(tool_title(event.name, args), self.redact),
                     tool_kind(event.name), args)
        self._running[event.id] = call
        # A call that may ask waits for its approval: pending until then; the others run now.
        start: dict[str, Any] = {"sessionUpdate": "tool_call", "toolCallId": call.acp_id, "title": call.title,
                                 "kind": call.kind, "status": "pending" if self._may_ask(event.name) else "in_progress"}
        path = args.get("path") if isinstance(args, Mapping) else None
        if isinstance(path, str) and path:
            start["locations"] = [{"path": os.path.join(self.cwd, path)}]
        if call.raw_input is not None:
            start["rawInput"] = call.raw_input
        return start

    @staticmethod
    def _may_ask(name: str) -> bool:
        return name in _APPROVED_TOOLS or name.startswith("mcp__")

    def _finish(self, event: ToolResult) -> dict[str, Any]:
        call = self._running.pop(event.id, None)
        acp_id = call.acp_id if call is not None else f"{event.turn}:{clean(event.id)}"
        content: list[dict[str, Any]] = []
        if call is not None and call.diff is not None and not event.is_error:
            path, old, new = call.diff
            content.append(_diff(path, new, old))
        text = event.output if not event.diagnostic else f"{event.output}\n{event.diagnostic}"
        content.append({"type": "content", "content": {"type": "text", "text": clean(text, self.redact)}})
        # The result once, as content (no rawOutput beside it: clients such as acpx show both, so twice).
        return _progress(acp_id, "failed" if event.is_error else "completed", content)

    def asking(self, request: str | EditRequest | McpCallRequest) -> _Call | None:
        """The running call an approval is for."""
        asking_tool = request.tool if isinstance(request, AskedText) else "run_shell"  # a str request's tool
        for call in reversed(list(self._running.values())):
            if isinstance(request, EditRequest) and call.name == request.tool:
                return call
            if isinstance(request, McpCallRequest) and call.name.startswith("mcp__"):
                return call
            if isinstance(request, str) and call.name == asking_tool:
                return call
        return None

    def permission_call(self, call: _Call | None, request: str | EditRequest | McpCallRequest) -> dict[str, Any]:
        """The ``toolCall`` of a permission request: the call's id, title, kind and input; an edit's diff."""
        tool_call: dict[str, Any]
        if call is None:  # no call to name (it should not happen): a fresh id, so the client can still ask
            tool_call = {"toolCallId": f"{self._turn}:approval", "title": self._request_title(request),
                         "kind": "other", "status": "pending"}
        else:
            tool_call = {"toolCallId": call.acp_id, "title": call.title + _where(request), "kind": call.kind,
                         "status": "pending"}
            if call.raw_input is not None:
                tool_call["rawInput"] = call.raw_input
        if isinstance(request, EditRequest):
            path = self._edit_path(request)
            if call is not None:
                call.diff = (path, request.old_text, request.new_text)
            tool_call["content"] = [_diff(path, clean(request.new_text), _maybe(request.old_text))]
        return tool_call

    def note_edit(self, call: _Call | None, request: EditRequest) -> None:
        """An edit that goes ahead without asking the client ("always"): its diff still reaches the update."""
        if call is not None:
            call.diff = (self._edit_path(request), request.old_text, request.new_text)

    def _edit_path(self, request: EditRequest) -> str:
        return clean(os.path.join(self.cwd, request.path))

    def _request_title(self, request: str | EditRequest | McpCallRequest) -> str:
        if isinstance(request, EditRequest):
            return clean(f"Edit {request.path}", self.redact)
        if isinstance(request, McpCallRequest):
            return clean(f"{request.server}: {request.tool}", self.redact)
        return clean(f"Run {_first_line(request)}", self.redact) + _where(request)

    def approved(self, call: _Call | None) -> dict[str, Any] | None:
        """The update that says an approved call runs now."""
        return _progress(call.acp_id, "in_progress") if call is not None else None


def _maybe(text: str | None) -> str | None:
    return clean(text) if text is not None else None


def history_updates(records: Iterable[Mapping[str, Any]], redact: Redactor, cwd: str) -> list[dict[str, Any]]:
    """A saved session's history as updates, in order: each prompt as ``user_message_chunk``, each reply's text
    and reasoning as ``agent_message_chunk`` / ``agent_thought_chunk``, each tool call as ``tool_call`` then its
    result as ``tool_call_update`` (completed or failed), each plan as ``plan``."""
    translator = Translator(redact, cwd)
    updates: list[Any] = []
    for record in records:
        event = from_wire(record)
        if isinstance(event, TurnStart):
            translator.updates(event)
            if event.prompt:
                updates.append(text_update("user_message_chunk", clean(event.prompt, redact)))
        elif isinstance(event, AssistantMessage):
            if event.reasoning_content:
                updates.append(_thought(clean(event.reasoning_content, redact)))
            if event.content:
                updates.append(text_update("agent_message_chunk", clean(event.content, redact)))
        elif isinstance(event, ToolCallStart):
            updates.append(translator._start(event))
        elif isinstance(event, ToolResult):
            updates.append(translator._finish(event))
        elif isinstance(event, PlanUpdate):
            updates.append(plan_update(event, redact))
    return updates
