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

The writer is here; what it shares with every reader (where logs live, the error, the safe open, the
lock) is in session_files.py, the one-pass reader in session_read.py, listing and resolving in session_list.py.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
from dsh.agent_loop.project import project_root
from dsh.agent_loop.reasons import Interrupted
from dsh.agent_loop.session_files import (
    SAFE_ID,
    SUFFIX,
    VERSION,
    SessionLogError,
    default_root,
    fsync_dir,
    lock_session,
    log_error,
    make_directory,
    open_regular,
)
from dsh.agent_loop.session_id import new_session_id
from dsh.agent_loop.session_list import resolve_session
from dsh.agent_loop.session_read import (
    TURN_BOUNDARIES,
    Loaded,
    PrefixReader,
    each_record,
    load_summary,
    stream_log,
)
from dsh.llm.lines import read_lines
from dsh.llm.text import loads

__all__ = ["INTERRUPTED_TOOL_OUTPUT", "SessionLog"]

INTERRUPTED_TOOL_OUTPUT = "Error: tool call interrupted by a previous process exit"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dumps(value: Mapping[str, Any]) -> bytes:
    # backslashreplace keeps a lone surrogate (e.g. from undecodable tool output) as a JSON escape
    # instead of failing the write or producing invalid UTF-8.
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", "backslashreplace"
    )


def _open_turn_closers(records: list[dict[str, Any]]) -> list[ToolResult | TurnEnd]:
    """Closers for an open last turn: failed results for pending calls, then ``interrupted``.

    Only the records from the last turn boundary on are decoded: a 100 000-record log is scanned, not
    rebuilt. A record whose ``data`` is not an object is ignored, as it always was.
    """
    start = len(records)
    for index in range(len(records) - 1, -1, -1):
        record = records[index]
        if record.get("type") in TURN_BOUNDARIES and isinstance(record.get("data"), dict):
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

    def __init__(self, path: Path, fd: int | None, loaded: Loaded) -> None:
        self.path = path
        self.root = path.parent
        self.header = loaded.header
        self.id: str = str(loaded.header.get("id") or path.stem)
        self.cwd: str = str(loaded.header.get("cwd") or "")
        self.created_at: str = str(loaded.header.get("createdAt") or "")
        self.load_warnings: list[str] = list(loaded.warnings)
        self.load_summary: str | None = load_summary(loaded, path) if loaded.warnings else None
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
        if not SAFE_ID.match(ident):
            raise log_error(f"invalid session id {ident!r}")
        header = {
            "type": "session",
            "version": VERSION,
            "id": ident,
            "createdAt": _now(),
            "cwd": where,
            "project": str(project),
        }
        log = cls(directory / (ident + SUFFIX), None, Loaded(header, [], [], 0))
        log._pending = True
        if lazy:
            make_directory(directory)  # an unusable state directory still fails at launch
            if session_id is None and os.path.lexists(log.path):  # pragma: no cover - a random collision
                log.id = header["id"] = new_session_id()
                log.path = directory / (log.id + SUFFIX)
            return log
        log._materialize(fixed_id=session_id is not None)
        return log

    def _materialize(self, *, fixed_id: bool = True) -> None:
        """Write the file of a lazily created session: header, fsync, directory entry (once)."""
        directory = self.root
        make_directory(directory)
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                break
            except FileExistsError:
                if fixed_id:
                    raise log_error(f"session {self.id} already exists in {directory}")
                self.id = self.header["id"] = new_session_id()
                self.path = directory / (self.id + SUFFIX)
            except OSError as exc:
                raise log_error(f"cannot create session log {self.path}", exc)
        else:  # pragma: no cover - twenty random collisions
            raise log_error(f"cannot pick a fresh session id in {directory}")
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
        fsync_dir(directory)

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
        prefix: PrefixReader | None = None,
    ) -> SessionLog:
        """Open an existing session to continue it: lock, cut a torn tail, close an open last turn.

        The log is streamed once: each record (then each closer appended) goes to ``on_record`` in
        order -- or to ``on_records`` a parsed batch at a time (resume: no call per record) -- and only
        the last turn's records are held here, so memory follows what the caller keeps, not the file's size.
        ``prefix`` reads the log's start its own way (agent_loop/resume_prefix.py); if what it read does not stand,
        the log, repaired, is read again as :meth:`PrefixReader.restart` says.
        """
        path = resolve_session(path_or_id, root)
        fd, _ = open_regular(path, os.O_RDWR | os.O_APPEND)
        with gc_paused():
            try:
                lock_session(fd, path)
                if on_record is not None:
                    on_records = each_record(on_record)
                loaded = stream_log(fd, path, on_records, prefix=prefix)
                log = cls(path, fd, loaded)
            except OSError as exc:
                os.close(fd)
                raise log_error(f"cannot read session log {path}", exc)
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
                while prefix is not None and not prefix.accepted():  # the warnings stay the first read's
                    on_records, prefix = prefix.restart()
                    stream_log(fd, path, on_records, prefix=prefix)
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
            raise log_error(f"cannot encode a {event.type} record for {self.path}", exc)
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
            self._failure = log_error(f"session log sync failed ({self.path})", exc)
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
            raise log_error(f"session log {self.path} is unusable after an earlier failure", self._failure)
        if self._fd is None:
            raise log_error(f"session log {self.path} is closed")
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
            self._failure = log_error(f"session log write failed ({self.path})", exc)
            raise self._failure
        self._size += len(line)

    def _truncate_tail(self, size: int) -> None:
        fd = self._require_fd()
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as exc:
            self._failure = log_error(f"cannot cut the torn last line of {self.path}", exc)
            raise self._failure
        self._size = size

    def _lock(self) -> None:
        assert self._fd is not None
        lock_session(self._fd, self.path)

