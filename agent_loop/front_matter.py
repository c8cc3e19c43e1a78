"""The front matter of a skill or a custom command: the small, strict subset of YAML those files use.

A ``SKILL.md`` (Agent Skills) or a command file (Claude Code's ``.claude/commands/NAME.md``) may start with a
block between two ``---`` lines. What is read there (docs/extending.md, "Front matter"):

- ``key: value`` lines, a value plain, ``"double-quoted"`` (JSON's escapes) or ``'single-quoted'`` (``''`` is a
  quote), a trailing `` # comment`` after a plain value, blank and comment lines;
- a ``|`` or ``>`` block scalar (with ``-`` or ``+`` chomping) on the indented lines that follow;
- a key with nothing after it, then indented ``- item`` lines (a list) or ``key: value`` lines (one level of
  mapping, as the spec's ``metadata``); a ``[a, b]`` flow list on one line.

Anything else (anchors, tags, flow mappings, a quoted string over several lines, a key given twice, tabs for
indentation) is refused with :class:`FrontMatterError`, whose text names the line: the file is then skipped
with one line, instead of being read in a way its author did not mean. No YAML library is imported: the first
prompt does not wait for one, and a hostile file gets no more than this (docs/architecture.md, "House rules").
"""

from __future__ import annotations

import json
import re
import unicodedata

from dsh.llm.text import scrub_surrogates

__all__ = ["FrontMatter", "FrontMatterError", "fold_line", "split_front_matter"]

Value = str | list[str] | dict[str, str]
FrontMatter = dict[str, Value]

_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*)|)$")
_BLOCK = re.compile(r"([|>])([+-]?)$")
_FENCE = "---"


class FrontMatterError(ValueError):
    """Front matter this reader does not accept; the text says where and why (``line 3: ...``)."""


def split_front_matter(text: str) -> tuple[FrontMatter, str]:
    """The front matter of ``text`` and the body after it; ``({}, text)`` when it has none.

    Raises :class:`FrontMatterError` when the block is not closed or a line is outside the subset.
    """
    lines = text.lstrip("\ufeff").split("\n")
    if lines[0].rstrip("\r") != _FENCE:
        return {}, text
    for end in range(1, len(lines)):
        if lines[end].rstrip("\r") in (_FENCE, "..."):
            break
    else:
        raise FrontMatterError("it has no closing '---' line")
    block = [line.rstrip("\r") for line in lines[1:end]]
    return _Parser(block).parse(), "\n".join(lines[end + 1:])


class _Parser:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0  # the next line to read
        self.key_at = 0  # the line of the key being read

    def fail(self, why: str, at: int | None = None) -> FrontMatterError:
        line = self.key_at if at is None else at
        return FrontMatterError(f"line {line + 2}: {why}")  # +2: the opening fence is line 1

    def parse(self) -> FrontMatter:
        out: FrontMatter = {}
        while self.at < len(self.lines):
            line = self.lines[self.at]
            if not line.strip() or line.lstrip().startswith("#"):
                self.at += 1
                continue
            self.key_at = self.at
            if line[0] in " \t":
                raise self.fail("an indented line where a 'key: value' line was expected")
            match = _KEY.match(line)
            if match is None:
                raise self.fail("not a 'key: value' line")
            key, rest = match.group(1), (match.group(2) or "").strip()
            if key in out:
                raise self.fail(f"the key {key!r} is given twice")
            self.at += 1
            out[key] = self.value(rest)
        return out

    def value(self, rest: str) -> Value:
        block = _BLOCK.match(rest)
        if block is not None:
            return self.block_scalar(block.group(1), block.group(2))
        if not rest or rest.startswith("#"):
            return self.nested()
        return self.scalar(rest)

    def scalar(self, rest: str) -> str | list[str]:
        if rest.startswith('"'):
            try:
                value = json.loads(rest)
            except ValueError:
                value = None
            if not isinstance(value, str):
                raise self.fail("a double-quoted string that does not end on its line")
            return scrub_surrogates(value)  # "\ud800" is valid JSON
        if rest.startswith("'"):
            if len(rest) < 2 or not rest.endswith("'") or "'" in rest[1:-1].replace("''", ""):
                raise self.fail("a single-quoted string that does not end on its line")
            return rest[1:-1].replace("''", "'")
        if rest.startswith("["):
            if not rest.endswith("]"):
                raise self.fail("a '[' list that does not end on its line")
            items = [item.strip() for item in rest[1:-1].split(",") if item.strip()]
            return [str(self.scalar(item)) for item in items]
        if rest[0] in "{&*!%@`":
            raise self.fail(f"a value starting with {rest[0]!r} (flow mappings, anchors and tags are not read)")
        return rest.split(" #", 1)[0].rstrip()

    def indented(self) -> list[str]:
        """The indented (or blank) lines from here on; blank ones at the end are left for the caller."""
        taken: list[str] = []
        while self.at < len(self.lines):
            line = self.lines[self.at]
            if line.strip() and line[0] not in " \t":
                break
            if line.strip() and line.lstrip(" ")[:1] == "\t":
                raise self.fail("a tab in the indentation", self.at)
            taken.append(line)
            self.at += 1
        while taken and not taken[-1].strip():
            taken.pop()
            self.at -= 1
        return taken

    def block_scalar(self, style: str, chomp: str) -> str:
        lines = self.indented()
        if not lines:
            return ""
        indent = min(len(line) - len(line.lstrip(" ")) for line in lines if line.strip())
        body = [line[indent:] for line in lines]
        if style == "|":
            text = "\n".join(body)
        else:  # folded: lines of a paragraph joined by a space, a blank line a line break
            text = "\n".join(" ".join(part.split("\n")) for part in "\n".join(body).split("\n\n"))
        return text if chomp == "-" else text + "\n"

    def nested(self) -> Value:
        start = self.at
        lines = [(start + offset, line.strip()) for offset, line in enumerate(self.indented())
                 if line.strip() and not line.strip().startswith("#")]
        if not lines:
            return ""  # "key:" alone is YAML's null: read as empty
        if all(line.startswith("- ") or line == "-" for _, line in lines):
            return [str(self.scalar(line[2:].strip())) if line != "-" else "" for _, line in lines]
        mapping: dict[str, str] = {}
        for at, line in lines:
            match = _KEY.match(line)
            if match is None or not match.group(2):
                raise self.fail("an indented line that is neither '- item' nor 'key: value'", at)
            mapping[match.group(1)] = str(self.scalar(match.group(2).strip()))
        return mapping


# Characters that would break a line or drive a terminal (Unicode categories: controls, format characters,
# line and paragraph separators, surrogates, private use): a space each, before the line is folded.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def fold_line(text: str, limit: int) -> str:
    """``text`` as one safe line of at most ``limit`` characters: every control, format or separator character
    a space, runs of blanks one space, cut with ``…``. What a name or a description is before it reaches the
    system prompt or the screen (the screen's sink sanitizes again: docs/architecture.md, "Hostile text")."""
    if text.isascii():
        text = _ASCII_CONTROL.sub(" ", text)
    else:
        text = "".join(" " if unicodedata.category(char) in _UNSAFE_CATEGORIES else char for char in text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
