"""Replies written to be slow: fenced code in any language, runs of markers, huge deltas.

What the renderer must guarantee is checked here by deterministic properties; how long it takes is measured
by ``python -m bench --only markdown_line,markdown_inline,markdown_answer,ctrl_c_hostile`` (docs/markdown.md).

* Only the languages of ``HIGHLIGHTED_LANGUAGES`` are highlighted (lilypond took 100 s for one line of 2 000
  ``a``), only lines up to ``HIGHLIGHT_MAX_CHARS``, and a line the lexer cannot read is plain code.
* No inline markup span runs past the next character of its own marker: each pattern's scans are then
  disjoint, which is what makes a line of 3 999 ``[`` one pass instead of 8 million steps.
* One delta gets ``DELTA_MARKUP_BUDGET`` of markdown work (a code line's characters count ``CODE_CHAR_COST``
  each); the rest of a bigger delta is shown as written, its fences still followed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.agent_loop.events import TextDelta, TurnEnd, TurnStart
from dsh.agent_loop.reasons import Completed
from dsh.repl.markdown import (
    _INLINE,
    CODE_CHAR_COST,
    DELTA_MARKUP_BUDGET,
    HIGHLIGHT_MAX_CHARS,
    HIGHLIGHTED_LANGUAGES,
    MarkdownLines,
)
from dsh.repl.renderer import Renderer
from dsh.repl.styles import RESET, terminal_text

CODE, DIM, BOLD, KEYWORD, NUMBER = "\x1b[36m", "\x1b[2m", "\x1b[1m", "\x1b[35m", "\x1b[33m"

# One ordinary line per highlighted language, and a style it must get somewhere in it.
SAMPLES: dict[str, tuple[str, str]] = {
    "python": ("def f(x): return 'a'", "syn-keyword"),
    "javascript": ("const s = 'a';", "syn-keyword"),
    "typescript": ("let n: number = 1;", "syn-keyword"),
    "jsx": ("const e = 'a';", "syn-keyword"),
    "tsx": ("const e = 'a';", "syn-keyword"),
    "json": ('{"a": 1}', "syn-number"),
    "yaml": ("key: 'value'", "syn-string"),
    "toml": ('name = "dsh"', "syn-string"),
    "bash": ("if true; then echo 'a'; fi", "syn-keyword"),
    "diff": ("+added line", None),
    "console": ("$ echo 'a'", "syn-string"),
    "c": ("int main(void) { return 0; }", "syn-keyword"),
    "cpp": ("return 0; // done", "syn-comment"),
    "rust": ("fn main() { let x = 1; }", "syn-keyword"),
    "go": ("func main() { return }", "syn-keyword"),
    "java": ("public class A { }", "syn-keyword"),
    "kotlin": ("fun main() { val x = 1 }", "syn-keyword"),
    "ruby": ("def f; 'a'; end", "syn-keyword"),
    "php": ("echo 'a';", "syn-keyword"),
    "sql": ("SELECT 'a' FROM t;", "syn-keyword"),
    "html": ("<a href='x'>y</a>", "syn-string"),
    "css": ("a { color: 'red'; }", "syn-string"),
    "markdown": ("`code` and text", "syn-string"),
    "docker": ("FROM python:3.11", "syn-keyword"),
    "make": ("all: main.o # build", "syn-comment"),
    "ini": ("name = 'value' ; c", "syn-comment"),
    "xml": ("<a b='c'/>", "syn-string"),
    "lua": ("local x = 'a'", "syn-keyword"),
    "swift": ("let x = \"a\"", "syn-keyword"),
    "csharp": ("public class A { }", "syn-keyword"),
}


def code_line(language: str, line: str) -> list[tuple[str, str | None]]:
    lines = MarkdownLines()
    lines.line(f"```{language}")
    return lines.line(line)


def test_a_language_outside_the_allow_list_is_plain_code_even_when_pygments_knows_it() -> None:
    from pygments.lexers import get_lexer_by_name

    for language in ("lilypond", "systemd", "autoit", "fan", "objdump", "maple"):
        get_lexer_by_name(language)  # pygments has it: the allow-list is what keeps it out
        assert language not in HIGHLIGHTED_LANGUAGES
        assert code_line(language, "a" * 2000) == [("a" * 2000, "md-code")]
        assert code_line(language, "a b") == [("a b", "md-code")]


@pytest.mark.parametrize("language", sorted(set(HIGHLIGHTED_LANGUAGES.values())))
def test_every_allowed_language_highlights_a_line_of_its_own(language: str) -> None:
    line, style = SAMPLES[language]
    segments = code_line(language, line)
    assert "".join(text for text, _ in segments) == line
    if style is None:  # a diff line is one token with no style of ours; it is still read, not refused
        assert segments != [(line, "md-code")]
    else:
        assert style in {name for _, name in segments}, segments


def test_every_alias_renders_exactly_as_its_language() -> None:
    for alias, language in HIGHLIGHTED_LANGUAGES.items():
        line = SAMPLES[language][0]
        assert code_line(alias, line) == code_line(language, line)
        assert code_line(alias.upper(), line) == code_line(language, line)  # ```Python is Python


def test_a_code_line_longer_than_the_cap_is_plain() -> None:
    fits = "x = 1" + " " * (HIGHLIGHT_MAX_CHARS - 6) + "1"
    assert len(fits) == HIGHLIGHT_MAX_CHARS
    assert ("1", "syn-number") in code_line("python", fits)
    longer = fits + "1"
    assert code_line("python", longer) == [(longer, "md-code")]


def test_a_line_the_lexer_cannot_read_is_plain_code() -> None:
    # An error token is where every rule of the lexer was tried and failed: the costliest step, so it ends the work.
    assert code_line("python", "print($x)") == [("print($x)", "md-code")]
    assert code_line("python", "x = 1\r2") == [("x = 1\r2", "md-code")]  # pygments would turn \r into a newline


def test_a_hostile_fence_renders_as_written_in_the_terminal() -> None:
    renderer = Renderer(color=True, markdown="lines")
    answer = "```lilypond\n" + "a" * 2000 + "\n```\n" + "[" * 3999 + "\n"
    parts = [renderer.render(TurnStart(1, "q")), renderer.render(TextDelta(answer)),
             renderer.render(TurnEnd(1, Completed()))]
    shown = "".join(terminal_text(part) for part in parts)
    assert shown == (f"[main turn 1] {DIM}```lilypond{RESET}\n{CODE}{'a' * 2000}{RESET}\n{DIM}```{RESET}\n"
                     + "[" * 3999 + "\n")


def _one_delta(text: str) -> tuple[list[str], Renderer]:
    renderer = Renderer(color=True, markdown="lines")
    renderer.render(TurnStart(1, "q"))
    return terminal_text(renderer.render(TextDelta(text))).split("\n"), renderer


def test_past_its_markup_budget_the_rest_of_a_delta_is_shown_as_written() -> None:
    filler = "**b**\n" * (DELTA_MARKUP_BUDGET // 5 + 1)  # five characters of markup a line
    shown, renderer = _one_delta(filler + "**late**\n```python\nx = 1\n```\n")
    assert shown[0] == f"{BOLD}b{RESET}"
    assert shown[-5:] == ["**late**", f"{DIM}```python{RESET}", f"{CODE}x = 1{RESET}", f"{DIM}```{RESET}", ""]
    # The next delta has a budget of its own.
    assert terminal_text(renderer.render(TextDelta("**b** `c`\n"))) == f"{BOLD}b{RESET} {CODE}c{RESET}\n"


def test_a_code_line_spends_the_budget_a_hundred_times_faster() -> None:
    lines = DELTA_MARKUP_BUDGET // (5 * CODE_CHAR_COST) + 2  # the last two are past the budget
    shown, _ = _one_delta("```python\n" + "x = 1\n" * lines + "```\n")
    highlighted = f"x = {NUMBER}1{RESET}"
    assert shown[1:-2] == [highlighted] * (lines - 1) + [f"{CODE}x = 1{RESET}"]
    assert KEYWORD not in shown[-2] and shown[-2] == f"{DIM}```{RESET}"


# --- inline markup --------------------------------------------------------------------------------

# The character that opens each alternative of the inline pattern, and the groups it scans.
OPENERS = {"code": "`", "bold": "*", "bold2": "_", "italic": "*", "italic2": "_", "label": "[", "url": "["}
_marker_text = st.text(alphabet=st.sampled_from(list("*_`[]() a\t#>-")), max_size=300)


@settings(max_examples=400, deadline=None)
@given(_marker_text)
def test_no_markup_span_runs_past_its_own_opening_marker(text: str) -> None:
    for match in _INLINE.finditer(text):
        for group, value in match.groupdict().items():
            if value is not None:
                assert OPENERS[group] not in value, (group, value)


@pytest.mark.parametrize("unit", ["[", "(", "*", "_", "`", "[a](", "[a]", "](", "[](", "* ", "_ "])
def test_runs_of_unmatched_markers_are_shown_as_written(unit: str) -> None:
    line = "x" + (unit * 4000)[:3998]  # the x keeps a run of * or ` from being a rule or a fence
    assert MarkdownLines().line(line) == [(line, None)]


def test_links_and_emphasis_still_render_beside_the_runs() -> None:
    lines = MarkdownLines()
    assert lines.line("[[a](u) **b** [") == [("[", None), ("a", "md-link"), (" (u)", "md-dim"), (" ", None),
                                             ("b", "md-bold"), (" [", None)]
    # A target with a [ (an IPv6 literal) is not a link: a [ always starts a new scan.
    assert lines.line("[v6](http://[::1]/)") == [("[v6](http://[::1]/)", None)]


@pytest.mark.parametrize(("line", "text"), [
    ("# Title", "Title"),
    ("# Title ##", "Title"),
    ("## C#", "C#"),
    ("# a #b", "a #b"),
    ("#  ##", ""),
    ("# a" + " " * 3990 + "b", "a" + " " * 3990 + "b"),
    ("# a" + " \t" * 1000, "a"),
])
def test_a_heading_drops_only_its_closing_hashes(line: str, text: str) -> None:
    assert "".join(part for part, _ in MarkdownLines().line(line)) == text
