"""What a child process (a subagent, an MCP server) said about a failure: masked, bounded, inert, host-side only.

A diagnostic line is built from closed facts (agent_loop/subagent/diagnostics.py, agent_loop/mcp/diagnostics.py);
the child's own words (an error message, the first and last lines of its stderr) are kept beside it for the user
alone: dsh.log and ``/why`` (docs/subagents.md, "The agent's own words"). Never part of anything the model sees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError

__all__ = [
    "STDERR_HEAD_BYTES",
    "STDERR_HEAD_LINES",
    "STDERR_TAIL_BYTES",
    "STDERR_TAIL_LINES",
    "WORDS_LIMIT_BYTES",
    "AgentWords",
    "ChildFailure",
    "stderr_head",
    "stderr_tail",
    "words_text",
]

# The agent's own words about a failure (host-side only): each piece at most this many UTF-8 bytes, and the
# tail of its stderr at most so many lines and bytes, and the head the tail does not hold (the reason an agent
# gave before a long usage text or trace) at most so many (docs/subagents.md, "The agent's own words").
WORDS_LIMIT_BYTES = 2048
STDERR_TAIL_LINES = 20
STDERR_TAIL_BYTES = 4096
STDERR_HEAD_LINES = 5
STDERR_HEAD_BYTES = 2048
_WORDS_CUT = " […]"
# C0/C1 controls but tab, and the bidi controls: escaped in the kept words, so dsh.log (read with any
# viewer) and the screen show them inert.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _inert(text: str) -> str:
    return _CONTROLS.sub(_escaped, text)


def _head(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` UTF-8 bytes, marked when cut."""
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return text
    room = limit - len(_WORDS_CUT.encode("utf-8"))
    return encoded[:room].decode("utf-8", "ignore") + _WORDS_CUT


def _kept_lines(lines: Iterable[str], count: int, limit: int) -> list[str]:
    """The first non-blank ``lines``, inert: at most ``count`` lines and ``limit`` bytes, each line cut to
    :data:`WORDS_LIMIT_BYTES`."""
    kept: list[str] = []
    size = 0
    for line in lines:
        if not line.strip():
            continue
        line = _head(_inert(line.rstrip()), WORDS_LIMIT_BYTES)
        size += len(line.encode("utf-8", "replace")) + 1
        if len(kept) == count or size > limit:
            break
        kept.append(line)
    return kept


def stderr_tail(text: str) -> tuple[str, ...]:
    """The last non-blank lines of a child's stderr: at most :data:`STDERR_TAIL_LINES` lines and
    :data:`STDERR_TAIL_BYTES` bytes, each line cut to :data:`WORDS_LIMIT_BYTES`."""
    return tuple(reversed(_kept_lines(reversed(text.splitlines()), STDERR_TAIL_LINES, STDERR_TAIL_BYTES)))


def stderr_head(text: str, *, before: int | None = None) -> tuple[str, ...]:
    """The first non-blank lines of a child's stderr: at most :data:`STDERR_HEAD_LINES` lines and
    :data:`STDERR_HEAD_BYTES` bytes (each line cut to :data:`WORDS_LIMIT_BYTES`), and of ``text``'s non-blank
    lines only the first ``before`` (those a tail of the same text does not show)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return tuple(_kept_lines(lines[:before], STDERR_HEAD_LINES, STDERR_HEAD_BYTES))


def words_text(value: object) -> str:
    """A piece of the agent's words as text: a string as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


@dataclass(frozen=True, slots=True)
class AgentWords:
    """What the agent itself said about a failure, masked and bounded: host-side only (dsh.log, ``/why``).

    ``said`` is ``(label, text)`` pairs (an error's message and data, Codex's message and
    ``codexErrorInfo``); ``stderr`` the last lines of the child's stderr, ``stderr_head`` its first lines when
    the last ones do not hold them. Never part of a diagnostic.
    """

    said: tuple[tuple[str, str], ...] = ()
    stderr: tuple[str, ...] = ()
    stderr_head: tuple[str, ...] = ()

    @classmethod
    def gather(
        cls, said: tuple[tuple[str, object], ...], stderr: str, mask: Callable[[str], str]
    ) -> AgentWords:
        """Mask each piece with the run's redactor, then bound it (masking first: a cut never leaves half a secret).

        ``stderr`` is the child's in whole lines (``ManagedProcess.stderr_lines``): its last lines, and the first
        of those before them."""
        pieces = tuple((label, _head(_inert(mask(words_text(value))), WORDS_LIMIT_BYTES)) for label, value in said)
        masked = mask(stderr)
        tail = stderr_tail(masked)
        before = sum(1 for line in masked.splitlines() if line.strip()) - len(tail)
        return cls(pieces, tail, stderr_head(masked, before=before))

    def __bool__(self) -> bool:
        return bool(self.said or self.stderr or self.stderr_head)

    def lines(self, speaker: str = "agent") -> list[str]:
        """The words as display lines (the front end sanitizes them on the way out); ``speaker`` names the
        child (``agent``, ``server``)."""
        if not self:
            return []
        lines = [f"the {speaker}'s own words (host-side only, masked):"]
        lines += [f"  {label}: {text}" for label, text in self.said]
        if self.stderr_head:
            count = len(self.stderr_head)
            lines.append(f"  stderr (first {count} line{'s' if count != 1 else ''}):")
            lines += [f"    {line}" for line in self.stderr_head]
        if self.stderr:
            count = len(self.stderr)
            lines.append(f"  stderr (last {count} line{'s' if count != 1 else ''}):")
            lines += [f"    {line}" for line in self.stderr]
        return lines


class ChildFailure(HarnessError):
    """``/why``'s record of what a child (a subagent run, an MCP server) failed at: its diagnostic line as
    the message, ``words`` what the child said, masked and bounded; the raw cause beneath it in the chain.
    Host-side only; front ends show :meth:`word_lines` under the chain."""

    code_name: ErrorCode = ErrorCode.SUBAGENT
    speaker = "agent"

    def __init__(self, line: str, words: AgentWords, cause: BaseException | None = None) -> None:
        super().__init__(line, self.code_name, cause=cause)
        self.words = words

    def word_lines(self) -> list[str]:
        return self.words.lines(self.speaker)
