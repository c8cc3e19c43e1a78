"""Fenced code highlighted by pygments: one :class:`CodeHighlighter` per allow-listed language.

:mod:`dsh.repl.markdown` loads this module at the first fence in a language of its
``HIGHLIGHTED_LANGUAGES``, so the first prompt does not pay for pygments (docs/markdown.md).
"""

from __future__ import annotations

import functools
from typing import Any

from pygments import token as t
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

__all__ = ["CodeHighlighter", "highlighter"]


class CodeHighlighter:
    """One language's lexer, and the styled segments it makes of a line."""

    def __init__(self, lexer: Any) -> None:
        self._lexer = lexer

    def segments(self, text: str) -> list[tuple[str, str | None]] | None:
        """The line's tokens as styled segments, or None: the lexer found a character it cannot read.

        Giving up at the first error token is what bounds the cost of junk: an error is a position where every
        rule of the lexer was tried and failed, the most expensive step there is (docs/markdown.md).
        """
        segments: list[tuple[str, str | None]] = []
        for token, value in self._lexer.get_tokens(text):
            if token in t.Error:
                return None
            value = value.rstrip("\n")  # the newline pygments added (a ``\r`` it turned into one fails below)
            if value:
                segments.append((value, _token_style(token)))
        return segments if "".join(value for value, _ in segments) == text else None


@functools.cache
def highlighter(name: str) -> CodeHighlighter | None:
    """The highlighter for the pygments alias ``name``; one instance per language: a lexer keeps only its
    options, so fences and replies can share it."""
    options = {"startinline": True} if name == "php" else {}  # a PHP block without ``<?php`` is PHP
    try:
        # The newline pygments appends lets line-based rules (a diff's ``+``, a C ``//`` comment) match.
        return CodeHighlighter(get_lexer_by_name(name, stripnl=False, ensurenl=True, **options))
    except ClassNotFound:  # pragma: no cover - every name in HIGHLIGHTED_LANGUAGES is a pygments alias
        return None


def _token_style(token: Any) -> str | None:
    if token in t.Comment:
        return "syn-comment"
    if token in t.Keyword:
        return "syn-keyword"
    if token in t.String:
        return "syn-string"
    if token in t.Number:
        return "syn-number"
    if token in t.Name.Builtin:
        return "syn-builtin"
    if token in t.Name.Function or token in t.Name.Class or token in t.Name.Decorator:
        return "syn-name"
    return None
