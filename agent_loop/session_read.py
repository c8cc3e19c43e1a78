"""Reading a session log: one streaming pass, a parsed batch at a time, with its warnings counted.

The log's format is described in agent_loop/session_log.py; a reader that does not repair the log
(``dsh sessions show``) uses :func:`load_session_file`, the writer's ``open`` uses :func:`stream_log`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from dsh.agent_loop.events import TurnEnd, TurnStart
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.session_files import VERSION, log_error, open_regular
from dsh.llm.lines import LongLine, read_line_batches, read_lines
from dsh.llm.text import loads, loads_lines

__all__ = ["count_seq", "load_session_file", "parse_body_by_line", "read_header"]

TURN_BOUNDARIES = frozenset({TurnStart.type, TurnEnd.type})


@dataclass(slots=True)
class Loaded:
    header: dict[str, Any]
    tail: list[dict[str, Any]]  # the records from the last turn boundary on (what repair needs)
    warnings: list[str]
    good_size: int  # bytes up to the end of the last complete line
    next_seq: int = 1  # the seq the next record read should carry (a gap is reported)
    max_seq: int = 0  # the highest seq read: the next append carries one more
    last_turn: int = 0
    size: int = 0  # the file's size when read (good_size plus a torn tail)
    skipped: int = 0  # counts behind the one-line summary (warnings keeps only the first few)
    gaps: int = 0
    torn: int = 0  # bytes of a torn last line
    keep_tail: bool = True  # False: a reader that never repairs keeps not even the last turn


_BATCH = 1024  # lines parsed at once: one parse of many is fast, and a batch's objects stay a few MB
_HEADER_LIMIT = 1 << 20  # a first line longer than this is not a dsh header
_WARNING_LIMIT = 20  # detailed warnings kept per load; the rest are only counted


_RecordBatch = Callable[[list[dict[str, Any]]], None]  # hears records a parsed batch at a time


class PrefixReader(Protocol):
    """Reads the start of a log its own way (agent_loop/resume_prefix.py: a long log's resume skims what its cut
    leaves out); the rest is read here, as ever."""

    def scan(self, fd: int, start: int, size: int, loaded: Loaded, path: Path) -> tuple[int, int]:
        """Read from ``start`` (after the header), counting into ``loaded``; ``(where the rest begins, lines read)``."""
        ...

    def accepted(self) -> bool:
        """Once the log is read (and repaired): whether what :meth:`scan` read stands."""
        ...

    def restart(self) -> tuple[_RecordBatch, PrefixReader | None]:
        """Where the records go when the log is read again (:meth:`accepted` said no), and how its start is read
        then (None: as the rest)."""
        ...


def each_record(on_record: Callable[[dict[str, Any]], None]) -> _RecordBatch:
    def each(records: list[dict[str, Any]]) -> None:
        for record in records:
            on_record(record)

    return each


def _parse_header(line: bytes, path: Path, warnings: list[str]) -> dict[str, Any]:
    try:
        header = loads(line)
    except ValueError as exc:
        raise log_error(f"{path} is not a dsh session log (unreadable header)", exc)
    if not isinstance(header, dict) or header.get("type") != "session":
        raise log_error(f"{path} is not a dsh session log (no session header)")
    if header.get("version") != VERSION:
        warnings.append(f"session log {path} has version {header.get('version')!r}; reading it as {VERSION}")
    return header


def stream_log(
    fd: int,
    path: Path,
    on_records: _RecordBatch | None,
    *,
    max_record: int | None = None,
    on_long: Callable[[LongLine], None] | None = None,
    keep_tail: bool = True,
    prefix: PrefixReader | None = None,
) -> Loaded:
    """One pass over the log: every record to ``on_records`` in order, a batch at a time; keep only the last turn's.

    With ``max_record``, a longer line is never held: it goes to ``on_long`` as a :class:`LongLine`.
    ``keep_tail`` False keeps not even the last turn (a reader that does not repair the log). ``prefix`` reads
    the lines after the header up to where it says (not with ``max_record``).
    """
    warnings: list[str] = []
    batches = read_line_batches(fd, max_line=max_record)  # a chunk's lines at a time: no Python step per line
    opening = next(batches)
    if isinstance(opening, int):
        raise log_error(f"{path} is not a dsh session log (no header line)")
    first_size = opening.size if isinstance(opening, LongLine) else len(opening[0])
    if isinstance(opening, LongLine) or first_size > _HEADER_LIMIT:
        raise log_error(f"{path} is not a dsh session log (a first line of {first_size} bytes)")
    first = opening[0]
    loaded = Loaded(_parse_header(first, path, warnings), [], warnings, len(first) + 1, keep_tail=keep_tail)
    number = 2  # the line number of the next line
    good_size = loaded.good_size
    rest: Iterator[list[bytes] | LongLine | int] | None = None
    if prefix is not None:
        tail, skimmed = prefix.scan(fd, good_size, os.fstat(fd).st_size, loaded, path)
        if tail > good_size:  # the first chunk read is not needed (nor held): the rest starts at the tail
            opening, batches = [], iter(())
            rest, number, good_size = read_line_batches(fd, tail), number + skimmed, tail
    for item in rest if rest is not None else itertools.chain((opening[1:],), batches):
        if isinstance(item, list):
            for start in range(0, len(item), _BATCH):
                _take(item[start : start + _BATCH], number + start, path, loaded, on_records)
            number += len(item)
        elif isinstance(item, LongLine):
            _skip_long(item, number, path, loaded, on_long)
            number += 1
        else:
            good_size = item  # where complete lines end
        del item  # not held while the next chunk is read
    loaded.good_size = good_size
    loaded.size = os.fstat(fd).st_size
    if loaded.size > good_size:
        loaded.torn = loaded.size - good_size
        warnings.append(f"ignored a torn last line ({loaded.torn} bytes) in {path}")
    return loaded


def _skip_long(line: LongLine, number: int, path: Path, loaded: Loaded,
               on_long: Callable[[LongLine], None] | None) -> None:
    """A record too long to read: its ``seq`` (from its first bytes) still counts, so no gap is reported."""
    seq = line.field("seq")
    if seq is not None and seq.isdigit():
        count_seq(int(seq), number, path, loaded)
    if on_long is not None:
        on_long(line)


def _take(
    batch: list[bytes], number: int, path: Path, loaded: Loaded, on_records: _RecordBatch | None
) -> None:
    records = _parse_clean_body(batch, loaded.next_seq)
    if records is None:
        records = parse_body_by_line(batch, path, loaded, number)
    elif records:
        loaded.next_seq = records[-1]["seq"] + 1
        loaded.max_seq = max(loaded.max_seq, records[-1]["seq"])
    if on_records is not None and records:
        on_records(records)
    # The tail is the records from the last turn boundary on; a batch is looked at whole, not record by record.
    starts = [index for index, record in enumerate(records)
              if record["type"] in TURN_BOUNDARIES and isinstance(record.get("data"), dict)]
    for index in starts:
        if records[index]["type"] == TurnStart.type:
            turn = records[index]["data"].get("turn")
            if isinstance(turn, int) and turn > loaded.last_turn:
                loaded.last_turn = turn
    if starts:
        loaded.tail = records[starts[-1] :] if loaded.keep_tail else []
    elif loaded.keep_tail:
        loaded.tail.extend(records)


def _parse_clean_body(lines: list[bytes], expected_seq: int = 1) -> list[dict[str, Any]] | None:
    """Every record line at once, or None unless each is a record and ``seq`` runs on from ``expected_seq``.

    One parse of the joined lines (:func:`~dsh.llm.text.loads_lines`) is several times faster than one
    per line. Any irregularity (an unreadable or blank line, a gap) returns None so that the line-by-line
    reader reports it exactly as before. (Only a crafted file could fool the count check: a line holding
    two records that makes up for one record split over two lines, with every ``seq`` in order.)
    """
    if not lines:
        return []
    try:
        records = loads_lines(lines)
    except ValueError:
        return None
    if len(records) != len(lines):
        return None
    try:  # checked a list at a time: a non-record (a list, a number, no "type") is a TypeError or KeyError
        if not all([type(record["type"]) is str for record in records]):
            return None
        seqs = [record.get("seq") for record in records]
    except (TypeError, KeyError):
        return None
    if seqs != list(range(expected_seq, expected_seq + len(seqs))) or not all([type(seq) is int for seq in seqs]):
        return None
    return cast(list[dict[str, Any]], records)  # each checked above


def parse_body_by_line(lines: list[bytes], path: Path, loaded: Loaded, first_number: int) -> list[dict[str, Any]]:
    """The records of ``lines`` (numbered from ``first_number``), each parsed alone: what is no record, or has no
    type, is a warning in ``loaded``; each record's seq counted (:func:`count_seq`)."""
    records: list[dict[str, Any]] = []
    warnings = loaded.warnings
    for number, line in enumerate(lines, start=first_number):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            loaded.skipped += 1
            if len(warnings) < _WARNING_LIMIT:
                warnings.append(f"skipped an unreadable record on line {number} of {path}")
            continue
        seq = record.get("seq")
        if isinstance(seq, int):
            count_seq(seq, number, path, loaded)
        records.append(record)
    return records


def count_seq(seq: int, number: int, path: Path, loaded: Loaded) -> None:
    """A record's ``seq`` at line ``number``: a gap (not the next one) is counted and warned of in ``loaded``."""
    if seq != loaded.next_seq:
        loaded.gaps += 1
        if len(loaded.warnings) < _WARNING_LIMIT:
            loaded.warnings.append(
                f"sequence gap in {path}: expected seq {loaded.next_seq}, found {seq} on line {number}")
    loaded.next_seq = seq + 1
    loaded.max_seq = max(loaded.max_seq, seq)


def load_summary(loaded: Loaded, path: Path) -> str | None:
    """The load warnings as the one line the user sees (the details go to dsh.log)."""
    parts: list[str] = []
    if loaded.torn:
        parts.append(f"ignored a torn last line ({loaded.torn} bytes)")
    if loaded.skipped:
        parts.append(f"skipped {loaded.skipped} unreadable record{'s' if loaded.skipped != 1 else ''}")
    if loaded.gaps:
        parts.append(f"{loaded.gaps} sequence gap{'s' if loaded.gaps != 1 else ''}")
    version = loaded.header.get("version")
    if version != VERSION:
        parts.append(f"version {version!r} read as {VERSION}")
    if not parts:
        return None
    return f"session log {path}: {'; '.join(parts)} (details in dsh.log)"


def load_session_file(
    path: str | os.PathLike[str],
    *,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    max_record: int | None = None,
    on_long: Callable[[LongLine], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Read a log without opening it for append: ``(header, records, warnings)``. No repair, no lock.

    With ``on_record`` each record goes there instead (``records`` comes back empty): memory stays
    one record, whatever the file's size (``dsh sessions show``); with ``max_record`` too, a record
    longer than that is never read into memory and goes to ``on_long`` instead.
    """
    file = Path(path)
    records: list[dict[str, Any]] = []
    fd, _ = open_regular(file, os.O_RDONLY)
    try:
        with gc_paused():
            on_records = each_record(on_record) if on_record else records.extend
            loaded = stream_log(fd, file, on_records, max_record=max_record, on_long=on_long,
                                keep_tail=False)  # no repair here
    except OSError as exc:
        raise log_error(f"cannot read session log {file}", exc)
    finally:
        os.close(fd)
    return loaded.header, records, loaded.warnings


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A log's header line alone (SessionLogError when the file is not a dsh session log)."""
    file = Path(path)
    fd, _ = open_regular(file, os.O_RDONLY)
    try:
        _, first = next(read_lines(fd, max_line=_HEADER_LIMIT))
        if not isinstance(first, bytes):
            raise log_error(f"{file} is not a dsh session log (no header line)")
        return _parse_header(first, file, [])
    except OSError as exc:
        raise log_error(f"cannot read session log {file}", exc)
    finally:
        os.close(fd)

