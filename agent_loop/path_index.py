"""The files of the tree, listed once and matched fast: what ``@`` completes at the prompt (docs/prompt.md).

The list is ``git ls-files`` plus the untracked files git does not ignore; outside a git repository, a bounded
walk of the cwd (``dsh.agent_loop.tree_files``, which the search tools share). It is made in a worker thread
(never before the first prompt is drawn, never on the loop), and made again in the background when it is older
than :data:`STALE_SECONDS` as completion asks for it.

Matching is fuzzy: the typed characters in order (a subsequence), case-insensitive, found by one regular
expression over the whole list (one C pass, no backtracking: each class is possessive), then the first
:data:`SCORED` matches ranked in Python, a match in the file's name before one in its folders, a shorter path
first. bench/mentions.py measures it on a 100 000-file repository.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from dsh.agent_loop.tree_files import MAX_WALK, list_files
from dsh.agent_loop.usage import tokens_for_chars

__all__ = ["MAX_WALK", "SCORED", "STALE_SECONDS", "PathIndex", "fuzzy_pattern"]

STALE_SECONDS = 10.0  # a listing older than this is made again, behind the completion that found it old
SCORED = 5_000  # matches ranked; past that the list is already long and the best are among the first


def fuzzy_pattern(query: str) -> re.Pattern[str]:
    """A line (of a newline-separated list) holding ``query``'s characters in order, any case."""
    parts = []
    for char in query:
        both = re.escape(char.lower()) + (re.escape(char.upper()) if char.upper() != char.lower() else "")
        parts.append(f"[^\\n{both}]*+[{both}]")
    return re.compile(r"^" + "".join(parts) + r"[^\n]*", re.MULTILINE)


class PathIndex:
    """The tree's files relative to ``cwd`` and their folders (a trailing ``/``), matched by :meth:`match`."""

    def __init__(self, cwd: Path, *, stale_after: float = STALE_SECONDS) -> None:
        self.cwd = cwd
        self.stale_after = stale_after
        self._blob = ""  # every path, one a line: what the pattern runs over
        self._listed_at: float | None = None
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._sizes: dict[str, int | None] = {}

    @property
    def listed(self) -> bool:
        return self._listed_at is not None

    def start(self) -> None:
        """List the files in a worker thread, unless one is at it or the list is fresh."""
        with self._lock:
            fresh = self._listed_at is not None and time.monotonic() - self._listed_at < self.stale_after
            if fresh or (self._worker is not None and self._worker.is_alive()):
                return
            self._worker = threading.Thread(target=self.refresh, name="dsh-path-index", daemon=True)
            self._worker.start()

    def wait(self, timeout: float | None = None) -> None:
        """Until the worker's listing is in (tests, the bench)."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def refresh(self) -> None:
        """List the files now, in this thread."""
        paths = list_files(self.cwd).paths
        shown = sorted(_folders(paths)) + sorted(paths)
        blob = "".join(path + "\n" for path in shown if "\n" not in path and "\r" not in path)
        self._blob, self._sizes, self._listed_at = blob, {}, time.monotonic()

    def match(self, query: str, limit: int = 50) -> list[str]:
        """The best ``limit`` paths for ``query``: the top folder's entries when it is empty."""
        if not query:
            return [line for line in self._blob.splitlines() if "/" not in line.rstrip("/")][:limit]
        found: list[str] = []
        for number, hit in enumerate(fuzzy_pattern(query).finditer(self._blob)):
            if number == SCORED:
                break
            found.append(hit.group())
        lowered = query.lower()
        return sorted(found, key=lambda path: _rank(path, lowered))[:limit]

    def tokens(self, path: str) -> int | None:
        """A file's size in tokens as dsh estimates them (four bytes a token); None for a folder or no file."""
        if path.endswith("/"):
            return None
        if path not in self._sizes:
            try:
                self._sizes[path] = tokens_for_chars(os.stat(self.cwd / path).st_size)
            except (OSError, ValueError):  # gone since the listing; ValueError: an embedded NUL
                self._sizes[path] = None
        return self._sizes[path]


def _rank(path: str, query: str) -> tuple[int, int, str]:
    """Best first: the query inside the file's own name, then inside the path, then spread out; shorter first."""
    lowered = path.lower()
    name = lowered.rstrip("/").rpartition("/")[2]
    if name.startswith(query):
        tier = 0
    elif query in name:
        tier = 1
    elif query in lowered:
        tier = 2
    else:
        tier = 3
    return tier, len(path), path


def _folders(paths: list[str]) -> set[str]:
    """Every folder holding one of ``paths``, each with its trailing ``/``."""
    folders: set[str] = set()
    for path in paths:
        end = path.rfind("/")
        while end > 0 and (folder := path[: end + 1]) not in folders:
            folders.add(folder)
            end = path.rfind("/", 0, end)
    return folders
