"""Putting a turn's files back from the undo journal: ``/undo`` and ``/rewind N`` (docs/safety.md, "Undo and
rewind"); the journal itself is ``dsh.agent_loop.journal``.

Each file of the turn goes back to its earliest before-image in that turn, but only while it still holds
what dsh last wrote there (its hash and size, from the journal): a file someone changed since, deleted,
or replaced by a symlink or something else is named and left as it is. A file dsh created is removed. Only
the journal's signed lines are read (dsh wrote them); the file's current bytes are hashed in bounded chunks,
and only when its size is one the journal gives.

Restoring walks to the file's directory from ``/`` following no symlink
(:func:`dsh.agent_loop.safe_open.open_parent`), as an edit does, and never opens or replaces a symlink in
the file's place; the file is replaced atomically (a temporary file beside it, fsynced, renamed), keeping
its mode. A change made through an editor's buffer (``dsh acp``) goes back through it when the session has
the editor's file access.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dsh.agent_loop.journal import Change, Journal, digest, shown_path
from dsh.agent_loop.safe_open import DirectoryChanged, file_kind, open_parent, replace_in, sync_directory

__all__ = ["TextAccess", "UndoReport", "undo_turn"]

_READ_CHUNK = 1 << 20


class TextAccess(Protocol):
    """An editor's buffers (``dsh.agent_loop.tools.file_access.FileAccess``), as the undo needs them."""

    def read_text(self, path: Path) -> Awaitable[str]: ...

    def write_text(self, path: Path, text: str) -> Awaitable[None]: ...


@dataclass(slots=True)
class UndoReport:
    """What one turn's undo did: the lines to show, and the files for the model's note."""

    turn: int
    lines: list[str] = field(default_factory=list)
    reverted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


async def undo_turn(journal: Journal, turn: int, files: TextAccess | None,
                    run_sync: Callable[..., Awaitable[Any]]) -> UndoReport:
    """Revert turn ``turn``'s files (the earliest before-image of each), unless changed since; record it.

    ``run_sync(function, *args)`` runs blocking I/O off the event loop (anyio's ``to_thread.run_sync``).
    ``files`` (an editor's) takes back what went through it, for files inside the tree.
    """
    report = UndoReport(turn)
    for first, last in _per_file(journal.changes(turn)):
        shown = shown_path(last.path)
        before = None if first.before is None else await run_sync(journal.blob, first.before, first.before_size)
        if first.before is not None and before is None:
            report.lines.append(f"{shown}: its before-image is missing from the journal; not reverted")
            report.kept.append(last.path)
            continue
        if last.via == "editor" and files is not None and last.root != "/":
            line = await _undo_through(files, last, first, before, shown)
        else:
            line = await run_sync(_undo_on_disk, last, first, before, shown)
        report.lines.append(line)
        (report.kept if line.endswith("not reverted") or line.endswith("not restored") or
         line.endswith("not removed") else report.reverted).append(last.path)
    await run_sync(journal.record_undo, turn, report.reverted, report.kept)
    return report


def _per_file(changes: Iterable[Change]) -> list[tuple[Change, Change]]:
    """(first, last) change of each file, in the order the files were first changed."""
    files: dict[Path, list[Change]] = {}
    for change in changes:
        files.setdefault(change.target, []).append(change)
    return [(found[0], found[-1]) for found in files.values()]


def _differs(last: Change, size: int | None) -> str:
    if size is None:
        return "deleted"
    if size == last.after_size:
        return f"changed since dsh wrote it (same size, {size} bytes, different content)"
    return f"changed since dsh wrote it (size {last.after_size} -> {size} bytes)"


def _undo_on_disk(last: Change, first: Change, before: bytes | None, shown: str) -> str:
    """Put ``first``'s before-image back in place of what ``last`` wrote, if the file is still that."""
    target = last.target
    try:
        directory = open_parent(target, create=False)
    except DirectoryChanged as exc:
        what = "a symlink" if exc.symlink else "not a directory"
        root = Path(last.root)
        where = exc.path.relative_to(root) if exc.path.is_relative_to(root) and last.root != "/" else exc.path
        return f"{shown}: {shown_path(str(where))} is {what} now; not reverted"
    except FileNotFoundError:
        if before is None:
            return f"reverted {shown} (already gone)"
        return f"{shown} was deleted since dsh wrote it; not restored"
    except OSError as exc:
        return f"{shown}: cannot reach it ({os.strerror(exc.errno or 0)}); not reverted"
    try:
        return _undo_in(directory, target.name, last, before, shown)
    except OSError as exc:
        return f"{shown}: cannot write it ({os.strerror(exc.errno or 0)}); not reverted"
    finally:
        os.close(directory)


def _undo_in(directory: int, name: str, last: Change, before: bytes | None, shown: str) -> str:
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        if before is None:
            return f"reverted {shown} (already gone)"
        return f"{shown} was deleted since dsh wrote it; not restored"
    if stat.S_ISLNK(info.st_mode):
        return f"{shown} is a symlink now; not reverted"
    if not stat.S_ISREG(info.st_mode):
        return f"{shown} is {file_kind(info.st_mode)} now; not reverted"
    current = None  # its hash, when its size is one it could be
    if info.st_size == last.after_size or (before is not None and info.st_size == len(before)):
        current = _hash_at(directory, name)
    if current is not None and before is not None and current == digest(before):
        return f"reverted {shown} (already as before)"
    if current is None or current != last.after:
        return f"{shown} {_differs(last, info.st_size)}; not reverted"
    if before is None:
        os.unlink(name, dir_fd=directory)
        sync_directory(directory)
        return f"removed {shown} (dsh created it)"
    replace_in(directory, name, before, mode=stat.S_IMODE(info.st_mode))
    return f"reverted {shown}"


def _hash_at(directory: int, name: str) -> str | None:
    """The content hash of the regular file ``name``, read a chunk at a time (None if it cannot be read)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        hasher = hashlib.sha256()
        while chunk := os.read(fd, _READ_CHUNK):
            hasher.update(chunk)
        return hasher.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


async def _undo_through(files: TextAccess, last: Change, first: Change, before: bytes | None, shown: str) -> str:
    """:func:`_undo_on_disk` for a change made through an editor's buffer (``dsh acp``)."""
    try:
        text: str | None = await files.read_text(last.target)
    except FileNotFoundError:
        text = None
    current = None if text is None else text.encode("utf-8", "surrogatepass")
    if current is not None and before is not None and current == before:
        return f"reverted {shown} (already as before)"
    if current is None:
        return f"reverted {shown} (already gone)" if before is None else (
            f"{shown} was deleted since dsh wrote it; not restored")
    if digest(current) != last.after:
        return f"{shown} {_differs(last, len(current))}; not reverted"
    if before is None:
        return f"{shown} was created through the editor, which dsh cannot delete files through; not removed"
    await files.write_text(last.target, before.decode("utf-8", "surrogatepass"))
    return f"reverted {shown}"


