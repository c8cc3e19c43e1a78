"""Incremental Server-Sent Events decoding: bytes in, events out, comments out of band.

Tolerates CRLF, a leading BOM, multi-line ``data:`` and reads split anywhere (mid-UTF-8 included):
lines are cut on ``\\n`` bytes, which never occur inside a multi-byte UTF-8 sequence.
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
        if not self._started:
            chunk = b"".join(self._pending) + chunk
            self._pending, self._pending_size = [], 0
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._pending, self._pending_size = [chunk], len(chunk)
                return []
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if b"\n" not in chunk:
            self._hold(chunk)
            return []
        if self._pending:
            chunk = b"".join(self._pending) + chunk
            self._pending, self._pending_size = [], 0
        lines = chunk.split(b"\n")
        self._hold(lines.pop())
        out: list[SseEvent | SseComment] = []
        for raw in lines:
            self._line(raw, out)
        return out

    def _hold(self, part: bytes) -> None:
        if not part:
            return
        self._pending.append(part)
        self._pending_size += len(part)
        if self._pending_size > self._max_line_bytes:
            raise SseLineTooLong(self._max_line_bytes, self._pending[0][:256])

    def close(self) -> list[SseEvent | SseComment]:
        """End of stream: a final unterminated line counts; a half-built event is dispatched."""
        out: list[SseEvent | SseComment] = []
        if self._pending:
            pending = b"".join(self._pending)
            self._pending, self._pending_size = [], 0
            self._line(pending, out)
        self._line(b"", out)
        return out

    def _line(self, raw: bytes, out: list[SseEvent | SseComment]) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw:
            if self._data:
                out.append(SseEvent("\n".join(self._data), self._event))
                self._data = []
            self._event = None
            return
        line = raw.decode("utf-8", "replace")
        if line[0] == ":":
            out.append(SseComment(line[1:].strip()))
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # `id`, `retry` and unknown fields carry nothing we use.
