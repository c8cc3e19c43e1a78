"""The file tools: ``read_file`` and ``list_dir`` (concurrency-safe, read only; the search tools are in ``search``).

Each opens only regular files (``dsh.agent_loop.safe_open``: a FIFO or a device is never opened or waited
on), reads a bounded amount, and runs in a worker thread that a cancelled turn abandons and that stops at
its next check. ``read_file`` records what it read (:func:`read_stamps`), so the edit tools
(``dsh.agent_loop.tools.edits``) can refuse to change a file the model has not seen as it is.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, BinaryIO

import anyio.to_thread

from dsh.agent_loop.image_input import is_image_file, load_image
from dsh.agent_loop.images import NotAnImage
from dsh.agent_loop.safe_open import NotRegularFile, open_regular
from dsh.agent_loop.tools.file_access import FileAccess, text_stamp, via_client
from dsh.agent_loop.tools.registry import Tool, ToolContext, ToolOutput, arguments_schema, int_arg, param, resolve_path

__all__ = [
    "READ_STAMPS_KEY",
    "file_stamp",
    "list_dir_tool",
    "read_file_tool",
    "read_stamps",
]

READ_LIMIT_LINES = 2000
READ_LIMIT_BYTES = 64 * 1024
LIST_LIMIT = 500
READ_STAMPS_KEY = "read_file.stamps"  # session_state: {real path: (mtime_ns, size)} when the model read it


def file_stamp(info: os.stat_result) -> tuple[int, int]:
    """What says a file changed since it was read: its modification time (ns) and size."""
    return (info.st_mtime_ns, info.st_size)


def read_stamps(ctx: ToolContext) -> dict[str, tuple[int, int]]:
    """The files the model has read this session, as they were then (the edit tools refuse stale ones)."""
    stamps = ctx.session_state.get(READ_STAMPS_KEY)
    if not isinstance(stamps, dict):
        stamps = ctx.session_state[READ_STAMPS_KEY] = {}
    return stamps


def _read_file_sync(
    path: Path, offset: int, limit: int, stop: threading.Event
) -> tuple[ToolOutput, tuple[str, tuple[int, int]] | None]:
    try:
        file = open_regular(path)
    except NotRegularFile as exc:
        return ToolOutput(f"Error: {exc}", is_error=True), None
    with file:
        stamp = (os.path.realpath(path), file_stamp(os.fstat(file.fileno())))
        return _read_lines(file, path, offset, limit, stop), stamp


def _read_lines(file: BinaryIO, path: Path, offset: int, limit: int, stop: threading.Event) -> ToolOutput:
    if b"\0" in file.read(8192):
        return ToolOutput(f"Error: {path} looks like a binary file", is_error=True)
    file.seek(0)
    lines: list[str] = []
    size = 0
    number = 0
    more = False
    for number, raw in enumerate(file, start=1):
        if number % 4096 == 0 and stop.is_set():
            break  # the turn was cancelled: an abandoned read stops at its next check
        if number < offset:
            continue
        if len(lines) >= limit or size >= READ_LIMIT_BYTES:
            more = True
            break
        line = raw.decode("utf-8", "replace")
        lines.append(line)
        size += len(raw)
    text = "".join(lines)
    if not lines and offset > 1:
        return ToolOutput(f"(no lines at offset {offset}; the file has {number} lines)")
    if more:
        text += f"\n[file continues; read more with offset={offset + len(lines)}]"
    return ToolOutput(text if text else "(empty file)")


def _page_text(text: str, path: Path, offset: int, limit: int) -> ToolOutput:
    """:func:`_read_lines` for a text read whole through a :class:`FileAccess` (the same bounds and notes)."""
    if "\0" in text[:8192]:
        return ToolOutput(f"Error: {path} looks like a binary file", is_error=True)
    lines: list[str] = []
    size = 0
    number = 0
    more = False
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if number < offset:
            continue
        if len(lines) >= limit or size >= READ_LIMIT_BYTES:
            more = True
            break
        lines.append(line)
        size += len(line.encode("utf-8", "surrogatepass"))
    if not lines and offset > 1:
        return ToolOutput(f"(no lines at offset {offset}; the file has {number} lines)")
    page = "".join(lines)
    if more:
        page += f"\n[file continues; read more with offset={offset + len(lines)}]"
    return ToolOutput(page if page else "(empty file)")


async def _read_through(files: FileAccess, real: Path, path: Path, offset: int, limit: int,
                        ctx: ToolContext) -> ToolOutput:
    """A read through the client (an editor's buffer): the whole text, stamped by its content, then paged."""
    try:
        text = await files.read_text(real)
    except FileNotFoundError:
        return ToolOutput(f"Error: {path} does not exist", is_error=True)
    output = _page_text(text, path, offset, limit)
    if not output.is_error:
        read_stamps(ctx)[str(real)] = text_stamp(text)
    return output


async def _read_file(args: dict[str, Any], ctx: ToolContext, files: FileAccess | None = None) -> ToolOutput:
    path = resolve_path(ctx, args.get("path"))
    offset = int_arg(args, "offset", 1, 1, 1 << 40)
    limit = int_arg(args, "limit", READ_LIMIT_LINES, 1, READ_LIMIT_LINES)
    real = Path(os.path.realpath(path))
    client = via_client(files, real, Path(os.path.realpath(ctx.cwd)))
    if client is not None:
        return await _read_through(client, real, path, offset, limit, ctx)
    if (image := await anyio.to_thread.run_sync(_read_image, path, args.get("path"), ctx)) is not None:
        return image
    stop = threading.Event()
    try:
        # Abandoned on cancel so Ctrl-C ends the turn at once; the thread sees ``stop`` and ends.
        output, stamp = await anyio.to_thread.run_sync(
            _read_file_sync, path, offset, limit, stop, abandon_on_cancel=True
        )
    finally:
        stop.set()
    if stamp is not None and not output.is_error:
        read_stamps(ctx)[stamp[0]] = stamp[1]
    return output


def _read_image(path: Path, named: object, ctx: ToolContext) -> ToolOutput | None:
    """``read_file`` on an image: the image, sent to a model that sees after the step's results
    (agent_loop/image_input.py); a line saying why not otherwise. None: not an image, read as text."""
    if not is_image_file(path):
        return None
    name = named if isinstance(named, str) else path.name
    if (refusal := ctx.image_rules.refusal(ctx.model)) is not None:
        return ToolOutput(f"Error: {name} is an image, not sent: {refusal}", is_error=True)
    try:
        image, summary = load_image(path, name, keep=ctx.image_rules.keep)
    except NotAnImage as why:
        return ToolOutput(f"Error: {name}: {why}", is_error=True)
    return ToolOutput(f"{name}: image, {summary}; sent to you with this step's results", images=(image,))


def read_file_tool(files: FileAccess | None = None) -> Tool:
    """``read_file``; with ``files`` (an editor's, ``dsh acp``) a path inside the working tree is read through it."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return await _read_file(args, ctx, files)

    return Tool(
        "read_file",
        "Read a text file, or an image (PNG, JPEG, GIF, WebP) for a model that sees. "
        "Relative paths are resolved against the session's working directory. "
        f"Returns up to {READ_LIMIT_LINES} lines starting at `offset` (1-based).",
        arguments_schema(
            {
                "path": param("string", "file to read"),
                "offset": param("integer", "first line to read, 1-based", minimum=1),
                "limit": param("integer", "maximum number of lines", minimum=1),
            },
            "path",
        ),
        run,
        concurrency_safe=True,
    )


def _list_dir_sync(path: Path) -> ToolOutput:
    with os.scandir(path) as entries:
        names = sorted(
            (entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name) for entry in entries
        )
    if not names:
        return ToolOutput("(empty directory)")
    shown = names[:LIST_LIMIT]
    text = "\n".join(shown)
    if len(names) > LIST_LIMIT:
        text += f"\n[… {len(names) - LIST_LIMIT} more entries]"
    return ToolOutput(text)


async def _list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = resolve_path(ctx, args.get("path"), default=".")
    return await anyio.to_thread.run_sync(_list_dir_sync, path)


def list_dir_tool() -> Tool:
    return Tool(
        "list_dir",
        "List a directory (directories end with /). Defaults to the working directory.",
        arguments_schema({"path": param("string", "directory to list (default .)")}),
        _list_dir,
        concurrency_safe=True,
    )
