"""The durable session log: one JSONL file per session.

Line 1 is a header ``{"type":"session","version":1,"id","createdAt","cwd"}``; every later line is
``{"type","seq","time","data"}`` for one durable event, ``seq`` contiguous from 1. Each append is a
single ``write(2)`` of the whole line on an ``O_APPEND`` descriptor (nothing is buffered in this
process, so a SIGKILL loses at most the line being written), and the file is fsynced at turn
boundaries. A torn last line is ignored on load and reported in ``load_warnings``.

Opening a log to continue it takes an exclusive ``flock`` (a second dsh on the same session is
refused), cuts a torn tail, and -- if the last turn has no ``turn/end`` -- durably appends the closers
before anything else: a failed ``tool/result`` for every pending tool call, then
``turn/end {"kind":"interrupted"}``.

A write failure (ENOSPC, EIO, ...) raises :class:`SessionLogError` (code ``SESSION_LOG``); the partial
line is cut back off, and the log refuses further appends rather than writing records out of order.

This is one of the two places where events become dicts and back (:func:`~dsh.agent_loop.events.to_wire`,
:func:`~dsh.agent_loop.events.from_wire`); records are kept as read, so a record of a type this version
does not know survives a resume untouched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dsh.agent_loop.events import (
    AssistantMessage,
    Event,
    ToolResult,
    TurnEnd,
    TurnStart,
    from_wire,
    to_wire,
)
from dsh.agent_loop.gc_pause import gc_paused
from dsh.agent_loop.reasons import Interrupted
from dsh.agent_loop.session_id import new_session_id
from dsh.llm import ErrorCode, HarnessError

__all__ = [
    "INTERRUPTED_TOOL_OUTPUT",
    "SessionInfo",
    "SessionLog",
    "SessionLogError",
    "default_root",
    "list_sessions",
    "load_session_file",
    "resolve_session",
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


@dataclass(frozen=True, slots=True)
class _Loaded:
    header: dict[str, Any]
    records: list[dict[str, Any]]
    warnings: list[str]
    good_size: int  # bytes up to the end of the last complete line


def _parse(raw: bytes, path: Path) -> _Loaded:
    warnings: list[str] = []
    lines = raw.split(b"\n")
    tail = lines.pop()  # after the last "\n": empty unless the last line is torn
    good_size = len(raw) - len(tail)
    if tail:
        warnings.append(f"ignored a torn last line ({len(tail)} bytes) in {path}")
    if not lines:
        raise _log_error(f"{path} is not a dsh session log (no header line)")
    try:
        header = json.loads(lines[0])
    except ValueError as exc:
        raise _log_error(f"{path} is not a dsh session log (unreadable header)", exc)
    if not isinstance(header, dict) or header.get("type") != "session":
        raise _log_error(f"{path} is not a dsh session log (no session header)")
    if header.get("version") != VERSION:
        warnings.append(f"session log {path} has version {header.get('version')!r}; reading it as {VERSION}")
    records = _parse_clean_body(lines)
    if records is None:
        records = _parse_body_by_line(lines, path, warnings)
    return _Loaded(header, records, warnings, good_size)


def _parse_clean_body(lines: list[bytes]) -> list[dict[str, Any]] | None:
    """Every record line at once, or None unless each is a record and ``seq`` runs 1, 2, 3 ...

    One ``json.loads`` over the joined lines is several times faster than one per line. Any
    irregularity (an unreadable or blank line, a gap) returns None so that the line-by-line reader
    reports it exactly as before. (Only a crafted file could fool the count check: a line holding
    two records that makes up for one record split over two lines, with every ``seq`` in order.)
    """
    body = lines[1:]
    try:
        records = json.loads(b"[" + b",".join(body) + b"]")
    except ValueError:
        return None
    if len(records) != len(body):
        return None
    expected_seq = 1
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            return None
        seq = record.get("seq")
        if not isinstance(seq, int) or seq != expected_seq:
            return None
        expected_seq = seq + 1
    return records


def _parse_body_by_line(lines: list[bytes], path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    expected_seq = 1
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            warnings.append(f"skipped an unreadable record on line {number} of {path}")
            continue
        seq = record.get("seq")
        if isinstance(seq, int) and seq != expected_seq:
            warnings.append(f"sequence gap in {path}: expected seq {expected_seq}, found {seq} on line {number}")
        if isinstance(seq, int):
            expected_seq = seq + 1
        records.append(record)
    return records


def load_session_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Read a log without opening it for append: ``(header, records, warnings)``. No repair, no lock."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise _log_error(f"cannot read session log {file}", exc)
    with gc_paused():
        loaded = _parse(raw, file)
    return loaded.header, loaded.records, loaded.warnings


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


def _last_turn(records: Iterable[dict[str, Any]]) -> int:
    last = 0
    for record in records:
        if record.get("type") == TurnStart.type:
            turn = (record.get("data") or {}).get("turn")
            if isinstance(turn, int) and turn > last:
                last = turn
    return last


class SessionLog:
    """An open, appendable session log. Build with :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, fd: int, loaded: _Loaded) -> None:
        self.path = path
        self.root = path.parent
        self.header = loaded.header
        self.id: str = str(loaded.header.get("id") or path.stem)
        self.cwd: str = str(loaded.header.get("cwd") or "")
        self.created_at: str = str(loaded.header.get("createdAt") or "")
        self.load_warnings: list[str] = list(loaded.warnings)
        self.repaired_turn: int | None = None
        self._fd: int | None = fd
        self._records = loaded.records
        self._size = loaded.good_size
        self._next_seq = 1 + max((r["seq"] for r in self._records if isinstance(r.get("seq"), int)), default=0)
        self._failure: SessionLogError | None = None
        self.last_turn = _last_turn(self._records)

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        *,
        session_id: str | None = None,
    ) -> SessionLog:
        """A new empty session under ``root`` (created 0700), header written and fsynced."""
        directory = Path(root) if root is not None else default_root()
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise _log_error(f"cannot create the session directory {directory}", exc)
        for _ in range(20):
            ident = session_id or new_session_id()
            if not _SAFE_ID.match(ident):
                raise _log_error(f"invalid session id {ident!r}")
            path = directory / (ident + SUFFIX)
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                break
            except FileExistsError:
                if session_id is not None:
                    raise _log_error(f"session {session_id} already exists in {directory}")
            except OSError as exc:
                raise _log_error(f"cannot create session log {path}", exc)
        else:  # pragma: no cover - twenty random collisions
            raise _log_error(f"cannot pick a fresh session id in {directory}")
        header = {
            "type": "session",
            "version": VERSION,
            "id": ident,
            "createdAt": _now(),
            "cwd": str(cwd if cwd is not None else os.getcwd()),
        }
        log = cls(path, fd, _Loaded(header, [], [], 0))
        try:
            log._lock()
            log._write(_dumps(header))
            log.sync()
        except BaseException:
            log.close()
            raise
        _fsync_dir(directory)
        return log

    @classmethod
    def open(cls, path_or_id: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> SessionLog:
        """Open an existing session to continue it: lock, cut a torn tail, close an open last turn."""
        path = resolve_session(path_or_id, root)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            raise _log_error(f"cannot open session log {path}", exc)
        with gc_paused():
            try:
                _flock(fd, path)
                raw = _read_all(fd)
                loaded = _parse(raw, path)
                log = cls(path, fd, loaded)
            except BaseException:
                os.close(fd)
                raise
            try:
                if loaded.good_size < len(raw):
                    log._truncate_tail(loaded.good_size)
                closers = _open_turn_closers(log._records)
                if closers:
                    for closer in closers:
                        log.append(closer, sync=False)
                    log.sync()
                    log.repaired_turn = closers[-1].turn
            except BaseException:
                log.close()
                raise
        return log

    # --- reading ---------------------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """Every event record, loaded and appended, in order (a copy of the list; records are shared)."""
        return list(self._records)

    def events(self) -> list[Event]:
        """Every record as an event, in order."""
        return [from_wire(record) for record in self._records]

    @property
    def closed(self) -> bool:
        return self._fd is None

    # --- writing ---------------------------------------------------------------------------

    def append(self, event: Event, *, sync: bool | None = None) -> dict[str, Any]:
        """Append one durable event as one line; fsync at turn boundaries (or when ``sync`` says)."""
        wire = to_wire(event)
        record = {"type": wire["type"], "seq": self._next_seq, "time": _now(), "data": wire["data"]}
        try:
            line = _dumps(record)
        except (TypeError, ValueError) as exc:
            raise _log_error(f"cannot encode a {event.type} record for {self.path}", exc)
        self._write(line)
        self._next_seq += 1
        self._records.append(record)
        if isinstance(event, TurnStart) and event.turn > self.last_turn:
            self.last_turn = event.turn
        if sync if sync is not None else isinstance(event, TurnStart | TurnEnd):
            self.sync()
        return record

    def sync(self) -> None:
        fd = self._require_fd()
        try:
            os.fsync(fd)
        except OSError as exc:
            self._failure = _log_error(f"session log sync failed ({self.path})", exc)
            raise self._failure

    def close(self) -> None:
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
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SessionLogError(f"session {path.stem} is open in another dsh process", ErrorCode.SESSION_LOCKED)
    except OSError:
        pass  # a filesystem without flock: carry on unlocked rather than refuse to work


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


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
    turns: int
    title: str  # the first prompt, shortened; "" for a session without turns


def _info(path: Path) -> SessionInfo | None:
    try:
        raw = path.read_bytes()
        modified = path.stat().st_mtime
    except OSError:
        return None
    first, _, rest = raw.partition(b"\n")
    try:
        header = json.loads(first)
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("type") != "session":
        return None
    turns, title = 0, ""
    for line in rest.split(b"\n"):
        if _TURN_START_MARK not in line:
            continue
        turns += 1
        if turns == 1:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                prompt = str(json.loads(line)["data"]["prompt"])
                title = " ".join(prompt.split())
                if len(title) > _TITLE_LIMIT:
                    title = title[: _TITLE_LIMIT - 1] + "…"
    return SessionInfo(
        id=str(header.get("id") or path.stem),
        path=path,
        created_at=str(header.get("createdAt") or ""),
        cwd=str(header.get("cwd") or ""),
        modified=modified,
        turns=turns,
        title=title,
    )


def list_sessions(root: str | os.PathLike[str] | None = None) -> list[SessionInfo]:
    """Sessions under ``root``, least recently written first (the last one is what ``last`` means)."""
    directory = Path(root) if root is not None else default_root()
    try:
        paths = sorted(directory.glob("*" + SUFFIX))
    except OSError:
        return []
    infos = [info for info in map(_info, paths) if info is not None]
    infos.sort(key=lambda info: (info.modified, info.created_at, info.id))
    return infos


def resolve_session(id_or_last: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """A session file from ``last``, an id, a unique id prefix, or a path to a ``.jsonl`` file."""
    directory = Path(root) if root is not None else default_root()
    text = os.fspath(id_or_last)
    if text == "last":
        sessions = list_sessions(directory)
        if not sessions:
            raise SessionLogError(f"no sessions to resume in {directory}", ErrorCode.SESSION_NOT_FOUND)
        return sessions[-1].path
    if os.sep in text or text.endswith(SUFFIX):
        path = Path(text)
        if path.is_file():
            return path
        raise SessionLogError(f"no session log at {path}", ErrorCode.SESSION_NOT_FOUND)
    if not _SAFE_ID.match(text):
        raise SessionLogError(f"invalid session id {text!r}", ErrorCode.SESSION_NOT_FOUND)
    exact = directory / (text + SUFFIX)
    if exact.is_file():
        return exact
    matches = sorted(directory.glob(text + "*" + SUFFIX)) if directory.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise SessionLogError(
            f"session id {text!r} is ambiguous ({len(matches)} sessions match)", ErrorCode.SESSION_AMBIGUOUS
        )
    raise SessionLogError(f"no session {text!r} in {directory}", ErrorCode.SESSION_NOT_FOUND)
