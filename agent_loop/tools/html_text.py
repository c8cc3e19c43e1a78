"""A web page as readable text for the model: headings, paragraphs, lists, links and code as light markdown
(docs/tools.md, "The web: web_fetch and web_search").

Built on the standard library's ``html.parser`` (no dependency): what a browser would not show (scripts, styles,
templates, SVG, the head but its title) is left out, runs of white space fold to one, and character references
are decoded by the parser. The converter never builds more than it was given: its output is at most about the
size of the page's text.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["html_to_text"]

# Whose content is not shown: their text never reaches the output.
_HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "head",
                     "select", "canvas"})
_BLOCKS = frozenset({"p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "table", "tr",
                     "form", "fieldset", "figure", "figcaption", "dl", "dt", "dd", "ul", "ol", "address", "details",
                     "summary", "hr", "body", "html"})
_HEADINGS = {f"h{level}": "#" * level for level in range(1, 7)}
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr", "source", "area", "base", "col", "embed",
                   "param", "track"})
_SPACES = re.compile(r"[ \t\r\n\f\v]+")
_BLANK_LINES = re.compile(r"\n{3,}")
_MAX_DEPTH = 256  # a page of 100 000 unclosed <div>s costs a bounded stack


class _Converter(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.title: list[str] = []
        self._hidden: list[str] = []  # the hidden elements open now (their text is dropped)
        self._in_title = False
        self._pre = 0
        self._links: list[str | None] = []  # hrefs of the <a>s open now
        self._lists: list[str] = []  # "ul" | "ol", innermost last
        self._counters: list[int] = []

    # --- text -------------------------------------------------------------------------------------------------

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
            return
        if self._hidden:
            return
        if self._pre:
            self.out.append(data)
            return
        text = _SPACES.sub(" ", data)
        if text.strip() or (text and self.out and not self.out[-1].endswith((" ", "\n"))):
            self.out.append(text)

    def _newline(self, count: int = 1) -> None:
        if not self.out:
            return
        tail = "".join(self.out[-3:])
        have = len(tail) - len(tail.rstrip("\n"))
        if have < count:
            self.out.append("\n" * (count - have))

    # --- tags -------------------------------------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in _HIDDEN:
            if tag not in _VOID and len(self._hidden) < _MAX_DEPTH:
                self._hidden.append(tag)
            return
        if self._hidden:
            return
        self._open(tag, dict(attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self._hidden and tag not in _HIDDEN:
            self._open(tag, dict(attrs))
            if tag not in _VOID:
                self.handle_endtag(tag)

    def _open(self, tag: str, attrs: dict[str, str | None]) -> None:
        if tag in _HEADINGS:
            self._newline(2)
            self.out.append(_HEADINGS[tag] + " ")
        elif tag in ("ul", "ol"):
            self._newline()
            if len(self._lists) < _MAX_DEPTH:
                self._lists.append(tag)
                self._counters.append(0)
        elif tag == "li":
            self._newline()
            indent = "  " * max(0, len(self._lists) - 1)
            if self._lists and self._lists[-1] == "ol":
                self._counters[-1] += 1
                self.out.append(f"{indent}{self._counters[-1]}. ")
            else:
                self.out.append(f"{indent}- ")
        elif tag == "pre":
            self._newline(2)
            self.out.append("```\n")
            self._pre += 1
        elif tag == "code" and not self._pre:
            self.out.append("`")
        elif tag == "a":
            if len(self._links) < _MAX_DEPTH:
                self._links.append(attrs.get("href"))
                self.out.append("[")
        elif tag == "br":
            self.out.append("\n")
        elif tag == "img":
            alt = _SPACES.sub(" ", attrs.get("alt") or "").strip()
            if alt:
                self.out.append(f"[image: {alt}]")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag == "blockquote":
            self._newline(2)
            self.out.append("> ")
        elif tag in _BLOCKS:
            self._newline(2 if tag in ("p", "table", "hr") else 1)
            if tag == "hr":
                self.out.append("---\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if tag in _HIDDEN:
            if tag in self._hidden:
                del self._hidden[len(self._hidden) - 1 - self._hidden[::-1].index(tag):]
            return
        if self._hidden:
            return
        self._close(tag)

    def _close(self, tag: str) -> None:
        if tag in _HEADINGS or tag in ("p", "blockquote", "table"):
            self._newline(2)
        elif tag in ("ul", "ol"):
            if self._lists:
                self._lists.pop()
                self._counters.pop()
            self._newline()
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self._newline()
            self.out.append("```\n")
        elif tag == "code" and not self._pre:
            self.out.append("`")
        elif tag == "a" and self._links:
            href = self._links.pop()
            self.out.append(f"]({href})" if href and not href.startswith(("javascript:", "#")) else "]")
        elif tag in _BLOCKS or tag == "li":
            self._newline()


def html_to_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML page: the text as light markdown, blank lines folded to one."""
    converter = _Converter()
    try:
        converter.feed(html)
        converter.close()
    except (AssertionError, ValueError):  # html.parser's own complaints about a malformed declaration
        pass
    lines = (line.rstrip() for line in "".join(converter.out).split("\n"))
    text = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip("\n")
    title = _SPACES.sub(" ", "".join(converter.title)).strip()
    return title, text
