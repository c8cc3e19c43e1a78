"""Reading skill and command files as ``AGENTS.md`` is read: hostile input, bounded, never through a link out.

A cloned repository chose what is in ``.claude/skills/`` and ``.claude/commands/``. So, as for the project
instructions (agent_loop/context.py; docs/configuration.md, "What a hostile repository can and cannot do"): a
folder is listed and a file read only when its real path stays inside its root (the repository, or dsh's
config directory for the user's own), only regular files are opened (never a FIFO or a device,
agent_loop/safe_open.py), each read is bounded and a file over :data:`FILE_CAP_BYTES` is not read at all,
bytes that are not UTF-8 become U+FFFD, a file holding a NUL byte (binary) is left out, and a folder lists at
most :data:`MAX_ENTRIES` entries. What is left out raises :class:`LeftOut`, whose text ends the one line
``<path> left out: <why>``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from dsh.agent_loop.safe_open import NotRegularFile, read_regular

__all__ = ["FILE_CAP_BYTES", "MAX_ENTRIES", "NAME_PATTERN", "SUFFIX", "Folder", "LeftOut", "grouped",
           "markdown_files", "read_each", "read_inside", "size_text"]

T = TypeVar("T")
SUFFIX = ".md"  # a command's or a subagent's file: NAME.md

FILE_CAP_BYTES = 64 * 1024  # one skill or command file; a larger one is left out, not cut
MAX_ENTRIES = 200  # per folder: a folder of a million entries is not walked
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a skill's or a command's name


class LeftOut(Exception):
    """Why a file or a folder is not read: the end of the line ``<path> left out: <why>``."""


@dataclass(frozen=True, slots=True)
class Folder:
    """One folder of skills or commands. ``root``: the real path of every file read must stay inside it."""

    path: Path
    root: Path
    root_name: str  # how a line names ``root``: "the repository", "dsh's config directory"
    source: str  # how a listing names the folder: ".claude/commands", "user" ...

    def entries(self, notices: list[str]) -> Iterator[os.DirEntry[str]]:
        """The folder's entries, sorted by name, at most :data:`MAX_ENTRIES`; none when it does not exist.

        Why a folder or its last entries are left out is appended to ``notices``.
        """
        try:
            _inside(self.path, self.root, self.root_name)
            with os.scandir(self.path) as listing:
                found: list[os.DirEntry[str]] = []
                for entry in listing:
                    if len(found) == MAX_ENTRIES:
                        notices.append(f"{self.path} left out after {MAX_ENTRIES} entries: a folder holds at most "
                                       f"{MAX_ENTRIES}")
                        break
                    found.append(entry)
        except (FileNotFoundError, NotADirectoryError):
            return
        except LeftOut as why:
            notices.append(f"{self.path} left out: {why}")
            return
        except OSError as exc:
            notices.append(f"{self.path} left out: it cannot be listed ({exc.strerror})")
            return
        yield from sorted(found, key=lambda entry: entry.name)


def _inside(path: Path, root: Path, root_name: str) -> str:
    """``path``'s real path when it stays inside ``root``; :class:`LeftOut` otherwise.

    Fast when no component below ``root`` is a symlink (a few ``lstat`` calls: the path is then inside by its
    spelling); otherwise the real path is resolved and compared, as for ``AGENTS.md``.
    """
    info = path.lstat()
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = ()
    if parts and not stat.S_ISLNK(info.st_mode) and not any(
            stat.S_ISLNK(os.lstat(root.joinpath(*parts[:depth])).st_mode) for depth in range(1, len(parts))):
        return os.path.join(os.path.realpath(root), *parts) if root.is_symlink() else str(path)
    real = os.path.realpath(path)
    if not Path(real).is_relative_to(os.path.realpath(root)):
        what = "it is a symlink to a path" if stat.S_ISLNK(info.st_mode) else "its real path is"
        raise LeftOut(f"{what} outside {root_name}")
    return real


def read_inside(path: Path, folder: Folder, limit: int = FILE_CAP_BYTES) -> str | None:
    """At most ``limit`` bytes of ``path``; None when there is no such file. Raises :class:`LeftOut`.

    The real path must stay inside the folder's root, then the resolved path is opened with ``O_NOFOLLOW``
    (a link swapped in after the check is refused too), as agent_loop/context.py reads ``AGENTS.md``.
    """
    try:
        real = Path(_inside(path, folder.root, folder.root_name))
        size = real.stat().st_size
        if size > FILE_CAP_BYTES:
            raise LeftOut(f"it is {size_text(size)}, over the {size_text(FILE_CAP_BYTES)} cap")
        text = read_regular(real, limit)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegularFile as exc:
        raise LeftOut(f"it is {exc.kind}, not a regular file") from None
    except OSError as exc:
        raise LeftOut(f"it cannot be read ({exc.strerror})") from None
    if "\x00" in text:
        raise LeftOut("it is binary (it holds a NUL byte)")
    return text


def grouped(count: int) -> str:
    """A count for a line, thousands grouped with a space: ``33 177 600`` (docs/contracts.md's lines write them so)."""
    return f"{count:,}".replace(",", " ")


def size_text(size: int) -> str:
    """A file size for a line: ``512 bytes``, ``64 KiB``, ``1.0 GiB``."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size // 1024} KiB"
    if size < 1024 ** 3:
        return f"{size / 1024 ** 2:.1f} MiB"
    return f"{size / 1024 ** 3:.1f} GiB"


def read_each(folders: Sequence[Folder], notices: list[str], file_of: Callable[[os.DirEntry[str]], Path | None],
              read: Callable[[Path, os.DirEntry[str], Folder], T | None]) -> Iterator[tuple[Path, T]]:
    """Each folder's entries in order, earlier folders first: the file ``file_of`` names for one (None: not one of
    these), read by ``read``, and what it gives, with its path. A file ``read`` leaves out (:class:`LeftOut`) is the
    line ``<path> left out: <why>`` in ``notices``; one it gives None for is passed over (its reader said why)."""
    for folder in folders:
        for entry in folder.entries(notices):
            path = file_of(entry)
            if path is None:
                continue
            try:
                item = read(path, entry, folder)
            except LeftOut as why:
                notices.append(f"{path} left out: {why}")
                continue
            if item is not None:
                yield path, item


def markdown_files(entry: os.DirEntry[str]) -> Path | None:
    """A ``NAME.md`` file of a folder (a command's, a subagent's)."""
    return Path(entry.path) if entry.name.endswith(SUFFIX) and not entry.is_dir() else None
