"""The undo journal: each edit's before-image, durable before the edit lands, so ``/undo`` can take it back.

Beside each session log ``<id>.jsonl`` lives ``<id>.journal/`` (mode 0700), written only by the process
that holds the log's lock (docs/safety.md, "Undo and rewind"):

- ``journal.jsonl``: one JSON line per record, appended with one ``write(2)`` and fsynced before the edit
  goes ahead (``change``), or once an undo is done (``undo``). Each line ends with ``"mac"``, an HMAC-SHA256
  of the rest of the line (and of the journal folder's name) under the key in dsh's state directory
  (:data:`KEY_FILE`, 0600, made once): a line without a valid one -- a journal that came with a repository,
  a log copied into the sessions folder, a journal written before lines were signed -- is not trusted and
  counts in :attr:`Journal.untrusted_entries`, and nothing in it is used:

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
dropped (never the running one), and ``/undo`` says which turns can no longer be undone. Reading is bounded
whatever the files hold: the index is streamed a line at a time, a line over :data:`MAX_LINE` bytes is
skipped unread, and a before-image is read only when its size is the one its signed line gives. The
journal's folders are never reached through a symlink.

Putting the files back is ``dsh.agent_loop.undo``'s job; this module keeps the record.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.llm import ErrorCode, HarnessError
from dsh.llm.lines import read_lines

__all__ = [
    "DEFAULT_CAP",
    "JOURNAL_KEY",
    "JOURNAL_SUFFIX",
    "KEY_FILE",
    "MAX_LINE",
    "Change",
    "Journal",
    "JournalError",
    "digest",
    "journal_dir",
    "journal_key_file",
    "remove_journal",
    "shown_path",
]

DEFAULT_CAP = 64 << 20  # bytes of before-images kept per session; older turns are dropped past it
JOURNAL_SUFFIX = ".journal"
JOURNAL_KEY = "undo.journal"  # where the agent puts the session's journal in ToolContext.session_state
KEY_FILE = "journal.key"  # in dsh's state directory, beside the sessions folder
MAX_LINE = 1 << 20  # bytes of one index line: a change names two paths, an undo the files of one turn
_LOG = "journal.jsonl"
_BLOBS = "blobs"
_READ_CHUNK = 1 << 20
_KEY_BYTES = 32
_MAC_DOMAIN = b"dsh undo journal 1\0"
_MAC_OPEN = b',"mac":"'
_MAC_CLOSE = b'"}'
_MAC_TAIL = len(_MAC_OPEN) + 64 + len(_MAC_CLOSE)  # what signing adds at the end of a line
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class JournalError(HarnessError):
    """The journal cannot be read or written; an edit is then refused rather than made without it."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message, ErrorCode.SESSION_LOG, cause=cause)


def journal_dir(log_path: Path) -> Path:
    """``<sessions>/<id>.journal`` for the log ``<sessions>/<id>.jsonl``."""
    return log_path.with_suffix(JOURNAL_SUFFIX)


def journal_key_file(sessions_root: Path) -> Path:
    """The key that signs journal lines: ``$XDG_STATE_HOME/dsh/journal.key`` for the sessions folder
    ``$XDG_STATE_HOME/dsh/sessions``, whichever folder a resumed log itself is in."""
    return sessions_root.parent / KEY_FILE


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
    """The record as one JSON object, without a newline."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "backslashreplace")


def shown_path(path: str) -> str:
    return path.replace("\n", "\u240a").replace("\r", "\u240d")  # a name cannot start a forged line


class Journal:
    """One session's journal. Loaded on first use; every method does blocking I/O (run it in a thread)."""

    def __init__(self, directory: Path, *, key_file: Path | None = None, cap: int | None = None) -> None:
        """``key_file`` signs and checks the lines (:func:`journal_key_file`); None: a key of this process only,
        so that nothing is trusted once it exits (an agent run without a front end's state directory)."""
        self.directory = directory
        self.key_file = key_file
        self.cap = DEFAULT_CAP if cap is None else cap
        self._key: bytes | None = None
        self._loaded = False
        self._untrusted = 0  # complete index lines without a valid signature
        self._good_size = 0  # where the index's complete lines end (a torn tail is cut there before appending)
        self._fd: int | None = None
        self._changes: dict[int, Change] = {}  # seq -> change, withdrawn ones removed
        self._undone: set[int] = set()  # turns undone
        self._dropped: set[int] = set()  # turns past the cap
        self._undo_records: list[dict[str, Any]] = []  # each undo record, in order
        self._told = 0  # how many of them the model has been told of
        self._next_seq = 1
        self._blob_bytes = 0
        self._journaled: set[str] = set()  # the blobs a signed change names, or this process stored
        self._blob_sizes: dict[str, int] = {}

    # --- loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            directory = os.open(self.directory, _DIR_FLAGS)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise JournalError(f"cannot read the undo journal {self.directory}", exc) from exc
        try:
            self._read_index(directory)
            self._scan_blobs(directory)
        finally:
            os.close(directory)
        self._collect()  # blobs of a change never journaled (a kill between the two writes)

    def _read_index(self, directory: int) -> None:
        """Apply each signed line of the index, a line at a time; count the others."""
        try:
            fd = os.open(_LOG, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise JournalError(f"cannot read the undo journal {self.directory}", exc) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise JournalError(f"cannot read the undo journal {self.directory}: its index is not a regular file")
            for offset, line in read_lines(fd, max_line=MAX_LINE):
                if line is None:
                    self._good_size = offset
                elif not line:
                    continue
                elif (record := self._verified(line) if isinstance(line, bytes) else None) is None:
                    self._untrusted += 1
                else:
                    self._apply(record)
        except OSError as exc:
            raise JournalError(f"cannot read the undo journal {self.directory}", exc) from exc
        finally:
            os.close(fd)

    def _scan_blobs(self, directory: int) -> None:
        with contextlib.suppress(OSError), _opened(_BLOBS, directory) as blobs:
            for entry in os.scandir(blobs):
                if entry.is_file(follow_symlinks=False) and _is_hash(entry.name):
                    size = entry.stat(follow_symlinks=False).st_size
                    self._blob_sizes[entry.name] = size
                    self._blob_bytes += size
                elif entry.name.startswith(".") and entry.name.endswith(".tmp"):  # a store cut short by a kill
                    with contextlib.suppress(OSError):
                        os.unlink(entry.name, dir_fd=blobs)

    # --- signatures ---------------------------------------------------------------------------

    def _signing_key(self) -> bytes:
        if self._key is None:
            self._key = _process_key() if self.key_file is None else _load_key(self.key_file)
        return self._key

    def _mac(self, body: bytes) -> bytes:
        message = _MAC_DOMAIN + self.directory.name.encode("utf-8", "surrogateescape") + b"\0" + body
        return hmac.digest(self._signing_key(), message, "sha256").hex().encode()

    def _signed(self, record: dict[str, Any]) -> bytes:
        """The record's line, its signature last (``{...,"mac":"<hex>"}``) and a newline."""
        body = _dumps(record)
        return body[:-1] + _MAC_OPEN + self._mac(body) + _MAC_CLOSE + b"\n"

    def _verified(self, line: bytes) -> dict[str, Any] | None:
        """The record of a line this journal's key signed, else None (nothing of it is parsed)."""
        if len(line) <= _MAC_TAIL or not line.endswith(_MAC_CLOSE) or line[-_MAC_TAIL:-66] != _MAC_OPEN:
            return None
        body = line[:-_MAC_TAIL] + b"}"
        if not hmac.compare_digest(line[-66:-2], self._mac(body)):
            return None
        try:
            record = json.loads(body)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

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
            if before is not None:
                self._journaled.add(before)
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
        self._load()
        self._signing_key()  # a key that cannot be made stops the edit before anything is written
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
            if info.st_size > self._good_size:  # a torn last line (of any length): cut back to the last whole one
                os.ftruncate(fd, self._good_size)
        except OSError as exc:
            os.close(fd)
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        self._fd = fd
        return fd

    def _append(self, record: dict[str, Any]) -> None:
        fd = self._open()
        line = self._signed(record)
        try:
            os.write(fd, line)  # one write of the whole line on O_APPEND
            os.fsync(fd)
        except OSError as exc:
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        self._good_size += len(line)
        self._apply(record)

    def _store(self, data: bytes) -> str:
        name = digest(data)
        if name in self._journaled and name in self._blob_sizes:  # a file found there unasked is written again
            return name
        temp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            with self._blobs() as blobs:
                try:
                    _write_new(temp, data, blobs)
                    os.rename(temp, name, src_dir_fd=blobs, dst_dir_fd=blobs)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(temp, dir_fd=blobs)
                    raise
                with contextlib.suppress(OSError):
                    os.fsync(blobs)
        except OSError as exc:
            raise JournalError(f"cannot write the undo journal {self.directory}", exc) from exc
        self._blob_bytes += len(data) - self._blob_sizes.get(name, 0)
        self._blob_sizes[name] = len(data)
        self._journaled.add(name)
        return name

    def record(self, turn: int, target: Path, root: Path, before: bytes | None, after: bytes, via: str = "disk") -> int:
        """Journal turn ``turn``'s change of ``target`` (a real path) durably, before it is written; its seq."""
        self._open()  # loads the journal first
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
        if self._live_bytes() <= self.cap:  # only before-images dsh needs count (not files planted beside them)
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
        """Delete the blobs no undoable change needs: of a journal with lines this dsh did not sign, only the
        ones its signed changes named (the others are not dsh's to delete, or not known to be)."""
        keep = self._referenced()
        unneeded = [name for name in self._blob_sizes
                    if name not in keep and (not self._untrusted or name in self._journaled)]
        if not unneeded:
            return
        with contextlib.suppress(OSError), self._blobs() as blobs:
            for name in unneeded:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=blobs)
                self._blob_bytes -= self._blob_sizes.pop(name)

    @contextlib.contextmanager
    def _blobs(self) -> Iterator[int]:
        """The blobs folder, reached from the journal's folder through no symlink."""
        directory = os.open(self.directory, _DIR_FLAGS)
        try:
            with _opened(_BLOBS, directory) as blobs:
                yield blobs
        finally:
            os.close(directory)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    # --- reading ------------------------------------------------------------------------------

    @property
    def blob_bytes(self) -> int:
        self._load()
        return self._blob_bytes

    @property
    def untrusted_entries(self) -> int:
        """Lines of the index without a valid signature: this dsh did not write them, and they were ignored."""
        self._load()
        return self._untrusted

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

    def blob(self, name: str, size: int | None) -> bytes | None:
        """The before-image ``name``, if it is there with the ``size`` its change gives (else None, unread)."""
        if size is None or not _is_hash(name):
            return None
        try:
            with self._blobs() as blobs:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=blobs)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                return None
            data = _read_exactly(fd, size)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if data is not None and digest(data) == name else None

    def record_undo(self, turn: int, reverted: list[str], kept: list[str]) -> None:
        """Turn ``turn`` is undone (``kept``: the files left as they were); its before-images are deleted."""
        self._append({"type": "undo", "turn": turn, "reverted": reverted, "kept": kept})
        self._collect()


def _paths(value: object) -> list[str]:
    return [shown_path(path) for path in value if isinstance(path, str)] if isinstance(value, list) else []


# --- files ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _opened(name: str, directory: int) -> Iterator[int]:
    fd = os.open(name, _DIR_FLAGS, dir_fd=directory)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes of ``fd`` in bounded reads (None if it holds fewer or more)."""
    data = bytearray(size)
    view = memoryview(data)
    done = 0
    while done < size:
        got = os.readv(fd, [view[done:done + _READ_CHUNK]])
        if not got:
            return None
        done += got
    return None if os.read(fd, 1) else bytes(data)


def _write_new(name: str, data: bytes, directory: int, mode: int = 0o600) -> None:
    """A new file ``name`` in ``directory`` holding ``data``, fsynced (refused if the name exists)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the signing key --------------------------------------------------------------------------

@functools.cache  # one key for the whole process: made once, forgotten at exit
def _process_key() -> bytes:
    return secrets.token_bytes(_KEY_BYTES)


def _load_key(path: Path) -> bytes:
    """The key in ``path``, made the first time (random, 0600, in a folder made 0700); JournalError if it
    cannot be read or made, or is not a private file of this user's."""
    try:
        try:
            return _read_key(path)
        except FileNotFoundError:
            pass
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
        directory = os.open(path.parent, _DIR_FLAGS)
        try:
            temp = f".{path.name}.{secrets.token_hex(4)}.tmp"
            _write_new(temp, secrets.token_bytes(_KEY_BYTES), directory)
            try:
                os.link(temp, path.name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
            except FileExistsError:
                pass  # another dsh made it first: its key is the one
            finally:
                os.unlink(temp, dir_fd=directory)
            with contextlib.suppress(OSError):
                os.fsync(directory)
        finally:
            os.close(directory)
        return _read_key(path)
    except OSError as exc:
        raise JournalError(f"cannot read or make the undo journal's key {path}", exc) from exc


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size != _KEY_BYTES:
            raise OSError(errno.EPERM, "not a key file of this user's")
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # loosened since (a copy, a restore): this user's own file, tightened again
        key = os.read(fd, _KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != _KEY_BYTES:
        raise OSError(errno.EIO, "a short key file")
    return key


def _make_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if not stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode):  # a symlink or a file planted there
        raise OSError(errno.ENOTDIR, "not a directory", str(path))


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
