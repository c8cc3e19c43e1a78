"""The undo journal: each edit's before-image, durable before the edit lands, so ``/undo`` can take it back.

Beside each session log ``<id>.jsonl`` lives ``<id>.journal/`` (mode 0700), written only by the process
that holds the log's lock (docs/safety.md, "Undo and rewind"):

- ``journal.jsonl``: one JSON line per record, appended with one ``write(2)`` and fsynced before the edit
  goes ahead (``change``), or once an undo is done (``undo``):

  - ``{"type":"change","seq","turn","root","path","before","before_size","after","after_size","via"}``:
    turn ``turn`` changed ``path`` (relative to ``root``, the working tree's real path; absolute outside
    it). ``before`` is the content hash of the file as it was (null: it did not exist), ``after`` the hash
    of what dsh wrote, to tell later whether someone else changed it. ``via`` is ``disk`` or ``editor``
    (``dsh acp``: the text came from and went to the editor's buffer).
  - ``{"type":"withdraw","seq"}``: the change ``seq`` was journaled but not written (the file changed
    while the edit waited).
  - ``{"type":"undo","turn","reverted","kept"}``: turn ``turn``'s changes were undone (the files in
    ``kept`` were left as they were).
  - ``{"type":"told","undos"}``: the model has been told of the first ``undos`` undos (a prompt that
    carried the note joined the conversation).
  - ``{"type":"drop","turns"}``: these turns' before-images were deleted to keep the journal under its cap.

- ``blobs/<sha256>``: before-images, stored once per content (a file edited ten times from the same text,
  or two files with the same text, cost one blob), each written to a temporary name, fsynced and renamed.

A SIGKILL loses at most the line being written: a torn last line is ignored (and cut before the next
append). A change journaled whose write never happened is harmless: its file is still as before, and the
undo says it is unchanged. Bounded: when the blobs pass :data:`DEFAULT_CAP` bytes, the oldest turns are
dropped (never the running one), and ``/undo`` says which turns can no longer be undone.

Putting the files back is ``dsh.agent_loop.undo``'s job; this module keeps the record.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.agent_loop.safe_open import open_regular_fd
from dsh.llm import ErrorCode, HarnessError

__all__ = [
    "DEFAULT_CAP",
    "JOURNAL_KEY",
    "JOURNAL_SUFFIX",
    "Change",
    "Journal",
    "JournalError",
    "digest",
    "journal_dir",
    "remove_journal",
    "shown_path",
]

DEFAULT_CAP = 64 << 20  # bytes of before-images kept per session; older turns are dropped past it
JOURNAL_SUFFIX = ".journal"
JOURNAL_KEY = "undo.journal"  # where the agent puts the session's journal in ToolContext.session_state
_LOG = "journal.jsonl"
_BLOBS = "blobs"
_READ_CHUNK = 1 << 20


class JournalError(HarnessError):
    """The journal cannot be read or written; an edit is then refused rather than made without it."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message, ErrorCode.SESSION_LOG, cause=cause)


def journal_dir(log_path: Path) -> Path:
    """``<sessions>/<id>.journal`` for the log ``<sessions>/<id>.jsonl``."""
    return log_path.with_suffix(JOURNAL_SUFFIX)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_HEX = frozenset("0123456789abcdef")


def _is_hash(value: object) -> bool:
    """A blob name as :func:`digest` makes them (so no name read back can point outside ``blobs/``)."""
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


@dataclass(frozen=True, slots=True)
class Change:
    seq: int
    turn: int
    root: str
    path: str
    before: str | None
    before_size: int | None
    after: str
    after_size: int
    via: str

    @property
    def target(self) -> Path:
        return Path(self.root) / self.path


def _dumps(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "backslashreplace")


def shown_path(path: str) -> str:
    return path.replace("\n", "\u240a").replace("\r", "\u240d")  # a name cannot start a forged line


class Journal:
    """One session's journal. Loaded on first use; every method does blocking I/O (run it in a thread)."""

    def __init__(self, directory: Path, *, cap: int | None = None) -> None:
        self.directory = directory
        self.cap = DEFAULT_CAP if cap is None else cap
        self._loaded = False
        self._fd: int | None = None
        self._changes: dict[int, Change] = {}  # seq -> change, withdrawn ones removed
        self._undone: set[int] = set()  # turns undone
        self._dropped: set[int] = set()  # turns past the cap
        self._undo_records: list[dict[str, Any]] = []  # each undo record, in order
        self._told = 0  # how many of them the model has been told of
        self._next_seq = 1
        self._blob_bytes = 0
        self._blob_sizes: dict[str, int] = {}

    # --- loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            fd, _ = open_regular_fd(self.directory / _LOG, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise JournalError(f"cannot read the undo journal {self.directory}", exc) from exc
        try:
            data = b""
            while chunk := os.read(fd, _READ_CHUNK):
                data += chunk
        finally:
            os.close(fd)
        for line in data.split(b"\n")[:-1]:  # the last piece is b"" or a torn line
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    self._apply(record)
        blobs = self.directory / _BLOBS
        with contextlib.suppress(OSError):
            for entry in os.scandir(blobs):
                if entry.is_file(follow_symlinks=False) and _is_hash(entry.name):
                    size = entry.stat(follow_symlinks=False).st_size
                    self._blob_sizes[entry.name] = size
                    self._blob_bytes += size
                elif entry.name.startswith(".") and entry.name.endswith(".tmp"):  # a store cut short by a kill
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        self._collect()  # blobs of a change never journaled (a kill between the two writes)

    def _apply(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        seq = record.get("seq")
        if kind == "change" and isinstance(seq, int):
            before, after = record.get("before"), record.get("after")
            turn, size = record.get("turn"), record.get("after_size")
            if not (isinstance(after, str) and _is_hash(after) and (before is None or _is_hash(before))
                    and isinstance(turn, int)
                    and isinstance(size, int) and isinstance(record.get("root"), str)
                    and isinstance(record.get("path"), str)):
                return  # not a record this module wrote: ignored, as an unreadable line is
            before_size = record.get("before_size")
            self._changes[seq] = Change(seq, turn, record["root"], record["path"], before,
                                         before_size if isinstance(before_size, int) else None, after, size,
                                         "editor" if record.get("via") == "editor" else "disk")
            self._next_seq = max(self._next_seq, seq + 1)
        elif kind == "withdraw" and isinstance(seq, int):
            self._changes.pop(seq, None)
        elif kind == "undo" and isinstance(record.get("turn"), int):
            self._undone.add(record["turn"])
            self._undo_records.append(record)
        elif kind == "told" and isinstance(record.get("undos"), int):
            self._told = max(self._told, record["undos"])
        elif kind == "drop" and isinstance(record.get("turns"), list):
            self._dropped.update(turn for turn in record["turns"] if isinstance(turn, int))

    # --- writing ------------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is not None:
            return self._fd
        try:
            _make_dir(self.directory)
            _make_dir(self.directory / _BLOBS)
            fd = os.open(self.directory / _LOG, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except OSError as exc:
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            data = os.pread(fd, 1, info.st_size - 1) if info.st_size else b"\n"
            if data != b"\n":  # a torn last line: cut back to the last whole one
                tail = os.pread(fd, min(info.st_size, 1 << 20), max(0, info.st_size - (1 << 20)))
                cut = tail.rfind(b"\n")
                os.ftruncate(fd, max(0, info.st_size - len(tail) + cut + 1))
        except OSError as exc:
            os.close(fd)
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        self._fd = fd
        return fd

    def _append(self, record: dict[str, Any]) -> None:
        fd = self._open()
        line = _dumps(record)
        try:
            os.write(fd, line)  # one write of the whole line on O_APPEND
            os.fsync(fd)
        except OSError as exc:
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        self._apply(record)

    def _store(self, data: bytes) -> str:
        name = digest(data)
        if name in self._blob_sizes:
            return name
        blobs = self.directory / _BLOBS
        temp = blobs / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, blobs / name)
            _fsync_dir(blobs)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        self._blob_sizes[name] = len(data)
        self._blob_bytes += len(data)
        return name

    def record(self, turn: int, target: Path, root: Path, before: bytes | None, after: bytes, via: str = "disk") -> int:
        """Journal turn ``turn``'s change of ``target`` (a real path) durably, before it is written; its seq."""
        self._load()
        self._open()
        blob = None if before is None else self._store(before)
        path = str(target.relative_to(root)) if target.is_relative_to(root) else str(target)
        seq = self._next_seq
        self._append({"type": "change", "seq": seq, "turn": turn, "root": str(root) if path != str(target) else "/",
                      "path": path, "before": blob, "before_size": None if before is None else len(before),
                      "after": digest(after), "after_size": len(after), "via": via})
        self._enforce_cap(turn)
        return seq

    def withdraw(self, seq: int) -> None:
        """The change ``seq`` was not written after all."""
        with contextlib.suppress(JournalError):
            self._append({"type": "withdraw", "seq": seq})

    def _enforce_cap(self, current: int) -> None:
        if self._blob_bytes <= self.cap:
            return
        turns = sorted({c.turn for c in self._changes.values()} - self._dropped - self._undone - {current})
        dropped: list[int] = []
        for turn in turns:
            dropped.append(turn)
            self._dropped.add(turn)
            if self._live_bytes() <= self.cap:
                break
        if dropped:
            self._append({"type": "drop", "turns": dropped})
            self._collect()

    def _referenced(self) -> set[str]:
        return {c.before for c in self._changes.values()
                if c.before is not None and c.turn not in self._dropped and c.turn not in self._undone}

    def _live_bytes(self) -> int:
        return sum(self._blob_sizes.get(name, 0) for name in self._referenced())

    def _collect(self) -> None:
        """Delete the blobs no undoable change needs."""
        keep = self._referenced()
        for name in [name for name in self._blob_sizes if name not in keep]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / _BLOBS / name)
            self._blob_bytes -= self._blob_sizes.pop(name)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    # --- reading ------------------------------------------------------------------------------

    @property
    def blob_bytes(self) -> int:
        self._load()
        return self._blob_bytes

    def undoable_turns(self) -> list[int]:
        """Turns with file changes that can still be undone, newest first."""
        self._load()
        turns = {c.turn for c in self._changes.values()} - self._undone - self._dropped
        return sorted(turns, reverse=True)

    def dropped_turns(self) -> list[int]:
        self._load()
        return sorted(self._dropped - self._undone)

    def untold(self) -> tuple[str | None, int]:
        """The note for the model about the undos it has not been told of (or None), and the count to pass
        to :meth:`told` once a prompt carrying it joined the conversation. The note goes before the next
        prompt, so the model does not assume its edits stand (docs/safety.md, "Undo and rewind")."""
        self._load()
        parts: list[str] = []
        for record in self._undo_records[self._told:]:
            reverted = _paths(record.get("reverted"))
            kept = _paths(record.get("kept"))
            part = f"turn {record['turn']}: " + (", ".join(reverted) if reverted else "no file")
            if kept:
                part += f" (not reverted, changed since: {', '.join(kept)})"
            parts.append(part)
        if not parts:
            return None, self._told
        return ("[the user undid file changes with /undo, back to before " + "; ".join(parts)
                + ". Those files are as they were before that turn: read them again before changing them.]",
                len(self._undo_records))

    def told(self, undos: int) -> None:
        """The model has the note of the first ``undos`` undos (kept durably: a resume does not repeat it)."""
        if undos > self._told:
            with contextlib.suppress(JournalError):  # worst case, the note is sent once more
                self._append({"type": "told", "undos": undos})

    def changes(self, turn: int) -> list[Change]:
        self._load()
        return [c for c in sorted(self._changes.values(), key=lambda c: c.seq) if c.turn == turn]

    def blob(self, name: str) -> bytes | None:
        try:
            fd, _ = open_regular_fd(self.directory / _BLOBS / name, follow_symlinks=False)
        except OSError:
            return None
        try:
            data = b""
            while chunk := os.read(fd, _READ_CHUNK):
                data += chunk
        finally:
            os.close(fd)
        return data if digest(data) == name else None

    def record_undo(self, turn: int, reverted: list[str], kept: list[str]) -> None:
        """Turn ``turn`` is undone (``kept``: the files left as they were); its before-images are deleted."""
        self._append({"type": "undo", "turn": turn, "reverted": reverted, "kept": kept})
        self._collect()


def _paths(value: object) -> list[str]:
    return [shown_path(path) for path in value if isinstance(path, str)] if isinstance(value, list) else []


# --- files ------------------------------------------------------------------------------------


def _make_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if not stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode):  # a symlink or a file planted there
        raise OSError(errno.ENOTDIR, "not a directory", str(path))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

def remove_journal(log_path: Path) -> None:
    """Delete the journal of the log at ``log_path`` (``dsh sessions rm``), never following a symlink."""
    directory = journal_dir(log_path)
    try:
        info = os.stat(directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(directory, ignore_errors=True)  # rmtree does not follow symlinks inside
    else:
        with contextlib.suppress(OSError):
            os.unlink(directory)
