"""Incremental Server-Sent Events decoding: bytes in, events out, comments out of band.

Tolerates CRLF, a leading BOM, multi-line ``data:`` and reads split anywhere (mid-UTF-8 included):
lines are cut on ``\\n`` bytes, which never occur inside a multi-byte UTF-8 sequence, so all the
complete lines of one read are decoded in a single call.

This is the client's hot path (a DeepSeek stream can be 200 000 one-character deltas), so
:meth:`SseDecoder.feed_compact` hands an ordinary event back as its bare data string instead of an
object; :meth:`SseDecoder.feed` is the same decoder with every event as an :class:`SseEvent`.

Comments cost O(1) whatever their number: a run of them in one read is one :class:`SseComment`, and
a read holding nothing but noise (comments, blank lines, ignored fields) is skipped without building
a line list. The caller bounds the size of each read (the client inflates in bounded pieces).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_LINE_BYTES", "SseComment", "SseDecoder", "SseEvent", "SseLineTooLong"]

_BOM = b"\xef\xbb\xbf"
MAX_LINE_BYTES = 64 * 1024 * 1024  # far above any real chunk; bounds memory against a hostile server


class SseLineTooLong(ValueError):
    """A line grew past the decoder's bound without a newline; ``head`` is its start."""

    def __init__(self, limit: int, head: bytes) -> None:
        super().__init__(f"SSE line longer than {limit} bytes")
        self.head = head.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str | None = None


@dataclass(frozen=True, slots=True)
class SseComment:
    """A ``:`` line, e.g. DeepSeek's ``: keep-alive``: proof of life, not content."""

    text: str


Compact = str | SseEvent | SseComment
"""What :meth:`SseDecoder.feed_compact` yields: a bare data string for an unnamed event."""


def _expand(item: Compact) -> SseEvent | SseComment:
    return SseEvent(item) if type(item) is str else item  # type: ignore[return-value]


class SseDecoder:
    """Feed raw chunks with :meth:`feed`; call :meth:`close` at end of stream to flush."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._pending: list[bytes] = []  # an unterminated line, in parts (no quadratic re-joining)
        self._pending_size = 0
        self._started = False
        self._data: list[str] = []
        self._event: str | None = None
        self._max_line_bytes = max_line_bytes

    def feed(self, chunk: bytes) -> list[SseEvent | SseComment]:
        return [_expand(item) for item in self.feed_compact(chunk)]

    def close(self) -> list[SseEvent | SseComment]:
        """End of stream: a final unterminated line counts; a half-built event is dispatched."""
        return [_expand(item) for item in self.close_compact()]

    def feed_compact(self, chunk: bytes) -> list[Compact]:
        """:meth:`feed`, except that an event without an ``event:`` field comes back as its data string."""
        if not self._started:
            chunk = b"".join(self._pending) + chunk
            self._pending, self._pending_size = [], 0
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._hold(chunk)
                return []
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        end = chunk.rfind(b"\n")
        if end < 0:
            self._hold(chunk)
            return []
        if self._pending:
            self._pending.append(chunk[:end])
            block = b"".join(self._pending)
            self._pending, self._pending_size = [], 0
        else:
            block = chunk[:end]
        noise = self._noise(block)
        if noise is not None:
            self._hold(chunk[end + 1 :])
            return noise
        text = block.decode("utf-8", "replace")
        self._hold(chunk[end + 1 :])
        out: list[Compact] = []
        self._lines(text.split("\n"), "\r" in text, out)
        return out

    def _noise(self, block: bytes) -> list[Compact] | None:
        """The events of ``block`` (complete lines) when it is only keep-alive noise, else None.

        With no event half-built, every line except ``data`` and ``event`` ones is a no-op (a comment,
        a blank line, ``id``, ``retry``, an unknown field), so a block without those is skipped by
        C-speed substring searches: a flood of comment lines costs no object per line, only one
        :class:`SseComment` for the whole block (docs/reliability.md, "Hostile streams").
        """
        if self._data or self._event is not None:
            return None
        if block.startswith((b"data", b"event")) or b"\ndata" in block or b"\nevent" in block:
            return None
        if block.startswith(b":"):
            first = 0
        else:
            first = block.find(b"\n:")
            if first < 0:
                return []
            first += 1
        stop = block.find(b"\n", first)
        line = block[first + 1 : stop if stop >= 0 else len(block)]
        return [SseComment(line.decode("utf-8", "replace").strip())]

    def close_compact(self) -> list[Compact]:
        """:meth:`close` in the form of :meth:`feed_compact`."""
        lines = [b"".join(self._pending).decode("utf-8", "replace")] if self._pending else []
        self._pending, self._pending_size = [], 0
        lines.append("")
        out: list[Compact] = []
        self._lines(lines, "\r" in lines[0], out)
        return out

    def _hold(self, part: bytes) -> None:
        if not part:
            return
        self._pending.append(part)
        self._pending_size += len(part)
        if self._pending_size > self._max_line_bytes:
            raise SseLineTooLong(self._max_line_bytes, self._pending[0][:256])

    def _lines(self, lines: list[str], has_cr: bool, out: list[Compact]) -> None:
        if has_cr:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        data = self._data
        for line in lines:
            # Ordered by frequency: a DeepSeek stream is `data:` lines and the blank lines after them.
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            elif not line:
                if data:
                    payload = data[0] if len(data) == 1 else "\n".join(data)
                    data.clear()
                    out.append(payload if self._event is None else SseEvent(payload, self._event))
                self._event = None
            elif line[0] == ":":
                if not out or type(out[-1]) is not SseComment:  # a run of comments is one proof of life
                    out.append(SseComment(line[1:].strip()))
            else:
                name, sep, value = line.partition(":")
                if sep and value.startswith(" "):
                    value = value[1:]
                if name == "data":
                    data.append(value)
                elif name == "event":
                    self._event = value
                # `id`, `retry` and unknown fields carry nothing we use.
