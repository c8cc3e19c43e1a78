"""A reply's text and reasoning with the known secrets masked as they stream (docs/architecture.md, "Redaction")."""

from __future__ import annotations

from dsh.llm import ReasoningDelta, Redactor, TextDelta
from dsh.llm.redact import KnownValueStream

__all__ = ["Delta", "MaskedDeltas"]

Delta = TextDelta | ReasoningDelta


class MaskedDeltas:
    """A reply's text and reasoning with the known secrets masked as they stream (docs/architecture.md,
    "Redaction"): each delta passes here before the reply builder keeps it and before any subscriber
    sees it, so the conversation, the session log and every front end get the same masked text.

    Each channel holds back a tail that could be the start of a secret (:class:`KnownValueStream`); a
    channel's tail comes out when the other channel speaks (a reply thinks, then answers) or at the end.
    """

    __slots__ = ("_reasoning", "_text")

    def __init__(self, redactor: Redactor) -> None:
        self._text = KnownValueStream(redactor)
        self._reasoning = KnownValueStream(redactor)

    def mask(self, delta: Delta) -> tuple[Delta, ...]:
        """What to keep and show for one delta (a released text may be empty)."""
        other_kind: type[Delta]
        if isinstance(delta, TextDelta):
            mine, other, other_kind = self._text, self._reasoning, ReasoningDelta
        else:
            mine, other, other_kind = self._reasoning, self._text, TextDelta
        released = mine.feed(delta.text)
        masked = delta if released is delta.text else type(delta)(released)
        if other.holding and delta.text:
            return other_kind(other.flush()), masked
        return (masked,)

    def flush(self) -> tuple[Delta, ...]:
        """The held tails at the end of the reply (or at a cancel), masked: reasoning first."""
        return ReasoningDelta(self._reasoning.flush()), TextDelta(self._text.flush())
