"""What a session remembers of its last turn for the commands that look back (no I/O).

``/why`` shows the last failure, ``/retry`` sends the last prompt again, ``/expand`` shows the last tool result
in full, and ``/report`` copies the last turn's end reason and its exchanges in the client's ring
(docs/reporting.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from dsh.agent_loop.events import ToolResult
from dsh.agent_loop.reasons import EndReason, Failed
from dsh.agent_loop.session_config import EndpointClient
from dsh.llm import ErrorCode, HarnessError, LlmError, error_chain, redact_text

__all__ = ["TurnMemory", "exchanges_so_far"]


class TurnMemory:
    """The last prompt, end reason, failure, tool result and exchanges of a session's turns."""

    def __init__(self) -> None:
        self.last_prompt: str | None = None
        self.last_reason: EndReason | None = None
        self.last_failure: BaseException | None = None  # what /why shows
        # The last turn's exchanges in the client's ring: those numbered after the first and up to the
        # second (a failure capsule holds them; docs/reporting.md).
        self.turn_exchanges: tuple[int, int] = (0, 0)
        self.last_tool_result: ToolResult | None = None  # what /expand shows in full

    def note_failure(self, end: EndReason, kept: BaseException | None) -> None:
        """A turn that failed leaves /why the exception the loop ``kept``, else a stand-in made of its reason."""
        if isinstance(end, Failed):
            self.last_failure = kept or _reason_error(end)

    def compact_failed(self, exc: HarnessError, secrets: Iterable[str]) -> str:
        """A compaction that did not happen: /why's failure now, and the line that says so."""
        self.last_failure = exc
        if exc.code == ErrorCode.ABORTED:
            return "[compact cancelled] the conversation is unchanged"
        if exc.code == ErrorCode.COMPACT and str(exc) == "nothing to compact yet":
            return "nothing to compact yet"
        message = redact_text(error_chain(exc), secrets).replace("\n", " ")
        return f"[compact failed {exc.code}] {message}; the conversation is unchanged"


def exchanges_so_far(client: EndpointClient | None) -> int:
    """The number of the client's latest exchange its ring holds (0 with no ring: dsh.llm.exchange_ring)."""
    ring = client.ring if client is not None else None  # no client yet: no exchange
    return ring.last if ring is not None else 0


def _reason_error(reason: Failed) -> BaseException:
    """A stand-in for /why when the loop kept no exception (e.g. a failure read back from a log)."""
    return LlmError(reason.message or "turn failed", reason.code or ErrorCode.UNKNOWN)
