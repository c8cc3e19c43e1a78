"""``write_file`` and ``edit_file``: changes the user sees as a diff and approves before they land.

Each call is planned first (``edit_plan.py``: read the file, check it, build the new text and a unified
diff), then approved, then committed. What makes an edit trustworthy lives here:

- **Exact edits.** ``edit_file`` replaces an exact ``old_string``; one that is absent, or (without
  ``replace_all``) not unique, is an error result that says which, so the model never edits the wrong spot.
- **Not behind the model's back.** An existing file must have been read through ``read_file`` and not
  changed on disk since (``mtime_ns`` and size, kept per path in the session state the tools share);
  otherwise the result tells the model to read it again. A brand-new file needs no read. The check is
  repeated after the approval, so a file changed while the user looked at the diff is not overwritten.
- **The file stays what it was.** Only regular UTF-8 text files are changed (binary or undecodable ones
  are refused); a CRLF file stays CRLF, a BOM stays, and the file keeps its mode. The write is atomic:
  a temporary file in the same directory, fsynced, then renamed over the target (a symlink's target is
  replaced, the link stays).
- **Where it was approved.** The path is resolved once, when the edit is planned; the write then walks
  to that directory from ``/`` following no symlink (``dsh.agent_loop.safe_open.open_parent``), so a directory
  swapped for a symlink while the user looked at the diff refuses the write instead of redirecting it.
- **What is written, shown.** The diff is shown as it will be written: only known secret values (the
  redactor's configured ones) are masked, each as ``***(N chars)``, never a key *shape* or a URL query,
  which would hide the model's text. A masked value on a line being written is counted in the request
  (``hidden``): the approval then has to be viewed before it can be accepted.
- **Approval.** The approver gets an :class:`EditRequest` (the repl shows the diff; docs/configuration.md).
  ``always`` covers that tool for the rest of the session, but a path outside the working tree, in a
  git directory (a hook or git's config can run a program: ``edit_paths.git_area``), or where a program is run
  by name (the ``core.hooksPath`` folder or a ``PATH`` directory inside the tree: ``edit_plan.run_area``), is asked
  every time.
  With no approver (piped and ``-p`` runs) edits are denied unless ``allow_edits`` is set, and even then
  only inside the working tree and outside its git directories.
- **Undoable.** Once approved, the file's bytes as they were (or that it did not exist) are journaled
  durably before the write (``dsh.agent_loop.journal``, when the session keeps a log); an edit whose
  journal cannot be written is not made. ``/undo`` and ``/rewind N`` take the changes back.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.to_thread

from dsh.agent_loop.journal import JOURNAL_KEY, Journal, JournalError
from dsh.agent_loop.permissions import Action
from dsh.agent_loop.safe_open import DirectoryChanged, open_parent, replace_in
from dsh.agent_loop.tools.edit_paths import git_area
from dsh.agent_loop.tools.edit_plan import (  # EDIT_MAX_BYTES and EditRequest: this module's own names for callers
    BOM,
    EDIT_MAX_BYTES,
    RUN_AREAS,
    Change,
    EditRefused,
    EditRequest,
    Plan,
    mask_known,
    masked_texts,
    plan_edit,
    run_area,
    shown_in_tree,
    unified_diff,
)
from dsh.agent_loop.tools.file_access import FileAccess, text_stamp, via_client
from dsh.agent_loop.tools.files import file_stamp, read_stamps
from dsh.agent_loop.tools.registry import (
    Approver,
    Tool,
    ToolContext,
    ToolOutput,
    arguments_schema,
    ask_approval,
    param,
    resolve_path,
)
from dsh.llm.redact import MASK

__all__ = [
    "EDIT_DENIED",
    "EDIT_MAX_BYTES",
    "EDIT_NO_APPROVER",
    "EditRequest",
    "edit_file_tool",
    "write_file_tool",
]

EDIT_DENIED = "Error: the user denied this edit"
EDIT_NO_APPROVER = (
    "Error: file edits need approval and no one can approve them here; "
    "--allow-edits (or allow_edits = true in config.toml) allows them"
)


def _where(ctx: ToolContext, raw: object) -> tuple[Path, Path]:
    """(real path, the working tree's real path)."""
    path = resolve_path(ctx, raw)
    return Path(os.path.realpath(path)), Path(os.path.realpath(ctx.cwd))


def _changed_on_disk(plan: Plan) -> EditRefused:
    if plan.before is None:
        return EditRefused(f"Error: {plan.shown} was created while the edit waited; read it with read_file")
    return EditRefused(f"Error: {plan.shown} changed on disk since it was last read; read it again with read_file")


def _commit(plan: Plan) -> tuple[int, int]:
    """Write ``plan`` atomically into the directory it was planned in, if the file is still as planned."""
    try:
        directory = open_parent(plan.target, create=plan.before is None)
    except DirectoryChanged as exc:
        what = "became a symlink while the edit waited" if exc.symlink else "is not a directory now"
        raise EditRefused(f"Error: {plan.shown} was not written: {shown_in_tree(exc.path, plan.root)} {what}") from None
    except FileNotFoundError:
        raise _changed_on_disk(plan) from None  # a directory of the file that was read is gone
    try:
        return _replace(plan, directory)
    finally:
        os.close(directory)


def _journal(ctx: ToolContext) -> Journal | None:
    """The session's undo journal (the agent puts it there when the session keeps a log), else None."""
    journal = ctx.session_state.get(JOURNAL_KEY)
    return journal if isinstance(journal, Journal) else None


def _record(journal: Journal | None, turn: int, target: Path, root: Path, shown: str, before: bytes | None,
            after: bytes, via: str) -> int | None:
    """Journal the before-image durably (docs/safety.md, "Undo and rewind"); EditRefused when that fails:
    an edit that could not be undone is not made."""
    if journal is None:
        return None
    try:
        return journal.record(turn, target, root, before, after, via)
    except JournalError as exc:
        cause = exc.__cause__
        why = f" ({os.strerror(cause.errno)})" if isinstance(cause, OSError) and cause.errno else ""
        raise EditRefused(f"Error: {shown} was not written: its undo journal cannot be written{why}") from None


def _commit_journaled(plan: Plan, journal: Journal | None, turn: int) -> tuple[int, int]:
    """:func:`_commit`, the before-image journaled first; a write refused after that is withdrawn."""
    seq = _record(journal, turn, plan.target, plan.root, plan.shown, plan.old, plan.data, "disk")
    try:
        return _commit(plan)
    except EditRefused:
        if journal is not None and seq is not None:
            journal.withdraw(seq)
        raise


def _replace(plan: Plan, directory: int) -> tuple[int, int]:
    """The temporary file, written and renamed over the target, all relative to ``directory``; the new stamp."""
    name = plan.target.name
    try:
        info: os.stat_result | None = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    now = None if info is None else file_stamp(info)
    if now != plan.before or (info is not None and not stat.S_ISREG(info.st_mode)):  # a symlink now, say
        raise _changed_on_disk(plan)
    replace_in(directory, name, plan.data, mode=plan.mode, owner=plan.owner)
    return file_stamp(os.stat(name, dir_fd=directory, follow_symlinks=False))


async def _approve(request: EditRequest, ctx: ToolContext, approver: Approver | None,
                   allow_unattended: bool) -> ToolOutput | None:
    """None when the edit may go ahead, else the result the model sees."""
    return await ask_approval(
        ctx, approver or ctx.approver, request,
        always_key=f"{request.tool}.always" if request.may_always else None, always_covers=not request.outside,
        denied=EDIT_DENIED, no_approver=_unattended_refusal(request, allow_unattended), action=_action(request),
    )


def _action(request: EditRequest) -> Action:
    """What the permission mode decides on (docs/safety.md): a git directory before outside the tree, both
    keep today's asking."""
    if request.git is not None:
        return Action.EDIT_GIT
    return Action.EDIT_OUTSIDE if request.outside else Action.EDIT


def _unattended_refusal(request: EditRequest, allow_unattended: bool) -> str | None:
    """Why an edit with no one to approve it is refused, or None when ``--allow-edits`` lets it through."""
    if request.git is not None:  # --allow-edits would not help: say why instead
        where = "what git or a shell runs by name" if request.git in RUN_AREAS else "git directories"
        return f"Error: {request.path} is {request.git.what}; unattended edits stay out of {where}"
    if not allow_unattended:
        return EDIT_NO_APPROVER
    if request.outside:
        return f"Error: {request.path} is outside the working tree; unattended edits stay inside it"
    return None


async def _run(tool: str, ctx: ToolContext, raw_path: object, change: Change, approver: Approver | None,
               allow_unattended: bool, files: FileAccess | None = None) -> ToolOutput:
    target, root = _where(ctx, raw_path)
    client = via_client(files, target, root)
    if client is not None:
        return await _run_through(client, tool, ctx, target, root, change, approver, allow_unattended)
    stamps = read_stamps(ctx)
    known = stamps.get(str(target))
    try:
        # Planning only reads: abandoned on cancel, so Ctrl-C ends the turn at once.
        plan = await anyio.to_thread.run_sync(
            plan_edit, tool, target, root, known, change, ctx.redact, abandon_on_cancel=True
        )
    except EditRefused as exc:
        return ToolOutput(str(exc), is_error=True)
    if plan.unchanged:
        return ToolOutput(f"(no change: {plan.shown} already has this content)")
    refusal = await _approve(plan.request, ctx, approver, allow_unattended)
    if refusal is not None:
        return refusal
    try:
        # Not abandoned: a write that has begun finishes (or is undone) before the turn ends.
        stamps[str(target)] = await anyio.to_thread.run_sync(_commit_journaled, plan, _journal(ctx), ctx.turn)
    except EditRefused as exc:
        stamps.pop(str(target), None)
        return ToolOutput(str(exc), is_error=True)
    return ToolOutput(plan.done)


async def _client_text(files: FileAccess, target: Path) -> str | None:
    try:
        return await files.read_text(target)
    except FileNotFoundError:
        return None


async def _run_through(files: FileAccess, tool: str, ctx: ToolContext, target: Path, root: Path, change: Change,
                       approver: Approver | None, allow_unattended: bool) -> ToolOutput:
    """:func:`_run` for a file inside the tree that an editor holds (``dsh acp`` with the client's fs): the
    buffer is read and written through ``files``; the same freshness check (by content), diff, approval and
    results. The path checks were made by the caller (inside the tree, symlinks resolved)."""
    shown = shown_in_tree(target, root)
    stamps = read_stamps(ctx)
    current = await _client_text(files, target)
    try:
        if current is not None:
            known = stamps.get(str(target))
            if known is None:
                raise EditRefused(f"Error: {shown} has not been read yet; read it with read_file before changing it")
            if known != text_stamp(current):
                raise EditRefused(f"Error: {shown} changed since it was last read; read it again with read_file")
        crlf = current is not None and current.count("\n") > 0 and current.count("\r\n") == current.count("\n")
        before = None if current is None else (current.replace("\r\n", "\n") if crlf else current)
        try:
            after, done = change(before)
        except EditRefused as exc:
            raise EditRefused(str(exc).replace("{shown}", shown)) from None
        if before is not None and MASK in after and MASK not in before and ctx.redact(before) != before:
            raise EditRefused(f"Error: {shown} holds secrets that were masked ({MASK}) when it was read; the new "
                              f"content would write {MASK} over them — change the lines around them with edit_file")
    except EditRefused as exc:
        return ToolOutput(str(exc), is_error=True)
    if after == before:
        return ToolOutput(f"(no change: {shown} already has this content)")
    diff, added, removed = unified_diff(before, after, shown)
    diff, hidden = mask_known(diff, ctx.redact)
    area = git_area(target) or await anyio.to_thread.run_sync(run_area, target, root)
    request = EditRequest(tool, shown, diff, added, removed, current is None, False, area, hidden,
                          *masked_texts(before, after, ctx.redact))
    refusal = await _approve(request, ctx, approver, allow_unattended)
    if refusal is not None:
        return refusal
    if await _client_text(files, target) != current:  # changed while the user looked at the diff
        stamps.pop(str(target), None)
        return ToolOutput(f"Error: {shown} changed while the edit waited; read it again with read_file", is_error=True)
    text = after.replace("\n", "\r\n") if crlf else after
    if current is not None and current.startswith(BOM) and not text.startswith(BOM):
        text = BOM + text
    journal = _journal(ctx)
    try:  # the editor's text as it gave it is the before-image
        seq = await anyio.to_thread.run_sync(
            _record, journal, ctx.turn, target, root, shown,
            None if current is None else current.encode("utf-8", "surrogatepass"),
            text.encode("utf-8", "surrogatepass"), "editor")
    except EditRefused as exc:
        return ToolOutput(str(exc), is_error=True)
    try:
        await files.write_text(target, text)
    except BaseException:
        if journal is not None and seq is not None:
            journal.withdraw(seq)  # one short line; no await, so a cancel cannot skip it
        raise
    stamps[str(target)] = text_stamp(text)
    return ToolOutput(done.replace("{counts}", f"+{added} -{removed}").replace("{shown}", shown))


def _string_arg(args: dict[str, Any], name: str, *, allow_empty: bool = True) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    if not allow_empty and not value:
        raise ValueError(f"{name} must not be empty")
    return value


def write_file_tool(approver: Approver | None = None, *, allow_unattended: bool = False,
                    files: FileAccess | None = None) -> Tool:
    """``write_file {path, content}``: create a file, or replace one the model has read."""

    def plan(args: dict[str, Any]) -> Change:
        content = _string_arg(args, "content")

        def change(before: str | None) -> tuple[str, str]:
            text = content.replace("\r\n", "\n") if before is not None else content
            if before is None:
                lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
                return text, "created {shown} (" + f"{lines} line{'s' if lines != 1 else ''})"
            return text, "wrote {shown} ({counts})"

        return change

    return _file_change_tool(
        "write_file",
        "Create a file, or replace the whole content of one you have read with read_file. The user sees "
        "a diff and approves it. Prefer edit_file for changes to part of a file.",
        arguments_schema(
            {
                "path": param("string", "file to write (relative to the working directory)"),
                "content": param("string", "the complete new content"),
            },
            "path", "content",
        ),
        plan, approver, allow_unattended, files,
    )


def edit_file_tool(approver: Approver | None = None, *, allow_unattended: bool = False,
                   files: FileAccess | None = None) -> Tool:
    """``edit_file {path, old_string, new_string, replace_all?}``: an exact replacement, shown as a diff."""

    def plan(args: dict[str, Any]) -> Change | ToolOutput:
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

        return change

    return _file_change_tool(
        "edit_file",
        "Replace an exact string in a file you have read with read_file. old_string must occur exactly "
        "once (include enough surrounding lines), or pass replace_all. The user sees a diff and approves it.",
        arguments_schema(
            {
                "path": param("string", "file to edit (relative to the working directory)"),
                "old_string": param("string", "the exact text to replace"),
                "new_string": param("string", "the text to put in its place"),
                "replace_all": param("boolean", "replace every occurrence (default false)"),
            },
            "path", "old_string", "new_string",
        ),
        plan, approver, allow_unattended, files,
    )


def _file_change_tool(name: str, description: str, schema: dict[str, Any],
                      plan: Callable[[dict[str, Any]], Change | ToolOutput], approver: Approver | None,
                      allow_unattended: bool, files: FileAccess | None) -> Tool:
    """A tool that changes the file at its ``path`` argument: ``plan(args)`` says how (or why not), the user
    approves the diff (see :func:`_run`); with ``files`` (an editor's) a file inside the tree goes through it."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        change = plan(args)
        if isinstance(change, ToolOutput):
            return change
        return await _run(name, ctx, args.get("path"), change, approver, allow_unattended, files)

    return Tool(name, description, schema, run, concurrency_safe=False)
