"""Hooks in Claude Code's protocol: what is configured, what a hook is sent, and what its answer means (docs/hooks.md).

A hook is a command run with ``sh -c`` at a point of the session's life (:data:`EVENTS`), given the event as
JSON on stdin. Its answer is its exit status and, on exit 0, a JSON object it may print:

* exit 0: go on; stdout's ``decision: "block"`` (with ``reason``), ``continue: false`` (with ``stopReason``) or
  ``hookSpecificOutput.permissionDecision`` ``"deny"`` (with ``permissionDecisionReason``) blocks, ``"ask"``
  asks the user, ``"allow"`` goes on (dsh's own approval still applies);
* exit 2: block; the hook's stderr is what the model is told;
* any other exit: the hook's error, shown; the call goes on;
* a guarding hook (:data:`GUARDING`) that cannot run (the shell's 127 or 126), times out or dies by a signal
  refuses what it guards (fail closed), with one line of closed facts (:func:`failure_line`).

Configured as ``[[hooks.EVENT]]`` tables in config.toml (:func:`parse_hooks`) and, with ``claude_settings =
true``, read from the project's ``.claude/settings.json`` (:func:`claude_settings_hooks`), whose tool names are
Claude Code's (:data:`CLAUDE_TOOLS`). Running them is :mod:`dsh.agent_loop.hook_run`'s job.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dsh.agent_loop import settings
from dsh.agent_loop.safe_open import NotRegularFile, read_regular
from dsh.agent_loop.settings import At, SettingsError

__all__ = [
    "CLAUDE_SETTINGS",
    "CLAUDE_TOOLS",
    "DEFAULT_TIMEOUT",
    "EVENTS",
    "GUARDING",
    "HookSpec",
    "Verdict",
    "claude_settings_hooks",
    "decide",
    "failure_line",
    "hook_lines",
    "hook_name",
    "parse_hooks",
    "tool_payload",
]

EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionStart", "PreCompact", "Notification")
GUARDING = frozenset({"PreToolUse", "UserPromptSubmit"})  # fail closed: what they guard is refused
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse"})  # the matcher applies to the tool's name
DEFAULT_TIMEOUT = 60.0  # seconds, as Claude Code's
MAX_TIMEOUT = 3600.0
CLAUDE_SETTINGS = ".claude/settings.json"
_SETTINGS_LIMIT = 1024 * 1024  # a settings file larger than this is not one
_HOOK_KEYS = ("matcher", "command", "timeout")
_NAME_LIMIT = 40

# Claude Code's tool names -> dsh's (docs/hooks.md, "Tool names"); a Claude hook matches and is told these names.
CLAUDE_TOOLS: dict[str, str] = {
    "Bash": "run_shell", "Read": "read_file", "Edit": "edit_file", "MultiEdit": "edit_file", "Write": "write_file",
    "Grep": "search_text", "Glob": "glob", "LS": "list_dir", "TodoWrite": "todo_write", "WebFetch": "web_fetch",
    "WebSearch": "web_search",
}
_CLAUDE_NAME = {"run_shell": "Bash", "read_file": "Read", "edit_file": "Edit", "write_file": "Write",
                "search_text": "Grep", "glob": "Glob", "list_dir": "LS", "todo_write": "TodoWrite",
                "web_fetch": "WebFetch", "web_search": "WebSearch"}
# dsh's argument -> Claude Code's field, where they differ: a script reading .tool_input.file_path works.
_CLAUDE_FIELDS = {"path": "file_path"}
# Words that run the hook rather than name it: the hook's name is the script they run.
_RUNNERS = frozenset({"sh", "bash", "zsh", "dash", "env", "python", "python3", "node", "ruby", "perl", "uv", "run",
                      "bun", "deno", "exec"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

Category = Literal["timeout", "not-found", "exit", "crash"]


def hook_name(command: str) -> str:
    """The name a line gives a hook: its program's (or its script's) basename folded to safe characters, never its
    arguments nor an ``X=…`` assignment before it (a token may ride there)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [word for word in words if "=" not in word.partition("/")[0]]
    while len(words) > 1 and os.path.basename(words[0]) in _RUNNERS and not words[1].startswith("-"):
        words = words[1:]
    base = os.path.basename(words[0].rstrip("/")) if words else ""
    return _UNSAFE.sub("_", base)[:_NAME_LIMIT] or "hook"


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One configured hook. ``claude``: read from ``.claude/settings.json`` (its matcher names Claude's tools)."""

    event: str
    command: str
    matcher: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    source: str = ""
    claude: bool = False
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return hook_name(self.command)

    def tool_name(self, tool: str) -> str:
        """The tool's name as this hook knows it (Claude Code's for a Claude hook)."""
        return _CLAUDE_NAME.get(tool, tool) if self.claude else tool

    def matches(self, tool: str | None) -> bool:
        if self.pattern is None or tool is None:
            return True
        return self.pattern.fullmatch(self.tool_name(tool)) is not None


def _matcher(at: At, value: object) -> tuple[str | None, re.Pattern[str] | None]:
    if value is None:
        return None, None
    if not isinstance(value, str):
        raise at.error("matcher", "must be a string (a regular expression on the tool name)")
    if value.strip() in ("", "*"):
        return value, None
    try:
        return value, re.compile(value)
    except re.error as exc:
        raise at.error("matcher", f"is not a regular expression ({exc.msg})") from None


def _spec(at: At, event: str, table: Mapping[str, object], *, source: str, claude: bool = False) -> HookSpec:
    matcher, pattern = _matcher(at, table.get("matcher"))
    command = settings.string(at, "command", table.get("command"), strip=True)
    given = table.get("timeout")
    timeout = DEFAULT_TIMEOUT if given is None else float(settings.number(
        at, "timeout", given, what=f"a number of seconds above 0 (at most {MAX_TIMEOUT:g})", above=0,
        at_most=MAX_TIMEOUT))
    return HookSpec(event, command, matcher, timeout, source, claude, pattern)


def _table_lines(path: Path | None) -> dict[str, list[int]]:
    """The line of each ``[[hooks.EVENT]]`` header in ``path``, by event, in order (/hooks names the line)."""
    lines: dict[str, list[int]] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
    except OSError:
        return lines
    header = re.compile(r"\s*\[\[\s*hooks\s*\.\s*\"?([A-Za-z]+)\"?\s*\]\]")
    for number, line in enumerate(text.splitlines(), 1):
        match = header.match(line)
        if match:
            lines.setdefault(match.group(1), []).append(number)
    return lines


def parse_hooks(value: object, where: str, path: Path | None = None) -> tuple[HookSpec, ...]:
    """``[[hooks.EVENT]]`` tables (config.toml), checked; a problem is a :class:`SettingsError` naming the key."""
    at = At(where)
    if not isinstance(value, Mapping):
        raise at.error("[hooks]", "must be a table of [[hooks.EVENT]] tables")
    lines = _table_lines(path)
    specs: list[HookSpec] = []
    for event, tables in value.items():
        if event not in EVENTS:
            raise at.error(f"[hooks.{str(event)[:40]}]", f"is not a hook event (one of {', '.join(EVENTS)})")
        if not isinstance(tables, list):
            raise at.error(f"[hooks.{event}]", f"must be an array of tables ([[hooks.{event}]])")
        for n, table in enumerate(tables):
            entry = At(where, f"hooks.{event}")
            settings.unknown_keys(entry, settings.table(entry, None, table), _HOOK_KEYS)
            assert isinstance(table, Mapping)
            numbers = lines.get(event, [])
            source = f"{path}, line {numbers[n]}" if path is not None and n < len(numbers) else where
            specs.append(_spec(entry, event, table, source=source))
    return tuple(specs)


def claude_settings_hooks(cwd: str | os.PathLike[str]) -> tuple[HookSpec, ...]:
    """The hooks of the project's ``.claude/settings.json`` (none without the file). The file is read as
    AGENTS.md is (a regular file, no symlink, bounded); one that is not Claude Code's shape is a
    :class:`SettingsError`: a guard that cannot be read must not be skipped silently."""
    path = Path(cwd) / CLAUDE_SETTINGS
    where = CLAUDE_SETTINGS
    if not os.path.lexists(path):
        return ()
    if os.path.commonpath([os.path.realpath(path), os.path.realpath(cwd)]) != os.path.realpath(cwd):
        raise SettingsError(f"{where} leads out of the project (a symlink): not read")
    try:
        text = read_regular(path, _SETTINGS_LIMIT + 1)
        if len(text.encode("utf-8", "replace")) > _SETTINGS_LIMIT:
            raise SettingsError(f"{where} is larger than {_SETTINGS_LIMIT // 1024} KiB: not read")
        data = json.loads(text)
    except NotRegularFile:
        raise SettingsError(f"{where} is not a regular file (a symlink, a FIFO or a device is not read)") from None
    except OSError as exc:
        raise SettingsError(f"{where} cannot be read: {exc.strerror or type(exc).__name__}") from None
    except (ValueError, RecursionError):
        raise SettingsError(f"{where} is not valid JSON") from None
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if hooks is None:
        return ()
    if not isinstance(hooks, dict):
        raise SettingsError(f"{where}: hooks must be an object of events")
    specs: list[HookSpec] = []
    for event, groups in hooks.items():
        if event not in EVENTS:
            continue  # Claude Code's other events (SessionEnd, SubagentStop, …): dsh has no such point
        for n, group in enumerate(groups if isinstance(groups, list) else [groups]):
            at = At(where, f"hooks.{event}[{n}]")
            group = settings.table(at, None, group)
            handlers = group.get("hooks")
            for handler in handlers if isinstance(handlers, list) else ():
                handler = settings.table(at, "hooks", handler)
                if handler.get("type", "command") != "command":
                    continue  # http, prompt and agent hooks: not run here (docs/hooks.md)
                table = {"matcher": group.get("matcher"), **{k: handler.get(k) for k in ("command", "timeout")}}
                specs.append(_spec(at, event, table, source=where, claude=True))
    return tuple(specs)


def tool_payload(spec: HookSpec, tool: str, arguments: Mapping[str, Any], cwd: str) -> dict[str, Any]:
    """``tool_name`` and ``tool_input`` as ``spec`` knows them: dsh's arguments, and Claude Code's field names
    beside them where they differ (a path as ``file_path``, absolute, as Claude Code sends it)."""
    tool_input = dict(arguments)
    for ours, theirs in _CLAUDE_FIELDS.items():
        value = arguments.get(ours)
        if isinstance(value, str) and theirs not in tool_input:
            tool_input[theirs] = os.path.normpath(os.path.join(cwd, value))
    return {"tool_name": spec.tool_name(tool), "tool_input": tool_input}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one hook's run means: ``go``, ``block`` (``reason`` for the model), ``ask`` (``reason`` for the
    user), or ``failed`` (``category``; whether it refuses is :data:`GUARDING`'s)."""

    says: Literal["go", "block", "ask", "failed"]
    reason: str = ""
    category: Category | None = None
    context: str = ""  # additionalContext a hook gave (UserPromptSubmit, SessionStart)


def _json_answer(stdout: str) -> dict[str, Any] | None:
    text = stdout.strip()
    if not text.startswith("{"):
        return None
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return answer if isinstance(answer, dict) else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _answer(stdout: str, plain_context: bool) -> Verdict:
    """Exit 0's stdout: a JSON decision, or nothing to decide (text that is context, for the events whose stdout
    Claude Code adds to the model's context)."""
    answer = _json_answer(stdout)
    if answer is None:
        return Verdict("go", context=stdout.strip() if plain_context else "")
    specific = answer.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = _text(specific.get("additionalContext"))
    if answer.get("continue") is False:
        return Verdict("block", _text(answer.get("stopReason")) or "the hook stopped it")
    permission = specific.get("permissionDecision")
    if permission == "deny":
        return Verdict("block", _text(specific.get("permissionDecisionReason")) or "the hook denied it")
    if permission == "ask":
        return Verdict("ask", _text(specific.get("permissionDecisionReason")))
    if answer.get("decision") == "block":
        return Verdict("block", _text(answer.get("reason")) or "the hook blocked it")
    return Verdict("go", context=context)


# The events whose plain stdout (exit 0, not a JSON answer) is context for the model, as in Claude Code.
CONTEXT_EVENTS = ("SessionStart", "UserPromptSubmit")


def decide(*, exit_code: int | None, timed_out: bool, started: bool, stdout: str, stderr: str,
           plain_context: bool = False) -> Verdict:
    """The verdict of one run (Claude Code's exit-code rules; the shell's 126/127 mean it could not run)."""
    if timed_out:
        return Verdict("failed", category="timeout")
    if not started or exit_code in (126, 127):
        return Verdict("failed", category="not-found")
    if exit_code is None or 128 < exit_code <= 128 + 64:  # a signal, or one the shell reports as 128+N
        return Verdict("failed", category="crash")
    if exit_code == 2:
        return Verdict("block", stderr.strip() or "the hook blocked it (exit code 2)")
    if exit_code == 0:
        return _answer(stdout, plain_context)
    return Verdict("failed", category="exit")


def failure_line(spec: HookSpec, category: Category, seconds: float, *, target: str, exit_code: int | None = None,
                 refused: bool) -> str:
    """``hook failed (event: PreToolUse; hook: check-cmd; category: timeout; after: 10s); run_shell refused``:
    closed facts only (never the command's arguments or its output)."""
    after = f"{spec.timeout:g}s" if category == "timeout" else f"{seconds:.1f}s"
    code = f"; exit code: {exit_code}" if category == "exit" and exit_code is not None else ""
    end = "refused" if refused else "went on"
    return f"hook failed (event: {spec.event}; hook: {spec.name}; category: {category}{code}; after: {after}); " \
           f"{target} {end}"


def _shown(text: str, limit: int = 60) -> str:
    """A matcher or a path as a line may show it: escapes, lone surrogates and controls inert, cut."""
    shown = json.dumps(text)[1:-1]
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def hook_lines(specs: tuple[HookSpec, ...]) -> list[str]:
    """``/hooks``: one line a hook: event, matcher, the command's name, timeout, and where it is configured."""
    if not specs:
        return ["no hooks (set [[hooks.EVENT]] in config.toml, or claude_settings = true; docs/hooks.md)"]
    return [f"{spec.event}  matcher: {_shown(spec.matcher or '*')}  hook: {spec.name}  timeout: {spec.timeout:g}s  "
            f"({_shown(spec.source, 200)})" for spec in specs]
