"""Reading a file of lines (JSONL: session logs, wire traces) in bounded memory, a line too long to hold skipped.

A record may be gigabytes (a hostile tool result, a forged trace): :func:`read_lines` never holds more than
one chunk plus ``max_line``, and says what it skipped with a :class:`LongLine`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["LongLine", "read_line_batches", "read_lines"]

_CHUNK = 1 << 22  # bytes read per pread


@dataclass(frozen=True, slots=True)
class LongLine:
    """A line longer than a reader's ``max_line``: its length and first bytes; the rest was never held."""

    size: int
    head: bytes

    def field(self, name: str) -> str | None:
        """A short string or number field of the record, read from the line's first bytes."""
        match = re.search(rb'"%s":\s*"?([A-Za-z0-9/_.-]{1,64})' % name.encode(), self.head)
        return match.group(1).decode() if match else None


_LONG_HEAD = 256  # bytes of a long line kept for LongLine.head


def read_lines(
    fd: int, start: int = 0, *, max_line: int | None = None
) -> Iterator[tuple[int, bytes | LongLine | None]]:
    """``(offset, line)`` for each complete line from ``start``, without its newline; last a torn tail.

    Memory is one chunk plus the longest line, or with ``max_line`` one chunk plus ``max_line``: a
    longer line comes as a :class:`LongLine` and is skipped, not held. The final item is
    ``(offset, None)`` with the offset where complete lines end; bytes past it are a torn last line.
    """
    limit = max_line if max_line is not None else sys.maxsize
    offset = start  # where the current line starts
    pending: list[bytes] = []  # its pieces read so far, gathered without quadratic joins
    length = 0  # its bytes read so far
    head: bytes | None = None  # its first bytes, once it is longer than ``limit`` (then nothing is kept)
    while True:
        chunk = os.pread(fd, _CHUNK, offset + length)
        if not chunk:
            yield offset, None
            return
        *ends, rest = chunk.split(b"\n")  # each of ``ends`` ends a line; ``rest`` begins the next one
        for piece in ends:
            size = length + len(piece)
            if head is None and size <= limit:
                yield offset, b"".join([*pending, piece]) if pending else piece
            else:
                yield offset, LongLine(size, _first_bytes([head, piece] if head is not None else [*pending, piece]))
            offset += size + 1
            pending, length, head = [], 0, None
        length += len(rest)
        if head is not None:
            head = _first_bytes([head, rest])
        elif rest:
            pending.append(rest)
            if length > limit:
                head, pending = _first_bytes(pending), []


def read_line_batches(
    fd: int, start: int = 0, *, max_line: int | None = None
) -> Iterator[list[bytes] | LongLine | int]:
    """:func:`read_lines` a chunk at a time: lists of complete lines (newlines dropped), a :class:`LongLine`
    for each line over ``max_line``, and last the offset where complete lines end (an ``int``).

    The same lines in the same order as :func:`read_lines`, without a Python step per line: a reader of
    a session log of 600 000 lines (resume) hands each chunk's list on whole. Memory is one chunk plus
    the longest line (with ``max_line``: as :func:`read_lines`).
    """
    if max_line is not None:
        batch: list[bytes] = []
        for offset, line in read_lines(fd, start, max_line=max_line):
            if isinstance(line, bytes):
                batch.append(line)
                if len(batch) >= 4096:
                    yield batch
                    batch = []
                continue
            if batch:
                yield batch
                batch = []
            yield offset if line is None else line
        return
    position = start  # where the next read starts
    line_start = start  # where the line being gathered starts
    pending: list[bytes] = []  # its pieces so far: only a line longer than a chunk
    while True:
        chunk = os.pread(fd, _CHUNK, position)
        if not chunk:
            yield line_start
            return
        lines = chunk.split(b"\n")
        rest = lines.pop()  # after the last newline: the start of the next line
        if not lines:  # no newline: a line longer than a chunk goes on
            pending.append(chunk)
            position += len(chunk)
            continue
        if pending:
            pending.append(lines[0])
            lines[0] = b"".join(pending)
            pending = []
        # The next read starts where the unfinished line does, rather than keeping its start to join:
        # fewer, steadier allocations (a 1 GB log of 1 MB lines spent more time in the kernel than parsing).
        position += len(chunk) - len(rest)
        line_start = position
        del chunk, rest
        yield lines
        del lines  # the reader holds what it needs; the next read is not made while these are held here too


def _first_bytes(parts: list[bytes]) -> bytes:
    """The first :data:`_LONG_HEAD` bytes of ``parts`` joined, without joining them."""
    if len(parts[0]) >= _LONG_HEAD:
        return parts[0][:_LONG_HEAD]
    head = bytearray()
    for part in parts:
        head += part[: _LONG_HEAD - len(head)]
        if len(head) >= _LONG_HEAD:
            break
    return bytes(head)
