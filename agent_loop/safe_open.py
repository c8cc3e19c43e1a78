"""Opening a path that hostile input may have chosen: only regular files, never waiting, never redirected.

A repository, the model or a child can plant a FIFO, a device or a symlink where dsh expects a file. Every
such open in agent_loop goes through here: the file tools and the edits (``dsh.agent_loop.tools``), the
project instructions and git's small files (``dsh.agent_loop.context``, ``dsh.agent_loop.project``), and
the session logs. What each open guarantees:

- **Nothing is waited on.** The kind is checked with a ``stat`` first (it never blocks, and names a socket,
  which cannot be opened), so a FIFO or a device is not even opened; the open itself is ``O_NONBLOCK``, so
  a FIFO swapped in after that check returns at once instead of waiting for a writer, and ``fstat`` of what
  was opened -- not the name -- decides (docs/reliability.md, "Nothing wedges dsh").
- **No symlink where that matters.** ``follow_symlinks=False`` opens with ``O_NOFOLLOW`` (a symlink fails
  with ``ELOOP``): a session log, ``HEAD -> /proc/self/environ``. The file tools follow links, as the user's
  own tools would.
- **Bounded.** :func:`read_regular` reads at most the bytes asked for.
- **Where it was approved.** :func:`open_parent` walks to a directory from ``/`` following no symlink, so
  an edit writes into the directory the user approved or not at all; :func:`replace_in` then replaces a file
  there whole (a temporary file beside it, fsynced, renamed over it), as an edit and an undo both do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "DirectoryChanged",
    "NotRegularFile",
    "file_kind",
    "open_parent",
    "open_regular",
    "open_regular_fd",
    "read_regular",
    "replace_in",
    "sync_directory",
]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
)  # fmt: skip
_READ_CHUNK = 64 * 1024


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message: ``a FIFO``, ``a directory`` ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegularFile(OSError):
    """A path that is not a regular file: opening or reading it could block forever (a FIFO, a device)."""

    def __init__(self, path: str | os.PathLike[str], mode: int) -> None:
        self.kind = file_kind(mode)
        super().__init__(f"{path} is {self.kind}, not a regular file")


def _check_kind(path: str | os.PathLike[str], follow_symlinks: bool) -> None:
    """Refuse what is not a regular file before opening it; a symlink not followed fails as ``O_NOFOLLOW`` would."""
    mode = os.stat(path, follow_symlinks=follow_symlinks).st_mode
    if stat.S_ISLNK(mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, mode)


def open_regular_fd(
    path: str | os.PathLike[str], flags: int = os.O_RDONLY, *, follow_symlinks: bool, blocking: bool = True
) -> tuple[int, os.stat_result]:
    """A blocking descriptor of ``path`` opened with ``flags``, and its ``fstat``, only if it is a regular file.

    ``flags`` open an existing file (``O_RDONLY``, ``O_RDWR | O_APPEND`` ...): its kind is checked first.
    Raises :class:`NotRegularFile` naming what it is, ``OSError`` (``ELOOP`` for a symlink not followed) for
    the rest. The caller closes the descriptor. ``blocking=False`` leaves it ``O_NONBLOCK``, two ``fcntl`` calls
    fewer: a caller that only reads a regular file (the search, 12 000 files a call) sees no difference on Linux.
    """
    _check_kind(path, follow_symlinks)
    no_follow = 0 if follow_symlinks else os.O_NOFOLLOW
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | no_follow)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped in after the check
            raise NotRegularFile(path, info.st_mode)
        if blocking:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """``path`` opened for reading as a binary file, only if it is a regular file (see :func:`open_regular_fd`)."""
    fd, _ = open_regular_fd(path, follow_symlinks=follow_symlinks)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int) -> str:
    """At most ``limit`` bytes of a regular file that is not a symlink, decoded with U+FFFD for bad UTF-8."""
    fd, _ = open_regular_fd(path, follow_symlinks=False)
    try:
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0:
            chunk = os.read(fd, min(remaining, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(fd)


# --- the walk to a directory ----------------------------------------------------------------------

# O_PATH: a directory is walked through without needing read permission on it. Linux only, hence getattr:
# elsewhere O_RDONLY.
_DIRECTORY_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirectoryChanged(Exception):
    """A directory on the planned path is a symlink, or no directory, now."""

    def __init__(self, path: Path, symlink: bool) -> None:
        super().__init__(f"{path} is {'a symlink' if symlink else 'not a directory'}")
        self.path = path
        self.symlink = symlink


def _is_symlink(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_directory(directory: int, name: str, path: Path, create: bool) -> int:
    """``name`` in ``directory``, opened without following a symlink; made first when missing and ``create``."""
    for _ in range(2):
        try:
            return os.open(name, _DIRECTORY_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            if not create:
                break
            with contextlib.suppress(FileExistsError):  # made meanwhile: opened (and checked) next time round
                os.mkdir(name, 0o777, dir_fd=directory)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # ELOOP: O_NOFOLLOW met a symlink (BSD, macOS)
                raise DirectoryChanged(path, exc.errno == errno.ELOOP or _is_symlink(directory, name)) from None
            raise OSError(exc.errno, exc.strerror, str(path)) from None
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


def open_parent(target: Path, *, create: bool) -> int:
    """A descriptor of the directory holding ``target`` (an absolute real path), reached from ``/`` with no
    symlink followed; the caller closes it.

    One directory at a time, each opened ``O_NOFOLLOW | O_DIRECTORY`` relative to the last, so the
    descriptor is the planned directory or the walk fails naming the component that changed. ``create``
    makes missing directories (mode 0777 minus the umask). Raises :class:`DirectoryChanged` when a directory
    on the way is a symlink or no directory now, ``FileNotFoundError`` (naming it) when one is missing and
    ``create`` is false.
    """
    current = os.open("/", _DIRECTORY_FLAGS)
    path = Path("/")
    try:
        for name in target.parts[1:-1]:
            path = path / name
            opened = _open_directory(current, name, path, create)
            os.close(current)
            current = opened
    except BaseException:
        os.close(current)
        raise
    return current


def replace_in(directory: int, name: str, data: bytes, *, mode: int | None = None,
               owner: tuple[int, int] | None = None) -> None:
    """``name`` in ``directory`` replaced by ``data`` at once: written to a new temporary file beside it (same file
    system, so the rename is atomic), fsynced, renamed over it, the directory fsynced. ``mode`` and ``owner`` are
    the replaced file's (else 0666 minus the umask, and ours); a crash leaves the old file or the new one."""
    temp, fd = _temp_file(directory, name)
    try:
        with os.fdopen(fd, "wb") as out:
            if owner is not None and owner != (os.getuid(), os.getgid()):
                with contextlib.suppress(OSError):  # only root may give a file away: keep what we can
                    os.fchown(out.fileno(), *owner)
            if mode is not None:
                os.fchmod(out.fileno(), mode)  # the file's own mode, not the umask's (after chown)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=directory)
        raise
    sync_directory(directory)


def _temp_file(directory: int, name: str) -> tuple[str, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    for _ in range(100):
        temp = f".{name[:200]}.dsh-{os.urandom(4).hex()}.tmp"  # secrets.token_hex's bytes; `secrets` costs 4 ms
        try:
            return temp, os.open(temp, flags, 0o666, dir_fd=directory)
        except FileExistsError:
            continue
    raise FileExistsError("no free temporary name beside the file")


def sync_directory(directory: int) -> None:
    """A rename or an unlink in ``directory`` made durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)  # O_PATH cannot fsync
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
