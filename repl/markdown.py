"""Markdown in assistant replies, one complete line at a time: styled segments, never escape bytes.

:class:`MarkdownLines` turns each finished line of a reply into ``(text, style)`` segments: headings,
emphasis, inline code, links, lists, quotes, rules, and fenced code blocks highlighted by language with
pygments (imported on the first fence). It works line by line because replies stream: the renderer
hands it a line when its newline arrives (docs/markdown.md). The segments' text is the reply's own,
untouched but for the markers it drops; style names map to SGR in :data:`MARKDOWN_STYLES`, and only the
sink's sanitizer turns them into bytes, so a hostile reply cannot smuggle an escape in through markup.

Costs stay bounded whatever the model writes (docs/markdown.md, "Hostile replies"). Markup is linear in
the line: a scan that an inline marker starts never runs past the next marker of its kind, so the scans
of one pattern are disjoint, and lines longer than :data:`MAX_MARKUP_CHARS` are shown plain. Code is
highlighted only by the lexers of :data:`HIGHLIGHTED_LANGUAGES`, each measured on hostile lines, only in
lines up to :data:`HIGHLIGHT_MAX_CHARS`, and a line stops at the lexer's first error token. Fence state
is one small record.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.repl.highlight import CodeHighlighter

__all__ = ["CODE_CHAR_COST", "DELTA_MARKUP_BUDGET", "HIGHLIGHTED_LANGUAGES", "HIGHLIGHT_MAX_CHARS", "MARKDOWN_STYLES",
           "MAX_MARKUP_CHARS", "MarkdownLines", "Segment"]

Segment = tuple[str, "str | None"]

# Style name -> SGR. Names only travel with the text; the sink paints them after sanitizing.
MARKDOWN_STYLES: dict[str, str] = {
    "md-h1": "\x1b[1;4m",
    "md-heading": "\x1b[1m",
    "md-bold": "\x1b[1m",
    "md-italic": "\x1b[3m",
    "md-code": "\x1b[36m",
    "md-link": "\x1b[4m",
    "md-dim": "\x1b[2m",  # fences, rules, quote bars, link targets
    "md-bullet": "\x1b[33m",
    "syn-keyword": "\x1b[35m",
    "syn-string": "\x1b[32m",
    "syn-number": "\x1b[33m",
    "syn-comment": "\x1b[2;3m",
    "syn-name": "\x1b[34m",
    "syn-builtin": "\x1b[36m",
}

MAX_MARKUP_CHARS = 4000  # a longer line is shown as it is: markup that long is not prose
HIGHLIGHT_MAX_CHARS = 200  # a longer code line is plain code: some lexers are quadratic below it (docs/markdown.md)
# What the markdown of one delta may cost, in characters of markup; a code line counts CODE_CHAR_COST per
# character (highlighting a hostile line costs up to ~30 us a character, markup ~0.3 us). The rest of a delta
# that big (a server can send 64 MiB in one) is shown as written: about 20 ms of markdown per delta at most.
DELTA_MARKUP_BUDGET = 64 * 1024
CODE_CHAR_COST = 100

# A fence's language, lower case -> the pygments lexer that highlights it. Nothing else is highlighted:
# pygments has ~600 lexers and some take minutes on one hostile line (lilypond: 100 s for 2 000 ``a``).
# Each lexer here was measured on hostile lines of HIGHLIGHT_MAX_CHARS (``python -m bench --only
# markdown_line``; docs/markdown.md has the figures); a language not here is plain code.
HIGHLIGHTED_LANGUAGES: dict[str, str] = {
    **dict.fromkeys(("python", "py", "python3", "py3"), "python"),
    **dict.fromkeys(("javascript", "js"), "javascript"),
    **dict.fromkeys(("typescript", "ts"), "typescript"),
    "jsx": "jsx",
    "tsx": "tsx",
    "json": "json",
    **dict.fromkeys(("yaml", "yml"), "yaml"),
    "toml": "toml",
    **dict.fromkeys(("bash", "sh", "shell", "zsh"), "bash"),
    **dict.fromkeys(("diff", "udiff"), "diff"),
    "c": "c",
    **dict.fromkeys(("cpp", "c++"), "cpp"),
    **dict.fromkeys(("rust", "rs"), "rust"),
    **dict.fromkeys(("go", "golang"), "go"),
    "java": "java",
    **dict.fromkeys(("kotlin", "kt"), "kotlin"),
    **dict.fromkeys(("ruby", "rb"), "ruby"),
    "php": "php",
    "sql": "sql",
    "html": "html",
    "css": "css",
    **dict.fromkeys(("markdown", "md"), "markdown"),
    **dict.fromkeys(("dockerfile", "docker"), "docker"),
    **dict.fromkeys(("makefile", "make"), "make"),
    **dict.fromkeys(("ini", "cfg"), "ini"),
    **dict.fromkeys(("console", "shell-session"), "console"),
    "xml": "xml",
    "lua": "lua",
    "swift": "swift",
    **dict.fromkeys(("csharp", "cs", "c#"), "csharp"),
}

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})[ \t]*([\w+#.-]*)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")  # the closing #s are cut in Python: a lazy .* was quadratic
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}>[ \t]?(.*)$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_NUMBERED = re.compile(r"^([ \t]*)(\d{1,9}[.)])[ \t]+(.*)$")
# Each alternative, started at its marker, stops before the next character of that marker (a link's label
# and target both stop at ``[``): the scans of one alternative never overlap, so a line of unmatched
# markers costs one pass, not one pass per marker (tests/repl/test_markdown_hostile.py).
_INLINE = re.compile(
    r"`(?P<code>[^`\n]+)`"
    r"|\*\*(?P<bold>[^*\s](?:[^*\n]*[^*\s])?)\*\*"
    r"|__(?P<bold2>[^_\s](?:[^_\n]*[^_\s])?)__"
    r"|(?<![\w*])\*(?P<italic>[^*\s](?:[^*\n]*[^*\s])?)\*(?![\w*])"
    r"|(?<![\w_])_(?P<italic2>[^_\s](?:[^_\n]*[^_\s])?)_(?![\w_])"
    r"|\[(?P<label>[^\[\]\n]+)\]\((?P<url>[^)\s\[]+)\)"
)
_RULE_TEXT = "─" * 40


def _inline(text: str, base: str | None = None) -> list[Segment]:
    """Emphasis, inline code and links; everything else keeps ``base``."""
    if len(text) > MAX_MARKUP_CHARS:
        return [(text, base)]
    segments: list[Segment] = []
    at = 0
    for match in _INLINE.finditer(text):
        if match.start() > at:
            segments.append((text[at : match.start()], base))
        groups = match.groupdict()
        if groups["code"] is not None:
            segments.append((groups["code"], "md-code"))
        elif groups["label"] is not None:
            segments.append((groups["label"], "md-link"))
            segments.append((f" ({groups['url']})", "md-dim"))
        else:
            bold = groups["bold"] if groups["bold"] is not None else groups["bold2"]
            if bold is not None:
                segments.append((bold, "md-bold"))
            else:
                italic = groups["italic"] if groups["italic"] is not None else groups["italic2"]
                segments.append((italic or "", "md-italic"))
        at = match.end()
    if at < len(text):
        segments.append((text[at:], base))
    return segments or [("", base)]


def _heading_text(rest: str) -> str:
    """A heading's text without its closing run of ``#`` (one that stands alone or after a blank)."""
    text = rest.rstrip(" \t")
    body = text.rstrip("#")
    if body != text and (not body or body[-1] in " \t"):
        return body.rstrip(" \t")
    return text


def _highlighter(language: str) -> CodeHighlighter | None:
    """The highlighter for a fence's language if it is in the allow-list, else None (plain code)."""
    name = HIGHLIGHTED_LANGUAGES.get(language.lower())
    if name is None:
        return None
    from dsh.repl.highlight import highlighter  # pygments costs the first prompt ~10 ms: loaded at the first fence

    return highlighter(name)


class MarkdownLines:
    """Renders complete lines of one reply; remembers only whether a code fence is open."""

    def __init__(self) -> None:
        self._fence: str | None = None  # the opening marker (``` or ~~~, maybe longer)
        self._highlighter: CodeHighlighter | None = None

    @property
    def in_code(self) -> bool:
        return self._fence is not None

    def reset(self) -> None:
        """A new reply: no fence carries over."""
        self._fence = None
        self._highlighter = None

    def line(self, text: str, *, markup: bool = True) -> list[Segment]:
        """The segments of one complete line (without its newline).

        ``markup=False``: the line as written, code plain, only the fences followed (the rest of a delta past
        :data:`DELTA_MARKUP_BUDGET`).
        """
        if self._fence is not None:
            return self._code_line(text, highlight=markup)
        fence = _FENCE.match(text)
        if fence:
            self._fence = fence.group(2)
            self._highlighter = _highlighter(fence.group(3))
            return [(text, "md-dim")]
        if not markup or len(text) > MAX_MARKUP_CHARS:
            return [(text, None)]
        heading = _HEADING.match(text)
        if heading:
            style = "md-h1" if len(heading.group(1)) == 1 else "md-heading"
            return _inline(_heading_text(heading.group(2)), style)
        if _RULE.match(text):
            return [(_RULE_TEXT, "md-dim")]
        quote = _QUOTE.match(text)
        if quote:
            return [("│ ", "md-dim"), *_inline(quote.group(1))]
        bullet = _BULLET.match(text)
        if bullet:
            return [(bullet.group(1) + "• ", "md-bullet"), *_inline(bullet.group(2))]
        numbered = _NUMBERED.match(text)
        if numbered:
            return [(f"{numbered.group(1)}{numbered.group(2)} ", "md-bullet"), *_inline(numbered.group(3))]
        return _inline(text)

    def _code_line(self, text: str, *, highlight: bool) -> list[Segment]:
        fence = self._fence
        assert fence is not None
        stripped = text.strip()
        if len(stripped) >= len(fence) and stripped == fence[0] * len(stripped):
            self._fence = None
            self._highlighter = None
            return [(text, "md-dim")]
        if not highlight or self._highlighter is None or len(text) > HIGHLIGHT_MAX_CHARS:
            return [(text, "md-code")]
        return self._highlighter.segments(text) or [(text, "md-code")]
