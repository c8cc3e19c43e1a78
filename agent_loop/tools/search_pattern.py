"""The patterns of the search tools: a glob as a regular expression, and a fast way to the lines a regex matches.

:func:`glob_regex` translates glob syntax (not gitignore's): ``**`` as a whole path segment crosses folders, ``*``
and ``?`` stay inside one, ``[abc]``/``[!abc]`` are classes, ``{a,b}`` alternatives. A :class:`LineFinder` gives
the lines of a text a Python regular expression matches, each line on its own (as grep sees them), without a
Python loop over every line: a literal every match must hold (the rarest of them) is looked for in the file's
bytes, else the pattern runs over the whole decoded text, and only the lines a hit lands on are decoded and tried.
docs/tools.md, "Search: glob and search_text"; docs/performance.md, ``search_vs_rg``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import AnyStr

__all__ = ["LineFinder", "glob_regex", "required_literal", "required_literals", "required_runs"]

_SPECIAL = frozenset(".^$*+?{}[]\\|()")
_QUANTIFIER = re.compile(r"\*|\+|\?|\{\d*(?:,\d*)?\}")
# A flag group ((?i), (?x), (?-m:...)) can change what every character means: no literal is read past one.
_FLAG_GROUP = re.compile(r"\(\?[aiLmsux-]")
# What a line can match on its own but the whole text cannot at the same place (its start and end are the
# line's there, a negative look sees the next line): such a pattern is tried line by line.
_LINE_BOUND = re.compile(r"\\[AZ]|\(\?<?!|\(\?\(|\(\?[aiLmsux]*-")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` (glob syntax, ``/``-separated, relative) as a regular expression to ``fullmatch`` a path."""
    return re.compile(_translate(pattern, 0, len(pattern)), re.DOTALL)


def _translate(pattern: str, start: int, end: int) -> str:
    out: list[str] = []
    i = start
    while i < end:
        char = pattern[i]
        if pattern.startswith("**", i) and (i == start or pattern[i - 1] == "/"):
            after = i + 2
            if after == end:
                out.append(".*")
                i = after
                continue
            if pattern[after] == "/":
                out.append("(?:[^/]*/)*")  # none or more whole folders
                i = after + 1
                continue
        if char == "*":
            out.append("[^/]*")
            while i + 1 < end and pattern[i + 1] == "*":
                i += 1
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := _class_end(pattern, i, end)) > 0:
            body = pattern[i + 1 : close]
            negated = body[:1] in ("!", "^")
            body = body[1:] if negated else body
            members = "".join("\\" + c if c in "\\[]^" else c for c in body)
            out.append("[" + ("^/" if negated else "") + members + "]")
            if not negated:
                out.append("(?<!/)")  # a class never matches the separator
            i = close
        elif char == "{" and (parts := _brace_parts(pattern, i, end)) is not None:
            choices = [_translate(pattern, a, b) for a, b in parts[0]]
            out.append("(?:" + "|".join(choices) + ")")
            i = parts[1]
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _class_end(pattern: str, start: int, end: int) -> int:
    """Where the class opened at ``start`` closes (its ``]``), or -1 when it does not (a plain ``[``)."""
    i = start + 1
    if i < end and pattern[i] in "!^":
        i += 1
    if i < end and pattern[i] == "]":  # a leading ] is a member
        i += 1
    while i < end and pattern[i] != "]":
        if pattern[i] == "/":
            return -1
        i += 1
    return i if i < end else -1


def _brace_parts(pattern: str, start: int, end: int) -> tuple[list[tuple[int, int]], int] | None:
    """The alternatives of the ``{a,b}`` opened at ``start`` (spans) and where it closes; None when it is plain."""
    depth = 0
    parts: list[tuple[int, int]] = []
    begin = start + 1
    for i in range(start, end):
        char = pattern[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                parts.append((begin, i))
                return (parts, i) if len(parts) > 1 else None
        elif char == "," and depth == 1:
            parts.append((begin, i))
            begin = i + 1
    return None


def required_literals(source: str) -> tuple[tuple[str, ...], ...]:
    """What every match of ``source`` holds: all the literals of at least one of these groups, one group per
    alternative of a top-level ``a|b`` (or of one group around the whole pattern); ``()`` when some alternative
    holds none for sure."""
    if _FLAG_GROUP.search(source):
        return ()
    inner = _unwrapped(source)
    if inner is not None:
        return required_literals(inner)
    branches: list[str] = []
    begin = i = 0
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if char in "[(":
            i = _skip_class(source, i) if char == "[" else _skip_group(source, i)
            if i < 0:
                return ()
            continue
        if char == "|":
            branches.append(source[begin:i])
            begin = i + 1
        i += 1
    branches.append(source[begin:])
    runs = tuple(tuple(dict.fromkeys(required_runs(branch))) for branch in branches)
    return () if () in runs else tuple(dict.fromkeys(runs))


def _unwrapped(source: str) -> str | None:
    """What one capturing, non-capturing or named group around the whole of ``source`` holds, else None."""
    if not source.startswith("(") or _skip_group(source, 0) != len(source):
        return None
    if not source.startswith("(?"):
        return source[1:-1]
    if source.startswith("(?:"):
        return source[3:-1]
    if source.startswith("(?P<") and (close := source.find(">")) > 0:
        return source[close + 1 : -1]
    return None  # a look-around


def required_literal(source: str) -> str:
    """The longest run of plain characters every match of ``source`` holds; ``""`` when none is sure."""
    return max(required_runs(source), key=len, default="")


def required_runs(source: str) -> list[str]:
    """The runs of plain characters every match of the regular expression ``source`` holds (a branch of no
    top-level alternation). Conservative: an alternation, a flag group or an escape it does not know ends it."""
    if _FLAG_GROUP.search(source):
        return []
    runs: list[str] = []
    run = ""
    i = 0
    while i < len(source):
        char = source[i]
        if char == "|":
            return []  # an alternation at the top: no one piece is required
        if char == "\\":
            if i + 1 >= len(source) or source[i + 1].isalnum():
                if source[i + 1 : i + 2] not in tuple("bBdDsSwWAZ"):
                    break  # \x41, \n, \1 ...: not read further
                token_end, literal = i + 2, ""
            else:
                token_end, literal = i + 2, source[i + 1]
        elif char in _SPECIAL:
            token_end = _token_end(source, i)
            if token_end < 0:
                break
            literal = ""
        else:
            token_end, literal = i + 1, char
        quantifier = _QUANTIFIER.match(source, token_end)
        if quantifier and literal and quantifier.group() == "+":
            run += literal  # once at least: it still counts, and ends the run
            literal = ""
        if not literal or quantifier:
            runs.append(run)
            run = ""
        else:
            run += literal
        i = quantifier.end() if quantifier else token_end
        if quantifier and source[i : i + 1] in ("?", "+"):
            i += 1  # lazy or possessive
    return [piece for piece in (*runs, run) if piece]


def _token_end(source: str, start: int) -> int:
    """Where the special token at ``start`` ends: ``.``, ``^``, ``$``, a class, a whole group; -1 if unsure."""
    char = source[start]
    if char in ".^$":
        return start + 1
    if char == "[":
        return _skip_class(source, start)
    if char == "(":
        return _skip_group(source, start)
    return -1  # a quantifier with nothing before it, a stray ) or }


def _skip_class(source: str, start: int) -> int:
    i = start + 1
    if source[i : i + 1] == "^":
        i += 1
    if source[i : i + 1] == "]":
        i += 1
    while i < len(source):
        if source[i] == "\\":
            i += 2
            continue
        if source[i] == "]":
            return i + 1
        i += 1
    return -1


def _skip_group(source: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(source):
        char = source[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _skip_class(source, i)
            if i < 0:
                return -1
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


# A needle this short is looked for with a compiled pattern: re scans for its first byte in a tight loop, which
# beat bytes.find's skip table on short needles (`TODO` in 130 MB of files: 38 ms against 64; docs/performance.md).
_SHORT_NEEDLE = 8
_COMMON = frozenset(b" \t\netaoinsrlcdhupm_")  # the most frequent bytes of source code: a literal of them is rarer


def _rarity(literal: str) -> tuple[float, int]:
    """Sorts the literal least likely in a file first: fewer common bytes, then longer."""
    data = literal.encode("utf-8", "surrogatepass")
    return sum(byte in _COMMON for byte in data) / len(data), -len(data)


def _seeker(needle: bytes) -> Callable[[bytes, int], int]:
    """Where ``needle`` is next in a text at or after a place, or -1: ``bytes.find`` with the faster scan."""
    if len(needle) > _SHORT_NEEDLE:
        return lambda data, pos: data.find(needle, pos)
    search = re.compile(re.escape(needle)).search

    def seek(data: bytes, pos: int) -> int:
        found = search(data, pos)
        return -1 if found is None else found.start()

    return seek


@dataclass(frozen=True, slots=True)
class LineFinder:
    """The lines a regular expression matches, each tried on its own (split at ``\\n`` only)."""

    pattern: re.Pattern[str]  # run on one line
    whole: re.Pattern[str] | None  # the same, multi-line, run on the whole text to find candidates
    # A match holds every literal of one of them, the rarest first (_rarity: the first is what candidate lines
    # are found by); () when none is known.
    branches: tuple[tuple[str, ...], ...]
    needles: tuple[tuple[bytes, ...], ...]  # the same in UTF-8, looked for before a file is decoded
    seekers: tuple[tuple[Callable[[bytes, int], int], ...], ...]  # the needles' finders (_seeker)
    folded: bool  # ignoring case: the literals are lower-case ASCII, looked for in the text folded (_folded)
    # Ignoring case, what a file that is not ASCII must hold lower-cased: the longest piece of each literal
    # without the letters a non-ASCII letter can match (i, s, k), which only ASCII letters match.
    fragments: tuple[tuple[bytes, ...], ...]

    @classmethod
    def of(cls, source: str, flags: int = 0) -> LineFinder:
        """Raises ``re.error`` for a pattern Python cannot compile."""
        pattern = re.compile(source, flags)
        branches = required_literals(source)
        folded = bool(flags & re.IGNORECASE)
        if folded:
            ascii_only = all(literal.isascii() for branch in branches for literal in branch)
            branches = tuple(tuple(literal.lower() for literal in branch) for branch in branches) if ascii_only else ()
        if any("\ufffd" in literal for branch in branches for literal in branch):
            branches = ()  # U+FFFD may stand for bytes that are not UTF-8: the bytes cannot be looked for
        branches = tuple(tuple(sorted(branch, key=_rarity)) for branch in branches)
        needles = tuple(tuple(literal.encode("utf-8", "surrogatepass") for literal in branch) for branch in branches)
        seekers = tuple(tuple(_seeker(needle) for needle in branch) for branch in needles)
        fragments = tuple(tuple(max(re.split("[isk]", literal), key=len).encode() for literal in branch)
                          for branch in branches) if folded else ()
        whole = None if _LINE_BOUND.search(source) else re.compile(source, flags | re.MULTILINE)
        return cls(pattern, whole, branches, needles, seekers, folded, fragments)

    def may_match(self, data: bytes) -> bool:
        """False when the file's bytes cannot hold a match (no branch has all its literals in them)."""
        if not self.needles:
            return True
        if not self.folded:
            return any(all(seek(data, 0) >= 0 for seek in branch) for branch in self.seekers)
        needles = self.needles if data.isascii() else self.fragments  # the rest is looked for in the text (lines)
        data = data.lower()  # ASCII letters only
        return any(all(needle in data for needle in branch) for branch in needles)

    def found(self, data: bytes) -> Iterator[tuple[int, str, re.Match[str]]]:
        """:meth:`lines` of a file's bytes decoded as UTF-8 (U+FFFD for bad bytes). Case kept, a literal's lines
        are found in the bytes and only they are decoded: a line decodes alone as it does in the whole, since no
        bad sequence swallows a ``\\n`` and a literal's UTF-8 bytes decode to it wherever they stand."""
        if not self.may_match(data):
            return
        if self.folded or not self.seekers:
            yield from self.lines(data.decode("utf-8", "replace"))
            return
        seeks = tuple(branch[0] for branch in self.seekers)
        yield from self._walk(data, b"\n", _next_hit(data, seeks), _decoded)

    def lines(self, text: str) -> Iterator[tuple[int, str, re.Match[str]]]:
        """(line number from 1, the line, its match) for each line of ``text`` the pattern matches."""
        haystack = _folded(text) if self.folded and self.branches else text  # the same length, the same places
        if haystack is not text and not text.isascii() and not any(
                all(literal in haystack for literal in branch) for branch in self.branches):
            return  # ignoring case, a file that is not ASCII is looked at here, not in its bytes
        if self.branches:
            seeks = tuple(_str_seeker(branch[0]) for branch in self.branches)
            yield from self._walk(text, "\n", _next_hit(haystack, seeks), str)
        elif (whole := self.whole) is not None:
            def next_match(pos: int) -> int:
                found = whole.search(text, pos)
                return -1 if found is None else found.start()

            yield from self._walk(text, "\n", next_match, str)
        else:
            yield from self._walk(text, "\n", lambda pos: pos, str)  # every line is a candidate

    def _walk(self, text: AnyStr, newline: AnyStr, next_hit: Callable[[int], int],
              decode: Callable[[AnyStr], str]) -> Iterator[tuple[int, str, re.Match[str]]]:
        """The matching lines among those ``next_hit`` lands on (the place of the next candidate at or after a
        place, -1 for none); each line is decoded and searched on its own."""
        number, counted, pos, size = 1, 0, 0, len(text)
        while pos < size:
            hit = next_hit(pos)
            if hit < 0 or (hit == size and text.endswith(newline)):  # none, or past the last line
                return
            start = max(pos, text.rfind(newline, pos, hit) + 1)  # pos starts a line
            end = text.find(newline, hit)
            end = size if end < 0 else end
            line = decode(text[start:end])
            match = self.pattern.search(line)
            if match is not None:
                number += text.count(newline, counted, start)
                counted = start
                yield number, line, match
            pos = end + 1


def _decoded(line: bytes) -> str:
    return line.decode("utf-8", "replace")


def _str_seeker(literal: str) -> Callable[[str, int], int]:
    return lambda text, pos: text.find(literal, pos)


def _next_hit(text: AnyStr, seeks: tuple[Callable[[AnyStr, int], int], ...]) -> Callable[[int], int]:
    """Where the next of several literals is, at or after a place: each one looked for again only once passed."""
    if len(seeks) == 1:
        seek = seeks[0]
        return lambda pos: seek(text, pos)
    ahead = [-1] * len(seeks)  # where each literal is next (-1: not looked for yet, -2: no more of it)

    def next_hit(pos: int) -> int:
        for index, seek in enumerate(seeks):
            if ahead[index] != -2 and ahead[index] < pos:
                found = seek(text, pos)
                ahead[index] = -2 if found < 0 else found
        return min((found for found in ahead if found >= 0), default=-1)

    return next_hit


# The letters that match an ASCII one ignoring case (re.IGNORECASE) without lower() making them it: İ and ı (i),
# ſ (s). With them replaced, lower() keeps the length (İ was the one letter it made two) and makes every letter
# that matches an ASCII letter that letter (the Kelvin sign K becomes k). str.replace is C; translate is not.
_FOLD_FIXES = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"))


def _folded(text: str) -> str:
    """``text`` case-folded for looking up lower-case ASCII literals: the same length, the same places."""
    if not text.isascii():
        for letter, ascii_letter in _FOLD_FIXES:
            text = text.replace(letter, ascii_letter)
    return text.lower()
