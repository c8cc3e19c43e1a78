"""Exporting a conversation: ``/export [FILE]`` and ``dsh sessions export ID`` (docs/prompt.md, "Export").

A session log is read once (:func:`~dsh.agent_loop.session_read.load_session_file`) into turns shaped for
people: the prompt, the answer, the tool calls with their arguments, the tool results as the REPL previews
them, the turn-end and fix lines as the REPL prints them, and each turn's usage. Every text is masked like
the failure capsule (the session's secrets and the secret shapes: docs/reporting.md) and made inert
(:func:`~dsh.repl.sanitize.sanitize`: escapes, bidi overrides and lone surrogates become visible pictures)
as it is read, so no format can carry either. :mod:`dsh.repl.export_formats` writes md, json or html.

The file is written as ``/report``'s is, never through a symbolic link and only as a regular file: a new
0600 file beside it, renamed over the name (:func:`~dsh.agent_loop.safe_open.replace_in`).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from dsh.agent_loop.events import (
    AssistantMessage,
    StepStart,
    ToolCallStart,
    ToolResult,
    TurnEnd,
    TurnStart,
    from_wire,
)
from dsh.agent_loop.safe_open import replace_in
from dsh.agent_loop.session_read import load_session_file, read_header
from dsh.agent_loop.usage import UsageTally
from dsh.llm.lines import LongLine
from dsh.llm.redact import environment_secrets, redact_text
from dsh.llm.wire_trace import TraceFileError, not_regular
from dsh.repl.config import ConfigError, load_config
from dsh.repl.renderer import Renderer
from dsh.repl.sanitize import sanitize
from dsh.repl.turn_end import fix_line, turn_end_line
from dsh.repl.usage import usage_line

__all__ = ["FORMATS", "Conversation", "Item", "Turn", "default_path", "export_format", "read_conversation",
           "write_export"]

FORMATS = ("md", "json", "html")
# Tool-call arguments beyond this are cut (one line says so): a write_file's whole content is not the point.
ARGUMENTS_LIMIT = 4000
# The longest record read (as `dsh sessions show`: docs/configuration.md, sessions); a longer one is a line.
RECORD_LIMIT = 16 << 20


class ItemKind(StrEnum):
    """What one thing a turn showed is (its JSON ``type``)."""

    ANSWER = "answer"
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    NOTE = "note"


@dataclass(slots=True)
class Item:
    """One thing a turn showed."""

    kind: ItemKind
    text: str
    name: str = ""  # the tool's, for a call or a result
    error: bool = False  # a tool result that failed


@dataclass(slots=True)
class Turn:
    number: int
    prompt: str
    notice: bool = False  # a turn that delivered background job notices, not a prompt
    items: list[Item] = field(default_factory=list)
    end: list[str] = field(default_factory=list)  # the turn-end line and its fix line, when the REPL printed any
    tally: UsageTally = field(default_factory=UsageTally)

    @property
    def usage(self) -> str | None:
        """The REPL's usage line (``/cost``'s words) for this turn's requests; None when it made none."""
        return usage_line(self.tally) if self.tally.requests else None


@dataclass(slots=True)
class Conversation:
    id: str
    project: str
    created: str
    turns: list[Turn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # records not shown (too long), load warnings
    reasoning: bool = False  # whether the reasoning was kept
    reasoning_omitted: int = 0  # characters of reasoning left out (the default)


class _Reader:
    """Hears each record of a log in order and builds the :class:`Conversation`."""

    def __init__(self, conversation: Conversation, secrets: Sequence[str], reasoning: bool) -> None:
        self.conversation = conversation
        self.secrets = tuple(secret for secret in secrets if secret)
        self.reasoning = reasoning
        self.turn: Turn | None = None

    def clean(self, text: str) -> str:
        return sanitize(redact_text(text, self.secrets))

    def _current(self) -> Turn:
        if self.turn is None:  # records before any turn (a log that lost its first turn/start)
            self.turn = Turn(0, "")
            self.conversation.turns.append(self.turn)
        return self.turn

    def __call__(self, record: dict[str, Any]) -> None:
        if not isinstance(record.get("data"), dict):
            return
        event = from_wire(record)
        if isinstance(event, TurnStart):
            # An image is its placeholder (name, type, size, hash), never its bytes (docs/prompt.md, "Images").
            prompt = "\n".join([event.prompt, *(image.placeholder for image in event.images or ())])
            self.turn = Turn(event.turn, self.clean(prompt), notice=event.source == "notice")
            self.conversation.turns.append(self.turn)
            return
        turn = self._current()
        if isinstance(event, AssistantMessage):
            self._message(turn, event, record.get("time"))
        elif isinstance(event, ToolCallStart):
            arguments = event.arguments
            if len(arguments) > ARGUMENTS_LIMIT:
                arguments = arguments[:ARGUMENTS_LIMIT] + f"… (cut: {len(event.arguments):,} characters in all)"
            turn.items.append(Item(ItemKind.TOOL_CALL, self.clean(arguments), name=self.clean(event.name)))
        elif isinstance(event, ToolResult):
            shown = self._rendered(event).strip("\n")  # the REPL's preview: first lines, each cut, a count
            turn.items.append(Item(ItemKind.TOOL_RESULT, shown, name=self.clean(event.name), error=event.is_error))
        elif isinstance(event, TurnEnd):
            line = turn_end_line(event.reason, self.secrets)
            fix = fix_line(event.reason)
            turn.end = [self.clean(text) for text in (line, fix) if text]
        elif not isinstance(event, StepStart):
            note = self._rendered(event).strip()
            if note:
                turn.items.append(Item(ItemKind.NOTE, note))

    def _message(self, turn: Turn, event: AssistantMessage, when: object) -> None:
        if event.reasoning_content:
            if self.reasoning:
                turn.items.append(Item(ItemKind.REASONING, self.clean(event.reasoning_content)))
            else:
                self.conversation.reasoning_omitted += len(event.reasoning_content)
        if event.content:
            turn.items.append(Item(ItemKind.ANSWER, self.clean(event.content)))
        try:
            at = _dt.datetime.fromisoformat(str(when).replace("Z", "+00:00"))
        except ValueError:
            at = _dt.datetime.now(_dt.UTC)
        turn.tally.add(event.usage, "", None, at)  # no price: the log does not say which model answered

    def _rendered(self, event: Any) -> str:
        """The event as the REPL draws it, plain: a fresh renderer, so no earlier line shifts it."""
        return self.clean(Renderer(color=False, secrets=self.secrets).render(event))

    def long_record(self, line: LongLine) -> None:
        kind = line.field("type")
        self.conversation.notes.append(f"a {kind + ' ' if kind else ''}record of {line.size / 1e6:.1f} MB not shown")


def read_conversation(path: Path, secrets: Sequence[str], *, reasoning: bool = False) -> Conversation:
    """The log at ``path`` as turns, masked with ``secrets`` (and the shapes); SessionLogError when unreadable."""
    header = read_header(path)
    conversation = Conversation(str(header.get("id") or path.stem), str(header.get("project") or ""),
                                str(header.get("createdAt") or ""), reasoning=reasoning)
    reader = _Reader(conversation, secrets, reasoning)
    conversation.id, conversation.project, conversation.created = (
        reader.clean(conversation.id), reader.clean(conversation.project), reader.clean(conversation.created))
    _, _, warnings = load_session_file(path, on_record=reader, max_record=RECORD_LIMIT, on_long=reader.long_record)
    conversation.notes.extend(reader.clean(warning) for warning in warnings[:3])
    return conversation


def export_format(path: str) -> str:
    """The format a file name asks for: ``.json``, ``.html``/``.htm``, else Markdown."""
    suffix = os.path.splitext(path)[1].lower()
    return {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "md")


def default_path(state: Path, session_id: str, fmt: str = "md") -> Path:
    """``<state dir>/exports/<id>-<UTC time>.md``: one a second, never a name someone else chose."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return state / "exports" / f"{session_id}-{stamp}.{fmt}"


def write_export(path: str, data: bytes, *, make_parent: bool = False) -> None:
    """``data`` to ``path``, 0600, at once: a temporary file beside it renamed over it, never through a link.

    An existing regular file is replaced whole; a symbolic link, a FIFO or a directory there is refused
    (:class:`~dsh.llm.wire_trace.TraceFileError`: ``export file PATH cannot be written: it is a symbolic
    link, not a regular file``), as ``/report`` refuses it (docs/reporting.md).
    """
    problem = not_regular(path)
    if problem is not None:
        raise TraceFileError(path, problem, "export")
    parent, name = os.path.split(os.path.abspath(path))
    try:
        if make_parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        directory = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise TraceFileError(path, exc.strerror or type(exc).__name__, "export") from None
    try:
        replace_in(directory, name, data, mode=0o600)  # a rename replaces a link swapped in, never follows it
    except OSError as exc:
        raise TraceFileError(path, exc.strerror or type(exc).__name__, "export") from None
    finally:
        os.close(directory)


def session_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """What ``dsh sessions export`` masks: every secret the configuration knows (the capsule's:
    docs/reporting.md), or, when it cannot be read, the key and the environment's secret-looking variables."""
    try:
        return load_config({}, env, require_key=False).secrets
    except ConfigError:
        found = (env.get("DEEPSEEK_API_KEY", "").strip(), *environment_secrets(env))
        return tuple(dict.fromkeys(secret for secret in found if secret))
