"""Incremental Server-Sent Events decoding: bytes in, events out, comments out of band.

Tolerates CRLF, a leading BOM, multi-line ``data:`` and reads split anywhere (mid-UTF-8 included):
lines are cut on ``\\n`` bytes, which never occur inside a multi-byte UTF-8 sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SseComment", "SseDecoder", "SseEvent"]

_BOM = b"\xef\xbb\xbf"


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

    def __init__(self) -> None:
        self._pending = b""
        self._started = False
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent | SseComment]:
        if not self._started:
            chunk = self._pending + chunk
            self._pending = b""
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._pending = chunk
                return []
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        elif self._pending:
            chunk = self._pending + chunk
        lines = chunk.split(b"\n")
        self._pending = lines.pop()
        out: list[SseEvent | SseComment] = []
        for raw in lines:
            self._line(raw, out)
        return out

    def close(self) -> list[SseEvent | SseComment]:
        """End of stream: a final unterminated line counts; a half-built event is dispatched."""
        out: list[SseEvent | SseComment] = []
        if self._pending:
            pending, self._pending = self._pending, b""
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
