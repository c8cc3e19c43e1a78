"""The approval questions: a command, an MCP tool call or an edit's diff, shown whole before ``y`` counts.

Pure: the caller passes the screen's size. Unsafe characters stay as they are here; the sink makes them
visible (:func:`dsh.repl.styles.terminal_text`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.repl.sanitize import one_line, sanitize
from dsh.repl.styles import Styled

if TYPE_CHECKING:
    from dsh.agent_loop.tools.edit_plan import EditRequest
    from dsh.agent_loop.tools.registry import McpCallRequest

__all__ = [
    "APPROVAL_MAX_CHARS",
    "Approval",
    "approval_answer",
    "approval_question",
    "diff_approval",
    "mcp_approval",
    "mcp_arguments",
    "question_for",
    "shown_command",
    "shown_diff",
]

APPROVAL_MAX_CHARS = 2000  # a longer command is viewed in full before it can be approved
_WHITE_RUN = re.compile(r"[^\S\n]{9,}")  # 9+ blanks in a row: counted, so nothing hides behind them
_BLANK_LINES = 3  # this many blank lines in a row and more: one counted line


def _mark_whitespace(line: str) -> str:
    line = line.replace("\t", "\u2409")  # a tab's width depends on the column: show it
    return _WHITE_RUN.sub(lambda m: f"\u2420\u00d7{len(m.group(0))}", line)


def shown_command(command: str) -> list[str]:
    """The lines an approval shows for ``command``: long blank runs and blank-line runs counted visibly.

    Unsafe characters stay as they are here; the sink makes them visible (:func:`terminal_text`).
    """
    lines = [_mark_whitespace(line) for line in command.replace("\r\n", "\n").split("\n")]
    shown: list[str] = []
    blank = 0
    for line in [*lines, None]:
        if line is not None and not line.strip():
            blank += 1
            continue
        if blank >= _BLANK_LINES:
            shown.append(f"({blank} blank lines)")
        else:
            shown.extend([""] * blank)
        blank = 0
        if line is not None:
            shown.append(line)
    return shown


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval: the inline question, and whether the command must be viewed (``v``) first."""

    question: str
    must_view: bool
    view: str  # the whole command, as lines to print above the question ("" when it is inline)
    viewed_question: str  # the question once the command was viewed
    noun: str = "command"  # what ``v`` views: "command" or "diff"
    always: bool = True  # ``a`` is offered; an edit in a git directory is asked every time (y / n)


def _size(command: str) -> str:
    lines = command.count("\n") + 1
    return f"{lines} line{'s' if lines != 1 else ''} / {len(command)} chars"


def _fits(shown: Sequence[str], text: str, rows: int, cols: int) -> bool:
    """Whether ``shown`` (the lines an approval prints for ``text``) fits inline in the live view."""
    width = max(cols, 20)
    screen_rows = sum(max(1, -(-len(sanitize(line)) // width)) for line in shown)
    budget = max(rows - 4, 1)  # the toolbar, the question's own line and a little context
    return screen_rows <= budget and text.count("\n") + 1 <= budget and len(text) <= APPROVAL_MAX_CHARS


_INDENT = "      "


def question_for(request: str | EditRequest | McpCallRequest, *, rows: int, cols: int, color: bool) -> Approval:
    """The question an approval ``request`` of the tools asks, sized to a ``rows`` x ``cols`` terminal."""
    from dsh.agent_loop.tools.registry import (  # the tools: loaded before any ask
        AskedText,
        McpCallRequest,
        SandboxedCommand,
    )

    if isinstance(request, AskedText):
        return approval_question(request, rows=rows, cols=cols, tool=request.tool)
    if isinstance(request, str):
        return approval_question(request, rows=rows, cols=cols, sandboxed=isinstance(request, SandboxedCommand))
    if isinstance(request, McpCallRequest):
        return mcp_approval(request.server, request.tool, request.arguments, rows=rows, cols=cols)
    return diff_approval(request.diff, request.subject, tool=request.tool, rows=rows, cols=cols, color=color,
                         hidden=request.hidden, always=request.may_always)


def approval_question(command: str, *, rows: int = 24, cols: int = 80, tool: str = "run_shell",
                      sandboxed: bool = False) -> Approval:
    """The question for a command; one that does not fit the screen is shown by ``v`` before ``y`` counts. A
    command that will run in the sandbox says so (docs/safety.md)."""
    where = " (sandboxed)" if sandboxed else ""
    head = f"  [approve] {tool}{where}: "
    shown = shown_command(command.strip("\n") if command.strip() else command)
    if _fits(shown, command, rows, cols):
        text = head + ("\n" + _INDENT).join(shown) + "  (y / n / a) "
        return Approval(text, False, "", text)
    size = _size(command)
    view = f"  [command] {tool}{where}, {size}:\n" + "".join(f"{_INDENT}{line}\n" for line in shown)
    return Approval(
        f"{head}command is {size} \u2014 v to view  (v / n) ",
        True,
        view,
        f"{head}the command above ({size})  (y / n / a) ",
    )


def mcp_arguments(arguments: object) -> str:
    """An MCP call's arguments as the approval shows them: the whole JSON on one line, nothing left out.

    Not ASCII-escaped: the sink's sanitizer makes every unsafe character (controls, bidi, lone surrogates)
    visible, so the user reads the text the server will get.
    """
    try:
        return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError, RecursionError):
        return repr(arguments)


def mcp_approval(server: str, tool: str, arguments: object, *, rows: int = 24, cols: int = 80) -> Approval:
    """The question for an MCP tool call (docs/mcp.md, "Approval"): server, tool and the whole arguments JSON,
    y / n / a like ``run_shell``; arguments that do not fit the screen are viewed (``v``) before ``y`` counts."""
    tool, server = one_line(tool), one_line(server)  # a name drawn on the question's own line, never a new one
    head = f"  [approve] MCP tool {tool} (server {server}): "
    text = mcp_arguments(arguments)
    shown = shown_command(text)
    if _fits([head + shown[0], *shown[1:]], text, rows, cols):
        question = head + ("\n" + _INDENT).join(shown) + "  (y / n / a) "
        return Approval(question, False, "", question, "arguments")
    size = _size(text)
    view = f"  [arguments] MCP tool {tool} (server {server}), {size}:\n"
    view += "".join(f"{_INDENT}{line}\n" for line in shown)
    return Approval(
        f"{head}arguments are {size} \u2014 v to view  (v / n) ",
        True,
        view,
        f"{head}the arguments above ({size})  (y / n / a) ",
        "arguments",
    )


def _diff_style(line: str) -> str | None:
    if line.startswith(("+++ ", "--- ")):
        return None
    if line.startswith("+"):
        return "added"
    if line.startswith("-"):
        return "removed"
    return "dim" if line.startswith("@@") else None


def shown_diff(diff: str) -> list[str]:
    """The lines an edit approval shows for a unified diff: the command rule for blanks and tabs."""
    return shown_command(diff.strip("\n"))


def _indented_block(lines: Sequence[str], *, color: bool) -> Styled:
    """``lines`` indented, one per line, added/removed lines coloured; built in one pass (no O(n²) joins)."""
    parts: list[str] = []
    spans: list[tuple[int, int, str]] = []
    at = 0
    for line in lines:
        parts.append(_INDENT)
        at += len(_INDENT)
        style = _diff_style(line) if color else None
        if style is not None and line:
            spans.append((at, at + len(line), style))
        parts.append(line + "\n")
        at += len(line) + 1
    return Styled("".join(parts), tuple(spans))


def _hidden_note(hidden: int) -> str:
    return f", hides {hidden} known secret{'s' if hidden != 1 else ''}" if hidden else ""


def diff_approval(
    diff: str, subject: str, *, tool: str, rows: int = 24, cols: int = 80, color: bool = False, hidden: int = 0,
    always: bool = True,
) -> Approval:
    """The question for an edit: the whole diff above ``[approve] tool subject``; a long one needs ``v``.

    ``subject`` names the file and the change (``notes.txt (+1 -1)``). The diff lines follow the
    command rule (:func:`shown_command`), and a diff that does not fit the screen is announced as
    ``diff is N lines / M chars — v to view``, exactly like a long command. ``hidden`` known secret
    values on the lines to be written (each shown as ``***(N chars)``) need ``v`` too: the question
    says so (``hides 1 known secret``), and ``v`` shows the diff masked alike.
    ``always=False`` (a git directory) offers ``y / n`` only.
    """
    head = f"  [approve] {tool} {subject}"
    answers = "(y / n / a)" if always else "(y / n)"
    shown = shown_diff(diff)
    block = _indented_block(shown, color=color)
    if not hidden and _fits([*shown, head], diff, rows, cols):
        text = block + head + f"  {answers} "
        return Approval(text, False, "", text, "diff", always)
    size = _size(diff.strip("\n")) + _hidden_note(hidden)
    return Approval(
        f"{head}: diff is {size} \u2014 v to view  (v / n) ",
        True,
        f"  [diff] {tool} {subject}, {size}:\n" + block,
        f"{head}: the diff above ({size})  {answers} ",
        "diff",
        always,
    )


def approval_answer(answer: str | None) -> str:
    return {"y": "yes", "a": "always"}.get(answer or "", "no")
