"""The prompt cache, watched: a hash of each part of the request prefix dsh sends, and the line that names the part
that changed when a turn's cache hit rate falls (docs/contracts.md, "The prompt cache").

DeepSeek (and any server with a prefix cache) serves the tokens of a request that repeat the start of an earlier
one from its cache, at about 1/50 of the price. dsh hashes what it sends, part by part: the model, the system
prompt (the project context is in it), the tool list (one hash per tool), and the messages after the system
prompt. Each part is hashed once: a tool's hash is kept while its spec is the same object, a message's while
the conversation holds the same message, so a request costs one comparison of its messages with the last
request's (C speed: the same objects) plus hashing what is new (``python -m bench --only prefix_hash``).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from dsh.llm.events import ChatRequest, Message, ToolSpec
from dsh.llm.request_body import wire_message, wire_tool

__all__ = ["CACHE_DROP_BELOW", "CACHE_DROP_POINTS", "NOTHING_CHANGED", "NOT_SEEN", "PrefixTracker",
           "cache_drop_line", "cache_percent", "drop_words", "is_cache_drop"]

CACHE_DROP_POINTS = 30  # a turn's hit rate this many points below the previous turn's…
CACHE_DROP_BELOW = 0.8  # …and below this share is a drop worth a line
NOTHING_CHANGED = "nothing dsh sent before the new messages changed"
HISTORY_CHANGED = "the earlier messages changed"
# The first request of this agent: a drop against a turn before it is a resumed session's (agent_loop/recap.py).
NOT_SEEN = "the session was resumed (dsh keeps no hashes of what it sent before)"
_NAMED_TOOLS = 3  # a changed tool list names at most this many tools


def _digest(wire: dict[str, Any]) -> bytes:
    text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class PrefixTracker:
    """The hashes of the last request sent, and the first change seen since :meth:`take_change`."""

    def __init__(self) -> None:
        self._model: str | None = None  # None: no request yet
        self._sent: tuple[Message, ...] = ()  # the last request's messages…
        self._hashes: list[bytes] = []  # …and their hashes, in order
        self._tools: tuple[tuple[str, bytes], ...] = ()  # the last request's tools: name and hash, in order
        self._specs: dict[str, tuple[ToolSpec, bytes]] = {}  # each tool's last spec and its hash
        self._change: str | None = None
        self._rewrote: str | None = None  # a compaction since the last request: who rewrote the history

    def compacted(self, automatic: bool) -> None:
        """A compaction replaced the history: the next request's earlier messages differ for that reason."""
        self._rewrote = "automatic compaction" if automatic else "/compact"

    def take_change(self) -> str | None:
        """The first part that changed since the last call (None: nothing did), and forget it."""
        change, self._change = self._change, None
        return change

    def observe(self, request: ChatRequest) -> ChatRequest:
        """Hash ``request``'s parts (what is new only) and note what changed from the last request; returns it."""
        system_changed, history_changed = self._messages(request.messages)
        before, tools = self._tools, self._tool_hashes(request.tools)
        if self._change is None:
            if self._model is None:
                self._change = NOT_SEEN
            elif self._model != request.model:
                self._change = f"the model changed ({self._model} to {request.model})"
            elif system_changed:
                self._change = "the system prompt changed (the project context is part of it)"
            elif tools != before:
                self._change = f"the tool list changed ({_tool_change(dict(before), dict(tools))})"
            elif history_changed:
                self._change = f"{self._rewrote} rewrote the history" if self._rewrote else HISTORY_CHANGED
        self._model, self._tools, self._rewrote = request.model, tools, None
        return request

    def _messages(self, messages: tuple[Message, ...]) -> tuple[bool, bool]:
        """Hash the messages not sent before; whether the system prompt, and whether the messages after it, are
        not as the last request had them."""
        old, hashes = self._sent, self._hashes
        self._sent = messages
        if messages[: len(old)] == old:  # the conversation grew (C speed: the same objects compare at once)
            hashes.extend(_digest(wire_message(message)) for message in messages[len(old):])
            return False, False
        self._hashes = [hashes[i] if i < len(old) and message is old[i] else _digest(wire_message(message))
                        for i, message in enumerate(messages)]
        old_system = hashes[0] if old and old[0].role == "system" else None
        new_system = self._hashes[0] if messages and messages[0].role == "system" else None
        old_rest, new_rest = hashes[old_system is not None:], self._hashes[new_system is not None:]
        return old_system != new_system, new_rest[: len(old_rest)] != old_rest

    def _tool_hashes(self, specs: tuple[ToolSpec, ...]) -> tuple[tuple[str, bytes], ...]:
        hashes = []
        for spec in specs:
            known = self._specs.get(spec.name)
            if known is None or not (known[0] is spec or (
                    known[0].description is spec.description and known[0].parameters is spec.parameters)):
                known = self._specs[spec.name] = (spec, _digest(wire_tool(spec)))
            hashes.append((spec.name, known[1]))
        return tuple(hashes)


def _tool_change(before: dict[str, bytes], after: dict[str, bytes]) -> str:
    """Who changed the tool list: an MCP server that re-listed its tools, or the tools added, removed or changed."""
    changed = [name for name in after if before.get(name) != after[name]]
    changed += [name for name in before if name not in after]
    servers = sorted({name.split("__")[1] for name in changed if name.startswith("mcp__") and name.count("__") >= 2})
    if servers and all(name.startswith("mcp__") for name in changed):
        if len(servers) == 1:
            return f"MCP server {servers[0]} re-listed its tools"
        return f"MCP servers {', '.join(servers[:_NAMED_TOOLS])} re-listed their tools"
    if not changed:
        return "the same tools in another order"
    words = [f"{name} {'added' if name not in before else 'removed' if name not in after else 'changed'}"
             for name in changed[:_NAMED_TOOLS]]
    more = len(changed) - _NAMED_TOOLS
    return ", ".join(words) + (f" and {more} more" if more > 0 else "")


def is_cache_drop(rate: float, previous: float) -> bool:
    """Whether this turn's hit rate fell well below the previous turn's (:data:`CACHE_DROP_POINTS`,
    :data:`CACHE_DROP_BELOW`)."""
    return rate < CACHE_DROP_BELOW and round(100 * (previous - rate), 9) > CACHE_DROP_POINTS


def drop_words(rate: float, previous: float, change: str | None) -> str:
    """``cache 12% (was 96%): the tool list changed (MCP server docs re-listed its tools)``; the figures are held to
    0 to 1, since a logged ``cache/drop`` record is read back through here (``dsh sessions show``)."""
    return f"cache {cache_percent(_share(rate))} (was {cache_percent(_share(previous))}): {change or NOTHING_CHANGED}"


def cache_drop_line(rate: float | None, previous: float | None, change: str | None) -> str | None:
    """The line when :func:`is_cache_drop`, naming ``change`` (or that nothing changed); else None (also when
    either rate is unknown)."""
    if rate is None or previous is None or not is_cache_drop(rate, previous):
        return None
    return drop_words(rate, previous, change)


def _share(rate: float) -> float:
    return min(max(rate, 0.0), 1.0) if math.isfinite(rate) else 0.0


def cache_percent(rate: float) -> str:
    """``97%``: never ``100%`` while a token missed, never ``0%`` while one hit."""
    share = round(100 * rate)
    if share == 100 and rate < 1:
        share = 99
    elif share == 0 and rate > 0:
        share = 1
    return f"{share}%"
