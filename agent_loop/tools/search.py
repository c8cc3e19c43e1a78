"""The search tools: ``glob`` (files by name) and ``search_text`` (lines by regular expression); read only.

Both search the files git lists (``dsh.agent_loop.tree_files``: tracked and untracked-not-ignored, so every
ignore file git reads applies and an ignored tree such as ``node_modules`` is never opened), or a bounded walk
outside a repository. Each opens only regular files (``dsh.agent_loop.safe_open``), reads at most
:data:`SEARCH_MAX_FILE_BYTES` of one, and runs in a worker thread that a cancelled turn abandons and that stops at
its next file. Results are ranked (``search_text``: path order, then line order; ``glob``: the most recently
modified first), bounded, and end with how many more there were. File names and lines come from a repository
that may be hostile: control and bidi characters are escaped, lines are cut. docs/tools.md, "Search: glob and
search_text".
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from dsh.agent_loop.extension_files import grouped
from dsh.agent_loop.safe_open import open_regular_fd
from dsh.agent_loop.tools.registry import Tool, ToolContext, ToolOutput, arguments_schema, int_arg, param, resolve_path
from dsh.agent_loop.tools.search_pattern import LineFinder, glob_regex
from dsh.agent_loop.tree_files import MAX_WALK, TreeFiles, list_files

__all__ = ["GLOB_LIMIT", "SEARCH_LIMIT", "SEARCH_LINE_CHARS", "SEARCH_MAX_FILE_BYTES", "glob_tool", "search_text_tool"]

SEARCH_LIMIT = 100  # matching lines shown by default
GLOB_LIMIT = 100  # files shown by default
MAX_RESULTS = 1000  # the most max_results may ask for
SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024  # a larger file is not searched
SEARCH_LINE_CHARS = 240  # a longer line is shown as this much around its match
_BINARY_PROBE = 8192  # a NUL in the first this many bytes: a binary file, not searched
# Control, bidi and invisible format characters, and lone surrogates: escaped where the model would see them.
_CONTROLS = "\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_IN_LINE = re.compile(f"[{_CONTROLS}]")  # a tab stays in a line
_IN_NAME = re.compile(f"[\t{_CONTROLS}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


@dataclass(frozen=True, slots=True)
class _Where:
    """What a tool searches: a folder's listing or one file, and how names under it are shown."""

    base: Path  # the folder the names are relative to
    names: list[str]
    tree: TreeFiles | None  # None: one file was named
    shown_prefix: str  # prepended to a name: the folder relative to the working directory, or absolute

    def shown(self, name: str) -> str:
        return _IN_NAME.sub(_escaped, self.shown_prefix + name)

    def notes(self) -> list[str]:
        """Lines said before the results: git could not list a repository, or the walk stopped."""
        if self.tree is None:
            return []
        notes = []
        if self.tree.note is not None:
            notes.append(f"[git could not list this repository ({self.tree.note}): walked it instead, skipping .git, "
                         "node_modules, virtualenvs and caches; .gitignore not applied]")
        if self.tree.cut:
            notes.append(f"[not a git repository: the walk stopped at {grouped(MAX_WALK)} files; "
                         "give a narrower path]")
        return notes


def _where(ctx: ToolContext, root: Path, *, folder_only: bool) -> _Where | ToolOutput:
    try:
        info = os.stat(root)
    except OSError as exc:
        return ToolOutput(f"Error: {root} does not exist" if isinstance(exc, FileNotFoundError)
                          else f"Error: {exc}", is_error=True)
    base = Path(os.path.normpath(root))
    single = not stat.S_ISDIR(info.st_mode)
    if single and folder_only:
        return ToolOutput(f"Error: {root} is not a directory", is_error=True)
    folder = base.parent if single else base
    try:
        relative = folder.relative_to(os.path.normpath(ctx.cwd)).as_posix()
        prefix = "" if relative == "." else relative + "/"
    except ValueError:
        prefix = str(folder).rstrip("/") + "/"
    if single:
        return _Where(folder, [base.name], None, prefix)
    tree = list_files(base)
    return _Where(base, tree.paths, tree, prefix)


def _nothing(where: _Where, what: str) -> str:
    """The line for no results: an empty listing says so (git may ignore the whole folder)."""
    if where.tree is not None and not where.names:
        because = "it is empty or git ignores everything in it" if where.tree.by_git else "it is empty"
        return f"no files to search under {where.shown('') or '.'}: {because}"
    return what


def _more(count: int, noun: str) -> str:
    return f"… {grouped(count)} more {noun} not shown (narrow the pattern or path)"


# --- search_text ------------------------------------------------------------------------------------------


def _read_data(path: str) -> bytes | None:
    """The file's bytes if it is searched: a regular file, not too large, not binary; None otherwise."""
    try:
        # A FIFO or a device is refused unopened; a read of a regular file never waits, O_NONBLOCK or not.
        fd, info = open_regular_fd(path, follow_symlinks=True, blocking=False)
    except (OSError, ValueError):  # ValueError: a NUL in a name from a walk of a hostile tree
        return None
    try:
        if info.st_size > SEARCH_MAX_FILE_BYTES:
            return None
        data = os.read(fd, info.st_size + 1)  # one read: the size is known
        while info.st_size < len(data) <= SEARCH_MAX_FILE_BYTES:  # it grew (or says 0, as /proc does): read on
            if not (chunk := os.read(fd, SEARCH_MAX_FILE_BYTES + 1 - len(data))):
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > SEARCH_MAX_FILE_BYTES or data.find(b"\0", 0, _BINARY_PROBE) >= 0:  # find: no copy of the probe
        return None
    return data


def _excerpt(line: str, match: re.Match[str]) -> str:
    """The line, or :data:`SEARCH_LINE_CHARS` of it around the match when it is longer; escaped."""
    line = line.removesuffix("\r")
    if len(line) > SEARCH_LINE_CHARS:
        begin = max(0, min(match.start() - SEARCH_LINE_CHARS // 4, len(line) - SEARCH_LINE_CHARS))
        cut = line[begin : begin + SEARCH_LINE_CHARS]
        line = ("…" if begin else "") + cut + ("…" if begin + SEARCH_LINE_CHARS < len(line) else "")
    return _IN_LINE.sub(_escaped, line)


def _search_sync(finder: LineFinder, where: _Where, wanted: Callable[[str], bool] | None, limit: int,
                 stop: threading.Event) -> ToolOutput:
    shown: list[str] = []
    more = 0
    folder = os.path.join(where.base, "")  # a str joined to each name: no Path made per file
    for name in sorted(where.names):
        if stop.is_set():
            break  # the turn was cancelled: an abandoned search stops at its next file
        if wanted is not None and not wanted(name):
            continue
        data = _read_data(folder + name)
        if data is None:
            continue
        for number, line, match in finder.found(data):
            if len(shown) < limit:
                shown.append(f"{where.shown(name)}:{number}: {_excerpt(line, match)}")
            else:
                more += 1
    lines = where.notes() + (shown or [_nothing(where, "no matches")])
    if more:
        lines.append(_more(more, "matching line" if more == 1 else "matching lines"))
    return ToolOutput("\n".join(lines))


def _name_filter(glob: object) -> Callable[[str], bool] | None:
    """search_text's ``glob``: a name pattern (``*.py``) tries each file's name, one with ``/`` its whole path."""
    if not isinstance(glob, str) or not glob:
        return None
    regex = glob_regex(glob.removeprefix("./"))
    if "/" in glob:
        return lambda name: regex.fullmatch(name) is not None
    return lambda name: regex.fullmatch(name.rpartition("/")[2]) is not None


async def _search_text(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raw = args.get("pattern")
    if not isinstance(raw, str) or not raw:
        raise ValueError("pattern must be a non-empty string")
    try:
        finder = LineFinder.of(raw, re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        return ToolOutput(f"Error: invalid regular expression: {exc}", is_error=True)
    root = resolve_path(ctx, args.get("path"), default=".")
    wanted = _name_filter(args.get("glob"))
    limit = int_arg(args, "max_results", SEARCH_LIMIT, 1, MAX_RESULTS)
    return await _in_thread(ctx, root, False, lambda where, stop: _search_sync(finder, where, wanted, limit, stop))


async def _in_thread(ctx: ToolContext, root: Path, folder_only: bool,
                     work: Callable[[_Where, threading.Event], ToolOutput]) -> ToolOutput:
    """``work`` over the files under ``root``, in a worker thread a cancelled turn abandons (``stop`` tells it to
    end at its next file); a path that cannot be searched is its error instead."""
    stop = threading.Event()

    def run() -> ToolOutput:
        where = _where(ctx, root, folder_only=folder_only)
        return where if isinstance(where, ToolOutput) else work(where, stop)

    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    finally:
        stop.set()


def search_text_tool() -> Tool:
    return Tool(
        "search_text",
        "Search the files under a directory for a regular expression (Python syntax), line by line. Output "
        "lines are `path:line: text`, by path then line. Reads the files git lists (tracked, and untracked ones "
        "not ignored by .gitignore); outside a git repository it skips .git, virtualenvs and node_modules. Binary "
        "files and files over 2 MiB are skipped.",
        arguments_schema(
            {
                "pattern": param("string", "regular expression"),
                "path": param("string", "directory or file to search (default .)"),
                "glob": param("string", "only files whose name matches, e.g. *.py or *.{ts,tsx}; "
                                        "with a / the path under `path`, e.g. src/**/*.py"),
                "ignore_case": param("boolean"),
                "max_results": param("integer", f"lines shown (default {SEARCH_LIMIT})", minimum=1),
            },
            "pattern",
        ),
        _search_text,
        concurrency_safe=True,
    )


# --- glob ---------------------------------------------------------------------------------------------------


def _glob_sync(regex: re.Pattern[str], pattern: str, where: _Where, limit: int,
               stop: threading.Event) -> ToolOutput:
    dated: list[tuple[int, str]] = []
    for name in where.names:
        if stop.is_set():
            break
        if regex.fullmatch(name) is None:
            continue
        try:
            info = os.stat(where.base / name)
        except (OSError, ValueError):
            continue  # deleted but still tracked, or gone since the listing
        if not stat.S_ISDIR(info.st_mode):  # a submodule is listed as its folder
            dated.append((-info.st_mtime_ns, name))
    dated.sort()
    lines = where.notes() + [where.shown(name) for _, name in dated[:limit]]
    if not dated:
        lines.append(_nothing(where, _no_files(pattern, where)))
    if len(dated) > limit:
        lines.append(_more(len(dated) - limit, "file" if len(dated) - limit == 1 else "files"))
    return ToolOutput("\n".join(lines))


def _no_files(pattern: str, where: _Where) -> str:
    """No file matches; when the pattern would match deeper down, say how to reach those files."""
    if pattern.startswith("**/"):
        return "no files match"
    deeper = glob_regex("**/" + pattern)
    count = sum(1 for name in where.names if deeper.fullmatch(name))
    if not count:
        return "no files match"
    return f"no files match {pattern} here; **/{pattern} matches {grouped(count)} (* does not cross /)"


async def _glob(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raw = args.get("pattern")
    if not isinstance(raw, str) or not raw:
        raise ValueError("pattern must be a non-empty string")
    pattern = raw
    while pattern.startswith("./"):
        pattern = pattern[2:]
    if pattern.startswith("/") or ".." in pattern.split("/"):
        return ToolOutput("Error: the pattern is relative to `path`: put the folder in `path`, e.g. "
                          '{"pattern": "**/*.py", "path": "/abs/folder"}', is_error=True)
    root = resolve_path(ctx, args.get("path"), default=".")
    limit = int_arg(args, "max_results", GLOB_LIMIT, 1, MAX_RESULTS)
    regex = glob_regex(pattern)
    return await _in_thread(ctx, root, True, lambda where, stop: _glob_sync(regex, pattern, where, limit, stop))


def glob_tool() -> Tool:
    return Tool(
        "glob",
        "Find files by path pattern under a directory: `**` crosses folders, `*` and `?` stay within one, "
        "`[abc]` and `{a,b}` as in a shell. The pattern is relative to `path`, e.g. src/**/*.py or *.md (the top "
        "folder only). Lists the files git lists (tracked, and untracked ones not ignored by .gitignore), most "
        "recently modified first.",
        arguments_schema(
            {
                "pattern": param("string", "glob pattern relative to `path`"),
                "path": param("string", "directory to search (default .)"),
                "max_results": param("integer", f"files shown (default {GLOB_LIMIT})", minimum=1),
            },
            "pattern",
        ),
        _glob,
        concurrency_safe=True,
    )
