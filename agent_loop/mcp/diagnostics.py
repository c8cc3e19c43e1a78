"""The one failure line of an MCP server, and the host-side record beside it (docs/contracts.md, docs/mcp.md).

``MCP server failure (server: <name>; stage: <stage>; category: <category>; exit code: <n>; signal: <SIG>;
HTTP status: <n>)``: closed facts only, fields in this order, the unknown ones left out. The server's own
words (its error message, its stderr tail) never enter the line: they ride in :class:`McpServerFailure`
(``/why``, dsh.log), masked and bounded by :class:`~dsh.agent_loop.child_words.AgentWords`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from dsh.agent_loop.child_words import AgentWords, ChildFailure
from dsh.agent_loop.process import ExitStatus
from dsh.llm.codes import ErrorCode

__all__ = ["CallFailed", "Category", "McpFailure", "McpServerFailure", "McpStrayLines", "Stage", "failure_line"]

_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_SIGNAL_NAME = re.compile(r"SIG[A-Z0-9]{1,12}")


class Stage(StrEnum):
    SPAWN = "spawn"
    INITIALIZE = "initialize"
    LIST_TOOLS = "list-tools"
    CALL = "call"


class Category(StrEnum):
    PROCESS_START = "process-start"
    PROCESS_EXIT = "process-exit"
    TIMEOUT = "timeout"
    PROTOCOL = "protocol"
    TRANSPORT = "transport"
    HTTP = "http"
    TOOL_ERROR = "tool-error"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class McpFailure:
    """Where and how a server failed: closed facts for the line; the raw cause and words for the host."""

    stage: Stage
    category: Category
    exit_status: ExitStatus | None = None
    http_status: int | None = None
    cause: BaseException | None = field(default=None, compare=False, repr=False)
    words: tuple[tuple[str, object], ...] = field(default=(), compare=False, repr=False)


class CallFailed(Exception):
    """A tools/call that did not come back with a result: its closed facts."""

    def __init__(self, failure: McpFailure) -> None:
        super().__init__(failure.category.value)
        self.failure = failure


def failure_line(server: str, failure: McpFailure) -> str:
    name = server if _SAFE_NAME.fullmatch(server) else "unknown"
    stage = failure.stage.value if isinstance(failure.stage, Stage) else "unknown"
    category = failure.category.value if isinstance(failure.category, Category) else "unknown"
    fields = [f"server: {name}", f"stage: {stage}", f"category: {category}"]
    status = failure.exit_status
    if status is not None:
        if isinstance(status.exit_code, int) and not isinstance(status.exit_code, bool):
            fields.append(f"exit code: {status.exit_code}")
        if isinstance(status.signal, str) and _SIGNAL_NAME.fullmatch(status.signal):
            fields.append(f"signal: {status.signal}")
    http = failure.http_status
    if isinstance(http, int) and not isinstance(http, bool) and 100 <= http <= 599:
        fields.append(f"HTTP status: {http}")
    return f"MCP server failure ({'; '.join(fields)})"


class McpServerFailure(ChildFailure):
    """``/why``'s record of a failed server or call: the line as its message, the server's masked words
    beside it, the raw cause beneath it in the chain. Host-side only."""

    code_name = ErrorCode.MCP
    speaker = "server"


class McpStrayLines(McpServerFailure):
    """``/why``'s record of the first stdout line of a server that was not JSON-RPC: skipped, the server carries
    on. Its words are that line (masked, bounded, inert) and how many such lines were skipped so far."""

    def __init__(self, server: str, words: AgentWords, skipped: Callable[[], int]) -> None:
        name = server if _SAFE_NAME.fullmatch(server) else "unknown"
        super().__init__(f"MCP server {name} wrote a stdout line that is not JSON-RPC: skipped", words)
        self._skipped = skipped

    def word_lines(self) -> list[str]:
        return [*super().word_lines(), f"  stdout lines skipped: {self._skipped()}"]
