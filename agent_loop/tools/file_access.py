"""Where the file tools read and write text when it is not dsh's own view of the disk: an editor's buffers.

A :class:`FileAccess` is handed to the session (and from it to ``read_file``, ``write_file`` and
``edit_file``) by a front end that has one: ``dsh acp`` passes the ACP client's ``fs/read_text_file`` and
``fs/write_text_file`` when the client advertises them, so an unsaved buffer is what the model reads and
what an edit changes (docs/editors.md). Without one (None, the default) the tools use the local disk
through ``dsh.agent_loop.safe_open`` as always.

dsh's own checks stay in front of it: only a path whose real path (symlinks resolved) lies inside the
working tree goes to the client (:func:`via_client`); anything outside, or reached through a symlink that
leaves the tree, is handled by dsh's local tools and their rules (an edit outside the tree is asked every
time). A text read through the client is stamped by its content (:func:`text_stamp`), as a disk read is by
its mtime and size, so the edit tools still refuse to change a buffer the model has not seen as it is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

__all__ = ["FileAccess", "text_stamp", "via_client"]


class FileAccess(Protocol):
    """Text files as someone other than the local disk holds them (an editor over ACP)."""

    async def read_text(self, path: Path) -> str:
        """The whole text at the absolute ``path``; FileNotFoundError when there is no such file."""

    async def write_text(self, path: Path, text: str) -> None:
        """Replace (or create) the text at the absolute ``path``."""


def text_stamp(text: str) -> tuple[int, int]:
    """What says a text read through a :class:`FileAccess` changed since: a digest of it, and its length."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "big"), len(text))


def via_client(files: FileAccess | None, real: Path, root: Path) -> FileAccess | None:
    """The client's access for ``real`` (a path with symlinks resolved) when it lies inside the working tree
    ``root`` (also resolved); None: dsh's own local tools handle it."""
    if files is None or not real.is_relative_to(root):
        return None
    return files
