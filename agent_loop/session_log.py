"""The durable session log: one JSONL file per session.

Line 1 is a header ``{"type":"session","version":1,"id","createdAt","cwd","project"}`` (``project``: the
git work tree holding ``cwd``, else ``cwd``; older logs lack it and count ``cwd`` as their project);
every later line is
``{"type","seq","time","data"}`` for one durable event, ``seq`` contiguous from 1. Each append is a
single ``write(2)`` of the whole line on an ``O_APPEND`` descriptor (nothing is buffered in this
process, so a SIGKILL loses at most the line being written), and the file is fsynced at turn
boundaries and after a ``context/compact`` record. A torn last line is ignored on load and reported in
``load_warnings``.

Opening a log to continue it takes an exclusive ``flock`` (a second dsh on the same session is
refused), cuts a torn tail, and -- if the last turn has no ``turn/end`` -- durably appends the closers
before anything else: a failed ``tool/result`` for every pending tool call, then
``turn/end {"kind":"interrupted"}``.

A new session is created lazily (:meth:`SessionLog.create` with ``lazy=True``): its id is fixed at
once, but the file -- header and all, fsynced, directory entry too -- is written by the first append,
the first turn's ``turn/start``. A launch that runs no turn leaves nothing behind.

A write failure (ENOSPC, EIO, ...) raises :class:`SessionLogError` (code ``SESSION_LOG``); the partial
line is cut back off, and the log refuses further appends rather than writing records out of order.

This is one of the two places where events become dicts and back (:func:`~dsh.agent_loop.events.to_wire`,
:func:`~dsh.agent_loop.events.from_wire`); records are kept as read, so a record of a type this version
does not know survives a resume untouched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from dsh.agent_loop.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    ToolResult,
    TurnEnd,
    TurnStart,
    from_wire,
    to_wire,
)
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.journal import remove_journal
from dsh.agent_loop.project import project_root
from dsh.agent_loop.reasons import Interrupted
from dsh.agent_loop.safe_open import NotRegularFile, open_regular_fd
from dsh.agent_loop.session_id import new_session_id
from dsh.llm import ErrorCode, HarnessError
from dsh.llm.lines import LongLine, read_line_batches, read_lines
from dsh.llm.text import loads, loads_lines

__all__ = [
    "INTERRUPTED_TOOL_OUTPUT",
    "SessionInfo",
    "SessionLog",
    "SessionLogError",
    "default_root",
    "list_sessions",
    "load_session_file",
    "read_header",
    "remove_session",
    "resolve_session",
    "session_in_use",
]

VERSION = 1
SUFFIX = ".jsonl"
INTERRUPTED_TOOL_OUTPUT = "Error: tool call interrupted by a previous process exit"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TURN_START_MARK = b'"type":"%s"' % TurnStart.type.encode()
_TITLE_LIMIT = 60


def default_root() -> Path:
    """``$XDG_STATE_HOME/dsh/sessions``, else ``~/.local/state/dsh/sessions`` (a relative XDG value is ignored)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "dsh" / "sessions"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dumps(value: Mapping[str, Any]) -> bytes:
    # backslashreplace keeps a lone surrogate (e.g. from undecodable tool output) as a JSON escape
    # instead of failing the write or producing invalid UTF-8.
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", "backslashreplace"
    )


class SessionLogError(HarnessError):
    """A session log that cannot be read, written, locked or found; ``code`` says which."""

    def __init__(self, message: str, code: str = ErrorCode.SESSION_LOG, *, cause: BaseException | None = None) -> None:
        super().__init__(message, code, cause=cause)


def _log_error(message: str, cause: BaseException | None = None) -> SessionLogError:
    return SessionLogError(message, cause=cause)


@dataclass(slots=True)
class _Loaded:
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


_Batch = Callable[[list[dict[str, Any]]], None]  # hears records a parsed batch at a time


def _each(on_record: Callable[[dict[str, Any]], None]) -> _Batch:
    def each(records: list[dict[str, Any]]) -> None:
        for record in records:
            on_record(record)

    return each


def _open_regular(path: Path, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` without following a symlink or blocking on a FIFO; only a regular file is kept.

    ``dsh.agent_loop.safe_open`` decides on what was opened, so nothing can be swapped in between; see
    docs/architecture.md (the session log).
    """
    refusal: str
    try:
        return open_regular_fd(path, flags, follow_symlinks=False)
    except NotRegularFile as exc:
        refusal = f"session log {path} is not a regular file ({exc.kind})"
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise _log_error(f"cannot open session log {path}", exc)
        refusal = f"session log {path} is a symbolic link; dsh opens only regular files"
    # Raised here, outside the handlers: error_chain would show the OSError's own text beneath the line.
    raise _log_error(refusal)


def _read_header(line: bytes, path: Path, warnings: list[str]) -> dict[str, Any]:
    try:
        header = loads(line)
    except ValueError as exc:
        raise _log_error(f"{path} is not a dsh session log (unreadable header)", exc)
    if not isinstance(header, dict) or header.get("type") != "session":
        raise _log_error(f"{path} is not a dsh session log (no session header)")
    if header.get("version") != VERSION:
        warnings.append(f"session log {path} has version {header.get('version')!r}; reading it as {VERSION}")
    return header


def _stream(
    fd: int,
    path: Path,
    on_records: _Batch | None,
    *,
    max_record: int | None = None,
    on_long: Callable[[LongLine], None] | None = None,
    keep_tail: bool = True,
) -> _Loaded:
    """One pass over the log: every record to ``on_records`` in order, a batch at a time; keep only the last turn's.

    With ``max_record``, a longer line is never held: it goes to ``on_long`` as a :class:`LongLine`.
    ``keep_tail`` False keeps not even the last turn (a reader that does not repair the log).
    """
    warnings: list[str] = []
    batches = read_line_batches(fd, max_line=max_record)  # a chunk's lines at a time: no Python step per line
    opening = next(batches)
    if isinstance(opening, int):
        raise _log_error(f"{path} is not a dsh session log (no header line)")
    first_size = opening.size if isinstance(opening, LongLine) else len(opening[0])
    if isinstance(opening, LongLine) or first_size > _HEADER_LIMIT:
        raise _log_error(f"{path} is not a dsh session log (a first line of {first_size} bytes)")
    first = opening[0]
    loaded = _Loaded(_read_header(first, path, warnings), [], warnings, len(first) + 1, keep_tail=keep_tail)
    number = 2  # the line number of the next line
    good_size = loaded.good_size
    for item in itertools.chain((opening[1:],), batches):
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


def _skip_long(line: LongLine, number: int, path: Path, loaded: _Loaded,
               on_long: Callable[[LongLine], None] | None) -> None:
    """A record too long to read: its ``seq`` (from its first bytes) still counts, so no gap is reported."""
    seq = line.field("seq")
    if seq is not None and seq.isdigit():
        _count_seq(int(seq), number, path, loaded)
    if on_long is not None:
        on_long(line)


def _take(
    batch: list[bytes], number: int, path: Path, loaded: _Loaded, on_records: _Batch | None
) -> None:
    records = _parse_clean_body(batch, loaded.next_seq)
    if records is None:
        records = _parse_body_by_line(batch, path, loaded, number)
    elif records:
        loaded.next_seq = records[-1]["seq"] + 1
        loaded.max_seq = max(loaded.max_seq, records[-1]["seq"])
    if on_records is not None and records:
        on_records(records)
    # The tail is the records from the last turn boundary on; a batch is looked at whole, not record by record.
    starts = [index for index, record in enumerate(records)
              if record["type"] in _TURN_BOUNDARIES and isinstance(record.get("data"), dict)]
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


def _parse_body_by_line(lines: list[bytes], path: Path, loaded: _Loaded, first_number: int) -> list[dict[str, Any]]:
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
            _count_seq(seq, number, path, loaded)
        records.append(record)
    return records


def _count_seq(seq: int, number: int, path: Path, loaded: _Loaded) -> None:
    if seq != loaded.next_seq:
        loaded.gaps += 1
        if len(loaded.warnings) < _WARNING_LIMIT:
            loaded.warnings.append(
                f"sequence gap in {path}: expected seq {loaded.next_seq}, found {seq} on line {number}")
    loaded.next_seq = seq + 1
    loaded.max_seq = max(loaded.max_seq, seq)


def _summary(loaded: _Loaded, path: Path) -> str | None:
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
    fd, _ = _open_regular(file, os.O_RDONLY)
    try:
        with gc_paused():
            loaded = _stream(fd, file, _each(on_record) if on_record else records.extend, max_record=max_record,
                             on_long=on_long,
                             keep_tail=False)  # no repair here
    except OSError as exc:
        raise _log_error(f"cannot read session log {file}", exc)
    finally:
        os.close(fd)
    return loaded.header, records, loaded.warnings


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A log's header line alone (SessionLogError when the file is not a dsh session log)."""
    file = Path(path)
    fd, _ = _open_regular(file, os.O_RDONLY)
    try:
        _, first = next(read_lines(fd, max_line=_HEADER_LIMIT))
        if not isinstance(first, bytes):
            raise _log_error(f"{file} is not a dsh session log (no header line)")
        return _read_header(first, file, [])
    except OSError as exc:
        raise _log_error(f"cannot read session log {file}", exc)
    finally:
        os.close(fd)


_TURN_BOUNDARIES = frozenset({TurnStart.type, TurnEnd.type})


def _open_turn_closers(records: list[dict[str, Any]]) -> list[ToolResult | TurnEnd]:
    """Closers for an open last turn: failed results for pending calls, then ``interrupted``.

    Only the records from the last turn boundary on are decoded: a 100 000-record log is scanned, not
    rebuilt. A record whose ``data`` is not an object is ignored, as it always was.
    """
    start = len(records)
    for index in range(len(records) - 1, -1, -1):
        record = records[index]
        if record.get("type") in _TURN_BOUNDARIES and isinstance(record.get("data"), dict):
            start = index
            break
    tail = [from_wire(record) for record in records[start:] if isinstance(record.get("data"), dict)]
    if not tail or not isinstance(tail[0], TurnStart) or not isinstance(records[start]["data"].get("turn"), int):
        return []
    open_turn = tail[0].turn
    pending: dict[str, str] = {}  # call id -> tool name, in model order
    for event in tail[1:]:
        if isinstance(event, AssistantMessage):
            for call in event.tool_calls:
                pending[call.id] = call.name
        elif isinstance(event, ToolResult):
            pending.pop(event.id, None)
    closers: list[ToolResult | TurnEnd] = [
        ToolResult(open_turn, call_id, name, INTERRUPTED_TOOL_OUTPUT, is_error=True)
        for call_id, name in pending.items()
    ]
    closers.append(TurnEnd(open_turn, Interrupted()))
    return closers


class SessionLog:
    """An open, appendable session log. Build with :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, fd: int | None, loaded: _Loaded) -> None:
        self.path = path
        self.root = path.parent
        self.header = loaded.header
        self.id: str = str(loaded.header.get("id") or path.stem)
        self.cwd: str = str(loaded.header.get("cwd") or "")
        self.created_at: str = str(loaded.header.get("createdAt") or "")
        self.load_warnings: list[str] = list(loaded.warnings)
        self.load_summary: str | None = _summary(loaded, path) if loaded.warnings else None
        self.repaired_turn: int | None = None
        self._fd: int | None = fd
        self._size = loaded.good_size
        self._next_seq = loaded.max_seq + 1
        self._failure: SessionLogError | None = None
        self.last_turn = loaded.last_turn
        self._pending = False  # created lazily and not written yet: the file does not exist

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        *,
        session_id: str | None = None,
        project: str | os.PathLike[str] | None = None,
        lazy: bool = False,
    ) -> SessionLog:
        """A new empty session under ``root`` (created 0700), header written and fsynced.

        With ``lazy`` the id is picked now and the file is written by the first :meth:`append` (see
        the module docstring): a launch that runs no turn leaves no empty session behind.
        """
        directory = Path(root) if root is not None else default_root()
        where = str(cwd if cwd is not None else os.getcwd())
        if project is None:
            project = project_root(Path(where))
        ident = session_id or new_session_id()
        if not _SAFE_ID.match(ident):
            raise _log_error(f"invalid session id {ident!r}")
        header = {
            "type": "session",
            "version": VERSION,
            "id": ident,
            "createdAt": _now(),
            "cwd": where,
            "project": str(project),
        }
        log = cls(directory / (ident + SUFFIX), None, _Loaded(header, [], [], 0))
        log._pending = True
        if lazy:
            _make_directory(directory)  # an unusable state directory still fails at launch
            if session_id is None and os.path.lexists(log.path):  # pragma: no cover - a random collision
                log.id = header["id"] = new_session_id()
                log.path = directory / (log.id + SUFFIX)
            return log
        log._materialize(fixed_id=session_id is not None)
        return log

    def _materialize(self, *, fixed_id: bool = True) -> None:
        """Write the file of a lazily created session: header, fsync, directory entry (once)."""
        directory = self.root
        _make_directory(directory)
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                break
            except FileExistsError:
                if fixed_id:
                    raise _log_error(f"session {self.id} already exists in {directory}")
                self.id = self.header["id"] = new_session_id()
                self.path = directory / (self.id + SUFFIX)
            except OSError as exc:
                raise _log_error(f"cannot create session log {self.path}", exc)
        else:  # pragma: no cover - twenty random collisions
            raise _log_error(f"cannot pick a fresh session id in {directory}")
        self._fd = fd
        self._pending = False
        self.header["createdAt"] = self.created_at = _now()  # the session starts with its first turn
        try:
            self._lock()
            self._write(_dumps(self.header))
            self.sync()
        except BaseException:
            self.close()
            raise
        _fsync_dir(directory)

    @property
    def written(self) -> bool:
        """False while a lazily created session has no file yet (no turn has started)."""
        return not self._pending

    @property
    def project(self) -> str:
        """The project this session belongs to (the header's, else its ``cwd``)."""
        return str(self.header.get("project") or self.cwd)

    @classmethod
    def open(
        cls,
        path_or_id: str | os.PathLike[str],
        root: str | os.PathLike[str] | None = None,
        *,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        on_records: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> SessionLog:
        """Open an existing session to continue it: lock, cut a torn tail, close an open last turn.

        The log is streamed once: each record (then each closer appended) goes to ``on_record`` in
        order -- or to ``on_records`` a parsed batch at a time (resume: no call per record) -- and only
        the last turn's records are held here, so memory follows what the caller keeps, not the file's size.
        """
        path = resolve_session(path_or_id, root)
        fd, _ = _open_regular(path, os.O_RDWR | os.O_APPEND)
        with gc_paused():
            try:
                _flock(fd, path)
                if on_record is not None:
                    on_records = _each(on_record)
                loaded = _stream(fd, path, on_records)
                log = cls(path, fd, loaded)
            except OSError as exc:
                os.close(fd)
                raise _log_error(f"cannot read session log {path}", exc)
            except BaseException:
                os.close(fd)
                raise
            try:
                if loaded.good_size < loaded.size:
                    log._truncate_tail(loaded.good_size)
                closers = _open_turn_closers(loaded.tail)
                if closers:
                    for closer in closers:
                        record = log.append(closer, sync=False)
                        if on_records is not None:
                            on_records([record])
                    log.sync()
                    log.repaired_turn = closers[-1].turn
            except BaseException:
                log.close()
                raise
        return log

    # --- reading ---------------------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """Every event record on disk, in order (read again from the file: for tools and tests)."""
        return list(self.iter_records())

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Stream the records on disk, in order, one line at a time."""
        if self._pending:
            return
        fd = self._require_fd()
        lines = read_lines(fd)
        next(lines)  # the header
        for _, line in lines:
            if not isinstance(line, bytes):  # None: the torn tail (without max_line no line is a LongLine)
                return
            with contextlib.suppress(ValueError):
                record = loads(line)
                if isinstance(record, dict) and isinstance(record.get("type"), str):
                    yield record

    def events(self) -> list[Event]:
        """Every record as an event, in order."""
        return [from_wire(record) for record in self.iter_records()]

    @property
    def closed(self) -> bool:
        return self._fd is None and not self._pending

    # --- writing ---------------------------------------------------------------------------

    def append(self, event: Event, *, sync: bool | None = None) -> dict[str, Any]:
        """Append one durable event as one line; fsync at turn boundaries (or when ``sync`` says)."""
        if self._pending:
            self._materialize()
        wire = to_wire(event)
        record = {"type": wire["type"], "seq": self._next_seq, "time": _now(), "data": wire["data"]}
        try:
            line = _dumps(record)
        except (TypeError, ValueError) as exc:
            raise _log_error(f"cannot encode a {event.type} record for {self.path}", exc)
        self._write(line)
        self._next_seq += 1
        if isinstance(event, TurnStart) and event.turn > self.last_turn:
            self.last_turn = event.turn
        # A compaction replaces the conversation a resume rebuilds: on disk before anyone relies on it.
        if sync if sync is not None else isinstance(event, TurnStart | TurnEnd | ContextCompacted):
            self.sync()
        return record

    def sync(self) -> None:
        if self._pending:
            return  # nothing written yet
        fd = self._require_fd()
        try:
            os.fsync(fd)
        except OSError as exc:
            self._failure = _log_error(f"session log sync failed ({self.path})", exc)
            raise self._failure

    def close(self) -> None:
        self._pending = False  # a lazy session closed before its first turn is never written
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(fd)
            os.close(fd)  # also releases the flock

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------

    def _require_fd(self) -> int:
        if self._failure is not None:
            raise _log_error(f"session log {self.path} is unusable after an earlier failure", self._failure)
        if self._fd is None:
            raise _log_error(f"session log {self.path} is closed")
        return self._fd

    def _write(self, line: bytes) -> None:
        fd = self._require_fd()
        view = memoryview(line)
        written = 0
        try:
            while written < len(line):
                written += os.write(fd, view[written:])
        except OSError as exc:
            if written:
                # Cut the partial line off so the file stays a sequence of whole records.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._size)
            self._failure = _log_error(f"session log write failed ({self.path})", exc)
            raise self._failure
        self._size += len(line)

    def _truncate_tail(self, size: int) -> None:
        fd = self._require_fd()
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as exc:
            self._failure = _log_error(f"cannot cut the torn last line of {self.path}", exc)
            raise self._failure
        self._size = size

    def _lock(self) -> None:
        assert self._fd is not None
        _flock(self._fd, self.path)


def _flock(fd: int, path: Path) -> None:
    locked = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        locked = True  # raised below, outside this block: error_chain would add EAGAIN's own text
    except OSError:
        pass  # a filesystem without flock: carry on unlocked rather than refuse to work
    if locked:
        raise SessionLogError(f"session {path.stem} is open in another dsh process", ErrorCode.SESSION_LOCKED)


def _make_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise _log_error(f"cannot create the session directory {directory}", exc)


def _fsync_dir(directory: Path) -> None:
    # Make the new file's directory entry durable too; not every filesystem allows it.
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# --- listing and resolving ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    path: Path
    created_at: str
    cwd: str
    modified: float  # st_mtime
    turns: int  # the turn of the last record that names one (turns are numbered from 1)
    title: str  # the first prompt, shortened; "" for a session without turns
    project: str = ""  # the header's project (the git work tree, else cwd); older logs: their cwd


_HEAD = 1 << 16  # bytes read from a log's start to list it: the header and the first prompt
_TAIL = 1 << 16  # bytes read from its end: the last record's turn
_TAIL_SCAN = 1 << 24  # how far back a listing looks for the start of a long last line
_RECORD_PREFIX = re.compile(rb'\{"type":"[^"\\]*","seq":\d+,"time":"[^"\\]*","data":\{"turn":(\d{1,12})[,}]')
_PROMPT_PREFIX = re.compile(rb'^\{"type":"turn/start","seq":\d+,"time":"[^"\\]*","data":\{"turn":\d+,"prompt":"')


def _record_turn(record: Any) -> int | None:
    """The turn a record belongs to, if it says (``job/notice`` does not)."""
    if isinstance(record, dict) and isinstance(record.get("type"), str):
        data = record.get("data")
        if isinstance(data, dict):
            turn = data.get("turn")
            if isinstance(turn, int) and not isinstance(turn, bool):
                return turn
    return None


def _line_turn(line: bytes) -> int | None:
    if len(line) > _TAIL:  # a huge line: its turn is in the prefix dsh writes, no need to parse it all
        match = _RECORD_PREFIX.match(line, 0, 256)
        return int(match.group(1)) if match else None
    try:
        return _record_turn(loads(line))
    except ValueError:
        return None


def _title(prompt: str) -> str:
    title = " ".join(prompt.split())
    return title[: _TITLE_LIMIT - 1] + "…" if len(title) > _TITLE_LIMIT else title


def _partial_prompt(line: bytes) -> str:
    """The start of a prompt from a ``turn/start`` line cut by the head window."""
    match = _PROMPT_PREFIX.match(line)
    if not match:
        return ""
    text = line[match.end() : match.end() + 4 * _TITLE_LIMIT].decode("utf-8", "ignore")
    end = text.find('"')
    while end > 0 and text[end - 1] == "\\":  # an escaped quote, not the end of the string
        end = text.find('"', end + 1)
    text = text if end < 0 else text[:end]
    for cut in range(len(text), max(len(text) - 12, -1), -1):  # drop a half escape at the cut
        with contextlib.suppress(ValueError):
            value = loads('"' + text[:cut] + '"')
            return value if isinstance(value, str) else ""
    return ""


def _last_line_turn(fd: int, good_end: int, head_end: int) -> tuple[int | None, int]:
    """The turn of the last complete record that names one, reading back from ``good_end`` in windows.

    Returns ``(turn, scanned_from)``; gives up (None) after ``_TAIL_SCAN`` bytes.
    """
    end = good_end - 1  # the newline that ends the last complete line
    window = _TAIL
    while True:
        start = max(head_end, end - window)
        data = os.pread(fd, end - start, start)
        # complete lines are those whose start we see: after a newline in the window
        starts = [index + 1 for index in _newlines_backward(data)]
        if start == head_end:
            starts.append(0)
        line_end = len(data)
        for line_start in starts:
            turn = _line_turn(data[line_start:line_end])
            if turn is not None:
                return turn, start
            line_end = line_start - 1
        if start == head_end or end - start >= _TAIL_SCAN:
            return None, start
        window *= 4


def _newlines_backward(data: bytes) -> Iterator[int]:
    index = data.rfind(b"\n")
    while index >= 0:
        yield index
        index = data.rfind(b"\n", 0, index)


def _good_end(fd: int, size: int) -> int:
    """Where complete lines end (one past the last newline), looking back at most ``_TAIL_SCAN``; 0 if unseen."""
    end = size
    while end > 0 and size - end < _TAIL_SCAN:
        start = max(0, end - _TAIL)
        data = os.pread(fd, end - start, start)
        index = data.rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def _info(path: Path) -> SessionInfo | None:
    """A listing entry from the header, the first prompt and the last record: a bounded read.

    A log is read at its start (``_HEAD``) and its end (``_TAIL``, further back only while the last
    line is longer), never whole, so listing 1 000 logs of gigabytes stays fast; see
    docs/architecture.md (the session log). Anything that is not a regular dsh log is left out.
    """
    try:
        fd, info = _open_regular(path, os.O_RDONLY)
    except SessionLogError:
        return None
    try:
        good_end = _good_end(fd, info.st_size)
        head = os.pread(fd, min(_HEAD, good_end), 0)
        lines, cut = _head_lines(head)
        header = _session_header(lines)
        if header is None:
            return None
        title = _first_prompt_title(lines[1:], cut)
        if len(head) == good_end:  # the whole log was in the head window
            turns = next((turn for turn in map(_line_turn, reversed(lines[1:])) if turn is not None), 0)
        else:
            turns = _last_line_turn(fd, good_end, len(lines[0]) + 1)[0] or 0
    except OSError:
        return None
    finally:
        os.close(fd)
    return SessionInfo(
        id=str(header.get("id") or path.stem),
        path=path,
        created_at=str(header.get("createdAt") or ""),
        cwd=str(header.get("cwd") or ""),
        modified=info.st_mtime,
        turns=turns,
        title=title,
        project=str(header.get("project") or header.get("cwd") or ""),
    )


def _head_lines(head: bytes) -> tuple[list[bytes], bytes | None]:
    """The whole lines of the head window, and the line it cut (longer than the window) if any."""
    lines = head.split(b"\n")
    cut = lines.pop()  # after the last newline: b"" when the window ends on one
    return lines, None if head.endswith(b"\n") else cut


def _session_header(lines: list[bytes]) -> dict[str, Any] | None:
    """The first line's ``session`` record, or None when the file is not a dsh session log."""
    if not lines:
        return None
    try:
        header = loads(lines[0])
    except ValueError:
        return None
    return header if isinstance(header, dict) and header.get("type") == "session" else None


def _first_prompt_title(lines: list[bytes], cut: bytes | None) -> str:
    """The listing title: the first ``turn/start``'s prompt, from a whole line or else the cut one."""
    for line in lines:
        if _TURN_START_MARK in line:  # a cheap filter; the parsed type decides
            with contextlib.suppress(ValueError):
                record = loads(line)
                if isinstance(record, dict) and record.get("type") == TurnStart.type:
                    data = record.get("data")
                    prompt = data.get("prompt") if isinstance(data, dict) else None
                    return _title(prompt) if isinstance(prompt, str) else ""
    if cut is not None and _TURN_START_MARK in cut[:200]:
        return _title(_partial_prompt(cut))
    return ""


def list_sessions(
    root: str | os.PathLike[str] | None = None, *, project: str | os.PathLike[str] | None = None
) -> list[SessionInfo]:
    """Sessions under ``root``, least recently written first (the last one is what ``last`` means).

    With ``project``, only the sessions of that project (see :attr:`SessionInfo.project`).
    """
    directory = Path(root) if root is not None else default_root()
    try:
        paths = sorted(directory.glob("*" + SUFFIX))
    except OSError:
        return []
    infos = [info for info in map(_info, paths) if info is not None]
    if project is not None:
        wanted = os.fspath(project)
        infos = [info for info in infos if info.project == wanted]
    infos.sort(key=lambda info: (info.modified, info.created_at, info.id))
    return infos


def session_in_use(path: Path) -> bool:
    """True when another open log (in this process or another) holds the session's lock."""
    try:
        fd, _ = _open_regular(path, os.O_RDONLY)
    except SessionLogError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # no flock on this filesystem: nothing can say
    finally:
        os.close(fd)  # also drops the probe's lock
    return False


def remove_session(id_or_path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Delete a session log and its undo journal (agent_loop/journal.py); refused (``SESSION_LOCKED``) while a
    dsh process has it open."""
    path = resolve_session(id_or_path, root)
    fd, _ = _open_regular(path, os.O_RDONLY)
    try:
        _flock(fd, path)  # held while unlinking: nobody opens it in between
        read_header(path)
        try:
            path.unlink()
        except OSError as exc:
            raise _log_error(f"cannot remove session log {path}", exc)
        remove_journal(path)  # still under the lock: nobody is writing it
    finally:
        os.close(fd)
    _fsync_dir(path.parent)
    return path


def resolve_session(
    id_or_last: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
    exclude: str | None = None,
) -> Path:
    """A session file from ``last``, an id, a unique id prefix, or a path to a ``.jsonl`` file.

    ``last`` is the most recently written session that has turns, of ``project`` when given, other
    than ``exclude`` (the caller's own session) and not open in another process.
    """
    directory = Path(root) if root is not None else default_root()
    text = os.fspath(id_or_last)
    if text == "last":
        sessions = list_sessions(directory, project=project)
        for info in reversed(sessions):
            if info.turns > 0 and info.id != exclude and not session_in_use(info.path):
                return info.path
        where = f" of project {project}" if project is not None else ""
        raise SessionLogError(
            f"no session with turns to resume{where} in {directory}", ErrorCode.SESSION_NOT_FOUND
        )
    if os.sep in text or text.endswith(SUFFIX):
        path = Path(text)
        if os.path.lexists(path):  # opening it decides whether it is a regular file
            return path
        raise SessionLogError(f"no session log at {path}", ErrorCode.SESSION_NOT_FOUND)
    if not _SAFE_ID.match(text):
        raise SessionLogError(f"invalid session id {text!r}", ErrorCode.SESSION_NOT_FOUND)
    exact = directory / (text + SUFFIX)
    if os.path.lexists(exact):
        return exact
    matches = sorted(directory.glob(text + "*" + SUFFIX)) if directory.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise SessionLogError(
            f"session id {text!r} is ambiguous ({len(matches)} sessions match)", ErrorCode.SESSION_AMBIGUOUS
        )
    raise SessionLogError(f"no session {text!r} in {directory}", ErrorCode.SESSION_NOT_FOUND)
