"""``write_file`` and ``edit_file``: changes the user sees as a diff and approves before they land.

Each call is planned first (read the file, check it, build the new text and a unified diff), then
approved, then committed. What makes an edit trustworthy lives here:

- **Exact edits.** ``edit_file`` replaces an exact ``old_string``; one that is absent, or (without
  ``replace_all``) not unique, is an error result that says which, so the model never edits the wrong spot.
- **Not behind the model's back.** An existing file must have been read through ``read_file`` and not
  changed on disk since (``mtime_ns`` and size, kept per path in the session state the tools share);
  otherwise the result tells the model to read it again. A brand-new file needs no read. The check is
  repeated after the approval, so a file changed while the user looked at the diff is not overwritten.
- **The file stays what it was.** Only regular UTF-8 text files are changed (binary or undecodable ones
  are refused); a CRLF file stays CRLF, a BOM stays, and the file keeps its mode. The write is atomic:
  a temporary file in the same directory, fsynced, then ``os.replace`` over the target (a symlink's
  target is replaced, the link stays).
- **Approval.** The approver gets an :class:`EditRequest` (the repl shows the diff; docs/configuration.md).
  ``always`` covers that tool for the rest of the session, but a path outside the working tree is asked
  every time. With no approver (piped and ``-p`` runs) edits are denied unless ``allow_edits`` is set,
  and even then only inside the working tree.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from dsh.agent_loop.tools import (
    Approver,
    NotRegularFile,
    Tool,
    ToolContext,
    ToolOutput,
    _resolve,
    file_stamp,
    open_regular,
    read_stamps,
)
from dsh.llm import error_chain
from dsh.llm.redact import MASK

__all__ = [
    "EDIT_DENIED",
    "EDIT_MAX_BYTES",
    "EDIT_NO_APPROVER",
    "EditRequest",
    "edit_file_tool",
    "write_file_tool",
]

EDIT_MAX_BYTES = 4 * 1024 * 1024  # bigger files are not diffed and rewritten by these tools
EDIT_DENIED = "Error: the user denied this edit"
EDIT_NO_APPROVER = (
    "Error: file edits need approval and no one can approve them here; "
    "--allow-edits (or allow_edits = true in config.toml) allows them"
)
_BOM = "\ufeff"
_TEXT_ONLY = "write_file and edit_file change only UTF-8 text"


@dataclass(frozen=True, slots=True)
class EditRequest:
    """What the user approves: the tool, the file as shown, and the whole unified diff."""

    tool: str  # "write_file" or "edit_file"
    path: str  # relative to the working tree, or absolute when outside it
    diff: str  # LF-separated unified diff lines
    added: int
    removed: int
    new_file: bool
    outside: bool  # outside the working tree: asked every time, never written unattended

    @property
    def subject(self) -> str:
        """``notes.txt (+1 -1)``, ``new.txt (new file, +3)``, ``/etc/x (+1 -0, outside the working tree)``."""
        change = f"new file, +{self.added}" if self.new_file else f"+{self.added} -{self.removed}"
        if self.outside:
            change += ", outside the working tree"
        return f"{self.path} ({change})"


class EditRefused(Exception):
    """A planned edit that cannot go ahead; the message is the result the model sees."""


@dataclass(frozen=True, slots=True)
class _Plan:
    target: Path  # the real path (symlinks resolved) that is replaced
    shown: str
    before: tuple[int, int] | None  # the stamp the plan was made from; None for a new file
    mode: int | None  # the existing file's permission bits
    owner: tuple[int, int] | None  # and its owner and group
    data: bytes
    request: EditRequest
    done: str  # the result text once written
    unchanged: bool = False  # the file already has this text: nothing to approve or write


@dataclass(frozen=True, slots=True)
class _Current:
    text: str  # decoded, BOM kept
    crlf: bool  # every line ends CRLF: the edit works on LF text and writes CRLF back
    stamp: tuple[int, int]
    mode: int
    owner: tuple[int, int]  # uid, gid


def _where(ctx: ToolContext, raw: object) -> tuple[Path, str, bool]:
    """(real path, how it is shown, outside the working tree?)."""
    path = _resolve(ctx, raw)
    target = Path(os.path.realpath(path))
    root = Path(os.path.realpath(ctx.cwd))
    outside = not target.is_relative_to(root)
    shown = str(target) if outside else str(target.relative_to(root))
    # A line break in a file name would start a forged line in the diff and the question: show it.
    return target, shown.replace("\n", "\u240a").replace("\r", "\u240d"), outside


def _load(target: Path, shown: str) -> _Current | None:
    """The file as it is now, or None if there is none; EditRefused for what these tools do not change."""
    try:
        file = open_regular(target)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise EditRefused(f"Error: {exc}") from None
    with file:
        info = os.fstat(file.fileno())
        if info.st_size > EDIT_MAX_BYTES:
            raise EditRefused(f"Error: {shown} is larger than {EDIT_MAX_BYTES >> 20} MiB; edit it another way")
        data = file.read(EDIT_MAX_BYTES + 1)
    if b"\0" in data:
        raise EditRefused(f"Error: {shown} looks like a binary file; {_TEXT_ONLY}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EditRefused(f"Error: {shown} is not valid UTF-8; {_TEXT_ONLY}") from None
    newlines = text.count("\n")
    crlf = newlines > 0 and text.count("\r\n") == newlines
    return _Current(text, crlf, file_stamp(info), stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid))


def _check_fresh(current: _Current, known: tuple[int, int] | None, shown: str) -> None:
    if known is None:
        raise EditRefused(f"Error: {shown} has not been read yet; read it with read_file before changing it")
    if known != current.stamp:
        raise EditRefused(f"Error: {shown} changed on disk since it was last read; read it again with read_file")


def _diff_lines(text: str | None) -> list[str]:
    """``text`` as lines that keep their newline (only ``\\n`` splits: no other character may hide a line)."""
    if not text:
        return []
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _unified(before: str | None, after: str, shown: str) -> tuple[str, int, int]:
    """The diff (LF lines, no trailing newline) and the counts of added and removed lines."""
    lines: list[str] = []
    for line in difflib.unified_diff(_diff_lines(before), _diff_lines(after),
                                     "/dev/null" if before is None else shown, shown):
        if line.endswith("\n"):
            lines.append(line[:-1])
        else:
            lines += [line, "\\ No newline at end of file"]
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    return "\n".join(lines), added, removed


def _encode(text: str, current: _Current | None) -> bytes:
    if current is not None:
        if current.crlf:
            text = text.replace("\n", "\r\n")
        if current.text.startswith(_BOM) and not text.startswith(_BOM):
            text = _BOM + text
    return text.encode("utf-8", "surrogatepass")


def _plan(tool: str, target: Path, shown: str, outside: bool, known: tuple[int, int] | None,
          change: Any, redact: Callable[[str], str] = str) -> _Plan:
    """Read, check and build the edit.

    ``change(text or None) -> (new LF text, result text)`` may raise :class:`EditRefused`; ``{shown}``
    in its texts becomes the path as shown, ``{counts}`` in the result the diff's ``+a -r``.
    """
    current = _load(target, shown)
    if current is not None:
        _check_fresh(current, known, shown)
    before = None if current is None else (current.text.replace("\r\n", "\n") if current.crlf else current.text)
    try:
        after, done = change(before)
    except EditRefused as exc:
        raise EditRefused(str(exc).replace("{shown}", shown)) from None
    if before is not None and MASK in after and MASK not in before and redact(before) != before:
        # The model saw this file with its secrets masked: writing its copy back would put *** over them.
        raise EditRefused(f"Error: {shown} holds secrets that were masked ({MASK}) when it was read; the new "
                          f"content would write {MASK} over them — change the lines around them with edit_file")
    data = _encode(after, current)
    if len(data) > EDIT_MAX_BYTES:  # the diff, the question and the file would all hold it
        raise EditRefused(f"Error: the new content of {shown} is larger than {EDIT_MAX_BYTES >> 20} MiB; "
                          "write it another way")
    diff, added, removed = _unified(before, after, shown)
    diff = redact(diff)  # the approval shows context lines of the file: its secrets stay masked there too
    request = EditRequest(tool, shown, diff, added, removed, current is None, outside)
    done = done.replace("{counts}", f"+{added} -{removed}").replace("{shown}", shown)
    if current is None:
        return _Plan(target, shown, None, None, None, data, request, done)
    return _Plan(target, shown, current.stamp, current.mode, current.owner, data, request, done,
                 unchanged=after == before)


def _commit(plan: _Plan) -> tuple[int, int]:
    """Write ``plan`` atomically, if the file is still as planned; the new stamp."""
    try:
        now: tuple[int, int] | None = file_stamp(os.stat(plan.target))
    except FileNotFoundError:
        now = None
    if now != plan.before:
        if plan.before is None:
            raise EditRefused(f"Error: {plan.shown} was created while the edit waited; read it with read_file")
        raise EditRefused(f"Error: {plan.shown} changed on disk since it was last read; read it again with read_file")
    directory = plan.target.parent
    if plan.before is None:
        directory.mkdir(parents=True, exist_ok=True)
    temp, fd = _temp_file(directory, plan.target.name)
    try:
        with os.fdopen(fd, "wb") as out:
            if plan.owner is not None and plan.owner != (os.getuid(), os.getgid()):
                with contextlib.suppress(OSError):  # only root may give a file away: keep what we can
                    os.fchown(out.fileno(), *plan.owner)
            if plan.mode is not None:
                os.fchmod(out.fileno(), plan.mode)  # the file's own mode, not the umask's (after chown)
            out.write(plan.data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, plan.target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _sync_directory(directory)
    return file_stamp(os.stat(plan.target))


def _temp_file(directory: Path, name: str) -> tuple[Path, int]:
    """A new file beside the target (same file system, so the rename is atomic), mode 0666 minus the umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        temp = directory / f".{name[:200]}.dsh-{secrets.token_hex(4)}.tmp"
        try:
            return temp, os.open(temp, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


async def _approve(plan: _Plan, ctx: ToolContext, approver: Approver | None, allow_unattended: bool) -> str | None:
    """None when the edit may go ahead, else the result the model sees."""
    request = plan.request
    key = f"{request.tool}.always"
    if ctx.session_state.get(key) and not request.outside:
        return None
    ask = approver or ctx.approver
    if ask is None:
        if not allow_unattended:
            return EDIT_NO_APPROVER
        if request.outside:
            return f"Error: {request.path} is outside the working tree; unattended edits stay inside it"
        return None
    try:
        answer = await ask(request)
    except Exception as exc:
        return f"{EDIT_DENIED} (approval failed: {error_chain(exc)})"
    if answer == "always":
        ctx.session_state[key] = True
    elif answer != "yes":
        return EDIT_DENIED
    return None


async def _run(tool: str, ctx: ToolContext, raw_path: object, change: Any, approver: Approver | None,
               allow_unattended: bool) -> ToolOutput:
    target, shown, outside = _where(ctx, raw_path)
    stamps = read_stamps(ctx)
    known = stamps.get(str(target))
    try:
        # Planning only reads: abandoned on cancel, so Ctrl-C ends the turn at once.
        plan = await anyio.to_thread.run_sync(
            _plan, tool, target, shown, outside, known, change, ctx.redact, abandon_on_cancel=True
        )
    except EditRefused as exc:
        return ToolOutput(str(exc), is_error=True)
    if plan.unchanged:
        return ToolOutput(f"(no change: {shown} already has this content)")
    refusal = await _approve(plan, ctx, approver, allow_unattended)
    if refusal is not None:
        return ToolOutput(refusal, is_error=True)
    try:
        # Not abandoned: a write that has begun finishes (or is undone) before the turn ends.
        stamps[str(target)] = await anyio.to_thread.run_sync(_commit, plan)
    except EditRefused as exc:
        stamps.pop(str(target), None)
        return ToolOutput(str(exc), is_error=True)
    return ToolOutput(plan.done)


def _string_arg(args: dict[str, Any], name: str, *, allow_empty: bool = True) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    if not allow_empty and not value:
        raise ValueError(f"{name} must not be empty")
    return value


def write_file_tool(approver: Approver | None = None, *, allow_unattended: bool = False) -> Tool:
    """``write_file {path, content}``: create a file, or replace one the model has read."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        content = _string_arg(args, "content")

        def change(before: str | None) -> tuple[str, str]:
            text = content.replace("\r\n", "\n") if before is not None else content
            if before is None:
                lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
                return text, "created {shown} (" + f"{lines} line{'s' if lines != 1 else ''})"
            return text, "wrote {shown} ({counts})"

        return await _run("write_file", ctx, args.get("path"), change, approver,
                          allow_unattended)

    return Tool(
        "write_file",
        "Create a file, or replace the whole content of one you have read with read_file. The user sees "
        "a diff and approves it. Prefer edit_file for changes to part of a file.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file to write (relative to the working directory)"},
                "content": {"type": "string", "description": "the complete new content"},
            },
            "required": ["path", "content"],
        },
        run,
        concurrency_safe=False,
    )


def edit_file_tool(approver: Approver | None = None, *, allow_unattended: bool = False) -> Tool:
    """``edit_file {path, old_string, new_string, replace_all?}``: an exact replacement, shown as a diff."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        old = _string_arg(args, "old_string", allow_empty=False)
        new = _string_arg(args, "new_string")
        replace_all = args.get("replace_all", False)
        if not isinstance(replace_all, bool):
            raise ValueError("replace_all must be true or false")
        if old == new:
            return ToolOutput("Error: old_string and new_string are the same; nothing to change", is_error=True)

        def change(before: str | None) -> tuple[str, str]:
            if before is None:
                raise EditRefused("Error: {shown} does not exist; create it with write_file")
            wanted, replacement = old, new
            if "\r\n" not in before:  # an LF (or CRLF, read as LF) file: the model may have sent either
                wanted, replacement = wanted.replace("\r\n", "\n"), replacement.replace("\r\n", "\n")
            count = before.count(wanted)
            if count == 0:
                raise EditRefused("Error: old_string not found in {shown}")
            if count > 1 and not replace_all:
                raise EditRefused(
                    f"Error: old_string occurs {count} times in {{shown}}; pass replace_all or a longer old_string"
                )
            replaced = count if replace_all else 1
            done = "edited {shown}: " + f"{replaced} replacement{'s' if replaced != 1 else ''}" + " ({counts})"
            return before.replace(wanted, replacement, -1 if replace_all else 1), done

        return await _run("edit_file", ctx, args.get("path"), change, approver,
                          allow_unattended)

    return Tool(
        "edit_file",
        "Replace an exact string in a file you have read with read_file. old_string must occur exactly "
        "once (include enough surrounding lines), or pass replace_all. The user sees a diff and approves it.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file to edit (relative to the working directory)"},
                "old_string": {"type": "string", "description": "the exact text to replace"},
                "new_string": {"type": "string", "description": "the text to put in its place"},
                "replace_all": {"type": "boolean", "description": "replace every occurrence (default false)"},
            },
            "required": ["path", "old_string", "new_string"],
        },
        run,
        concurrency_safe=False,
    )
