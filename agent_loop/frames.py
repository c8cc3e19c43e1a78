"""A bounded memory of the JSON-RPC frames dsh exchanged with its child processes, for a failure report.

Subagents (an ACP agent, a child dsh, Codex) and MCP servers speak JSON-RPC. When one of them fails, what
a maintainer reading a report needs is the shape of that conversation — which requests went out, which
were answered, which failed and with which JSON-RPC code — not what the frames carried (prompts, file
contents, tool arguments and results). So a :class:`FrameLog` keeps, per peer, the last :data:`PER_PEER`
frames as closed facts only: the direction, the kind, the method when it is one of the protocol's known
names (any other is ``other``: a method name is text a child chose), an integer id, the error code, and
the frame's size in bytes when the transport knows it. No text a child sent is kept, so nothing in it can
hold a secret or an escape sequence. Memory is bounded by :data:`PER_PEER` × :data:`PEERS` small records
(docs/reporting.md, "What a capsule holds").

The peers are named by dsh (``subagent NAME``, ``mcp NAME``: the configuration's own table names). A
session owns one log; the subagent runs and MCP servers it starts are given it (``ParentContext.frames``,
``McpManager(frames=...)``), and ``/report`` reads :meth:`FrameLog.snapshot`.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["KNOWN_METHODS", "PEERS", "PER_PEER", "Frame", "FrameLog", "FrameTap", "frame_facts"]

PER_PEER = 64  # frames kept per peer: the last ones, where a failure is
PEERS = 32  # peers kept; the one heard from least recently goes first

Direction = Literal["sent", "received"]
Kind = Literal["request", "notification", "response", "error", "invalid"]

# The methods of the protocols dsh speaks with its children (ACP, MCP, Codex's app server, dsh serve):
# a frame's method is kept only when it is one of these.
KNOWN_METHODS = frozenset({
    # ACP
    "initialize", "authenticate", "session/new", "session/load", "session/prompt", "session/cancel",
    "session/update", "session/request_permission", "session/set_mode", "session/set_model",
    "fs/read_text_file", "fs/write_text_file", "terminal/create", "terminal/output", "terminal/release",
    "terminal/wait_for_exit", "terminal/kill",
    # MCP
    "ping", "notifications/initialized", "notifications/cancelled", "notifications/progress",
    "notifications/message", "notifications/tools/list_changed", "notifications/resources/list_changed",
    "notifications/prompts/list_changed", "tools/list", "tools/call", "resources/list", "resources/read",
    "prompts/list", "prompts/get", "logging/setLevel", "roots/list", "sampling/createMessage",
    "elicitation/create", "completion/complete",
    # Codex's app server
    "initialized", "thread/start", "turn/start", "turn/interrupt", "turn/started", "turn/completed",
    "item/started", "item/completed", "item/agentMessage/delta", "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval", "item/permissions/requestApproval", "item/tool/requestUserInput",
    "item/tool/call", "error",
    # dsh serve
    "session/event", "shutdown",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame's closed facts. ``t``: seconds since the log began."""

    t: float
    direction: Direction
    kind: Kind
    method: str | None = None
    id: int | None = None
    code: int | None = None  # a JSON-RPC error's code
    size: int | None = None  # bytes on the wire, when the transport knows them

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


# What a transport calls with each frame: the direction, the decoded message (anything: a bad frame too),
# and its size in bytes when known.
FrameTap = Callable[[Direction, object, "int | None"], None]


def frame_facts(message: object) -> tuple[Kind, str | None, int | None, int | None]:
    """The kind, method, integer id and error code of a decoded JSON-RPC message (any object)."""
    if not isinstance(message, Mapping):
        return "invalid", None, None, None
    raw_id = message.get("id")
    frame_id = raw_id if isinstance(raw_id, int) and not isinstance(raw_id, bool) else None
    method = message.get("method")
    if isinstance(method, str):  # FrameLog.note keeps it only if known
        return ("request" if raw_id is not None else "notification"), method, frame_id, None
    if "error" in message:
        error = message.get("error")
        code = error.get("code") if isinstance(error, Mapping) else None
        return "error", None, frame_id, code if isinstance(code, int) and not isinstance(code, bool) else None
    if "result" in message:
        return "response", None, frame_id, None
    return "invalid", None, frame_id, None


class FrameLog:
    """The last frames of each peer. Never raises: a report's memory must not break a child's connection."""

    def __init__(self, *, per_peer: int = PER_PEER, peers: int = PEERS) -> None:
        self._per_peer = per_peer
        self._peers_kept = peers
        self._peers: OrderedDict[str, deque[Frame]] = OrderedDict()
        self._start = time.monotonic()

    def note(self, peer: str, direction: Direction, kind: Kind, *, method: str | None = None,
             frame_id: int | None = None, code: int | None = None, size: int | None = None) -> None:
        """Keep one frame's facts (``method`` only if known)."""
        frames = self._peers.get(peer)
        if frames is None:
            frames = self._peers[peer] = deque(maxlen=self._per_peer)
            while len(self._peers) > self._peers_kept:
                self._peers.popitem(last=False)
        else:
            self._peers.move_to_end(peer)
        known = method if method is None or method in KNOWN_METHODS else "other"
        frames.append(Frame(round(time.monotonic() - self._start, 6), direction, kind, known, frame_id, code, size))

    def message(self, peer: str, direction: Direction, message: object, size: int | None = None) -> None:
        """Keep the facts of a decoded JSON-RPC message."""
        kind, method, frame_id, code = frame_facts(message)
        self.note(peer, direction, kind, method=method, frame_id=frame_id, code=code, size=size)

    def tap(self, peer: str) -> FrameTap:
        """A callable that keeps ``peer``'s messages: ``tap("sent", message, size)``."""

        def keep(direction: Direction, message: object, size: int | None) -> None:
            self.message(peer, direction, message, size)

        return keep

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Each peer's frames, oldest first, as plain dicts (a report's JSON)."""
        return {peer: [frame.to_dict() for frame in frames] for peer, frames in self._peers.items()}
