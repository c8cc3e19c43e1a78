"""dsh's own styling of text, and what a sink writes for it: :class:`Styled`, :func:`terminal_text`.

Styles are names carried beside the (untrusted) text; only :func:`terminal_text` turns them into SGR escapes,
after the text went through the one sanitizer (:mod:`dsh.repl.sanitize`).
"""

from __future__ import annotations

from dsh.repl.markdown import MARKDOWN_STYLES, Segment
from dsh.repl.sanitize import sanitize

__all__ = [
    "ADDED",
    "DIM",
    "HIGHLIGHT",
    "REMOVED",
    "RESET",
    "Rewrite",
    "Styled",
    "rewrite",
    "segments_text",
    "styled",
    "terminal_text",
]

DIM = "\x1b[2m"
HIGHLIGHT = "\x1b[1;33m"
ADDED = "\x1b[32m"
REMOVED = "\x1b[31m"
RESET = "\x1b[0m"

_STYLES = {"dim": DIM, "highlight": HIGHLIGHT, "added": ADDED, "removed": REMOVED, **MARKDOWN_STYLES}


class Styled(str):
    """Text plus dsh's own styling: the str value is the plain (untrusted) text, ``spans`` name styles.

    Styles are names, never escape bytes: only :func:`terminal_text` turns them into SGR, after
    sanitizing the text. Joining with ``+`` keeps the spans; any other str operation drops them, so
    a lost style costs colour, never safety.
    """

    spans: tuple[tuple[int, int, str], ...]

    def __new__(cls, text: str, spans: tuple[tuple[int, int, str], ...] = ()) -> Styled:
        self = super().__new__(cls, text)
        self.spans = spans
        return self

    def __add__(self, other: str) -> Styled:
        if not isinstance(other, str):
            return NotImplemented
        shift = len(self)
        extra = tuple((a + shift, b + shift, s) for a, b, s in _spans_of(other))
        return Styled(str.__add__(self, other), self.spans + extra)

    def __radd__(self, other: str) -> Styled:
        if not isinstance(other, str):
            return NotImplemented
        shift = len(other)
        return Styled(str.__add__(other, self), tuple((a + shift, b + shift, s) for a, b, s in self.spans))


def _spans_of(text: str) -> tuple[tuple[int, int, str], ...]:
    """The style spans of ``text``: none for a plain str."""
    return text.spans if isinstance(text, Styled) else ()


class Rewrite(Styled):
    """Text that replaces the sink's unfinished line: the raw line streamed so far, now rendered.

    Only a sink that keeps its unfinished line aside (the interactive one, ``rewrites_partial``) gets
    these; it drops that line and writes this text in its place.
    """

    rewrites_partial = True


def rewrite(text: str) -> Rewrite:
    return Rewrite(str(text), _spans_of(text))


def segments_text(segments: list[Segment]) -> Styled:
    """Styled text from ``(text, style)`` segments (the markdown renderer's output)."""
    parts: list[str] = []
    spans: list[tuple[int, int, str]] = []
    at = 0
    for text, style in segments:
        if style is not None and text:
            if spans and spans[-1][1] == at and spans[-1][2] == style:
                spans[-1] = (spans[-1][0], at + len(text), style)  # one run for neighbours alike
            else:
                spans.append((at, at + len(text), style))
        parts.append(text)
        at += len(text)
    return Styled("".join(parts), tuple(spans))


def styled(text: str, style: str) -> Styled:
    return Styled(text, ((0, len(text), style),) if text else ())


def _paint(text: str, style: str) -> str:
    # Style each line separately so a line never ends inside an open escape sequence.
    sgr = _STYLES[style]
    return "\n".join(f"{sgr}{part}{RESET}" if part else part for part in sanitize(text).split("\n"))


def terminal_text(text: str) -> str:
    """What a sink writes for ``text``: every untrusted character sanitized, then dsh's own styles as SGR."""
    spans = _spans_of(text)
    if not spans:
        return sanitize(str(text))
    plain = str(text)
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(plain):
        return _paint(plain, spans[0][2])  # one styled delta (reasoning): the common case
    out: list[str] = []
    at = 0
    for start, end, style in sorted(spans):
        if start < at:
            continue
        out.append(sanitize(plain[at:start]))
        out.append(_paint(plain[start:end], style))
        at = end
    out.append(sanitize(plain[at:]))
    return "".join(out)
