"""Markdown in assistant text: pinned terminal bytes, line-by-line streaming, plain without colour, fuzzed safety."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.agent_loop.events import AssistantMessage, ReasoningDelta, TextDelta, ToolCallStart, TurnEnd, TurnStart
from dsh.agent_loop.reasons import Completed
from dsh.repl.markdown import MARKDOWN_STYLES, MAX_MARKUP_CHARS, MarkdownLines
from dsh.repl.renderer import Renderer
from dsh.repl.sanitize import _UNSAFE
from dsh.repl.styles import RESET, Rewrite, terminal_text

B, IT, CODE, H1, H, DIM, BUL = "\x1b[1m", "\x1b[3m", "\x1b[36m", "\x1b[1;4m", "\x1b[1m", "\x1b[2m", "\x1b[33m"
KW, STR, CMT, NAME = "\x1b[35m", "\x1b[32m", "\x1b[2;3m", "\x1b[34m"
R = RESET

REPLY = (
    "# Title\n"
    "## Part *two*\n"
    "Some **bold**, *it*, `x = 1` and [docs](https://example.com/a).\n"
    "- item\n"
    "  * nested\n"
    "3. third\n"
    "> quoted\n"
    "---\n"
    "```python\n"
    "def f(x):\n"
    "    return 'a'  # c\n"
    "```\n"
    "~~~\n"
    "plain *code*\n"
    "~~~\n"
    "snake_case_name and 2*3*4 stay as they are\n"
)
PINNED = [
    f"{H1}Title{R}",
    f"{H}Part {R}{IT}two{R}",
    f"Some {B}bold{R}, {IT}it{R}, {CODE}x = 1{R} and \x1b[4mdocs{R}{DIM} (https://example.com/a){R}.",
    f"{BUL}• {R}item",
    f"{BUL}  • {R}nested",
    f"{BUL}3. {R}third",
    f"{DIM}│ {R}quoted",
    f"{DIM}{'─' * 40}{R}",
    f"{DIM}```python{R}",
    f"{KW}def{R} {NAME}f{R}(x):",
    f"    {KW}return{R} {STR}'a'{R}  {CMT}# c{R}",
    f"{DIM}```{R}",
    f"{DIM}~~~{R}",
    f"{CODE}plain *code*{R}",
    f"{DIM}~~~{R}",
    "snake_case_name and 2*3*4 stay as they are",
]


def _turn(renderer: Renderer, text: str, size: int) -> list[str]:
    out = [renderer.render(TurnStart(1, "q"))]
    out += [renderer.render(TextDelta(text[i : i + size])) for i in range(0, len(text), size)]
    out.append(renderer.render(AssistantMessage(1, 1, content=text)))
    out.append(renderer.render(TurnEnd(1, Completed())))
    return out


def _screen(parts: list[str]) -> str:
    """What a sink that keeps the unfinished line aside shows: a rewrite replaces that line."""
    done, line = "", ""
    for part in parts:
        text = (line if not getattr(part, "rewrites_partial", False) else "") + terminal_text(part)
        head, newline, line = text.rpartition("\n")
        done += head + newline
    return done + line


def test_each_construct_is_pinned() -> None:
    for size in (1, 7, len(REPLY)):
        text = "".join(terminal_text(part) for part in _turn(Renderer(color=True, markdown="lines"), REPLY, size))
        assert text.split("\n") == [f"[main turn 1] {PINNED[0]}", *PINNED[1:], ""]


def test_lines_mode_shows_nothing_of_a_line_until_its_newline() -> None:
    renderer = Renderer(color=True, markdown="lines")
    renderer.render(TurnStart(1, "q"))
    assert renderer.render(TextDelta("**bo")) == ""
    assert renderer.render(TextDelta("ld** and")) == ""
    assert terminal_text(renderer.render(TextDelta(" more\nnext"))) == f"{B}bold{R} and more\n"
    # The reply stopped mid-line: the tool call's line ends it, rendered.
    shown = terminal_text(renderer.render(ToolCallStart(1, "c", "list_dir", "{}")))
    assert shown == "next\n  [tool call] list_dir({})\n"


def test_live_mode_streams_the_unfinished_line_raw_then_rewrites_it() -> None:
    renderer = Renderer(color=True, markdown="live")
    parts = [renderer.render(TurnStart(1, "q")), renderer.render(TextDelta("**bo"))]
    assert parts[-1] == "**bo" and not isinstance(parts[-1], Rewrite)
    parts.append(renderer.render(TextDelta("ld**\nraw `x")))
    assert isinstance(parts[-1], Rewrite)
    assert terminal_text(parts[-1]) == f"[main turn 1] {B}bold{R}\nraw `x"  # the header is kept on its line
    parts.append(renderer.render(TextDelta("` end")))
    parts.append(renderer.render(TurnEnd(1, Completed())))
    assert _screen(parts) == f"[main turn 1] {B}bold{R}\nraw {CODE}x{R} end\n"
    for size in (1, 5, len(REPLY)):
        screen = _screen(_turn(Renderer(color=True, markdown="live"), REPLY, size))
        assert screen.split("\n") == [f"[main turn 1] {PINNED[0]}", *PINNED[1:], ""]


def test_reasoning_then_answer_keeps_their_own_lines() -> None:
    renderer = Renderer(color=True, markdown="lines")
    parts = [renderer.render(TurnStart(1, "q")), renderer.render(ReasoningDelta("think")),
             renderer.render(TextDelta("# Done\n")), renderer.render(TurnEnd(1, Completed()))]
    assert "".join(terminal_text(p) for p in parts) == f"[main turn 1] {DIM}think{R}\n{H1}Done{R}\n"


def test_without_colour_the_text_is_verbatim() -> None:
    renderer = Renderer(color=False)  # what the shell builds under NO_COLOR and for a pipe
    assert "".join(terminal_text(p) for p in _turn(renderer, REPLY, 3)) == "[main turn 1] " + REPLY


def test_a_fence_does_not_leak_into_the_next_turn() -> None:
    renderer = Renderer(color=True, markdown="lines")
    _turn(renderer, "```\nunclosed\n", 4)
    second = [renderer.render(TurnStart(2, "q")), renderer.render(TextDelta("**b**\n"))]
    assert terminal_text(second[1]) == f"{B}b{R}\n"


def test_an_unknown_language_is_plain_code_and_long_lines_are_plain() -> None:
    lines = MarkdownLines()
    assert lines.line("```no-such-language") == [("```no-such-language", "md-dim")]
    assert lines.line("x = *y*") == [("x = *y*", "md-code")]
    lines.line("```")
    long = "*a* " * (MAX_MARKUP_CHARS // 4 + 1)
    assert lines.line(long) == [(long, None)]


_SGR = re.compile("|".join(re.escape(code) for code in {*MARKDOWN_STYLES.values(), RESET, DIM}))
_markup = st.text(alphabet=st.sampled_from(list("*_`[]()#>-~ \n\tab1\x1b\x07\x9b\u202e\u200b\r")) | st.characters(),
                  max_size=200)


@settings(max_examples=300, deadline=None)
@given(_markup, st.integers(min_value=1, max_value=9), st.sampled_from(["lines", "live"]))
def test_fuzz_markup_never_lets_a_control_character_through(text: str, size: int, mode: str) -> None:
    parts = _turn(Renderer(color=True, markdown=mode), text, size)
    screen = _SGR.sub("", "".join(terminal_text(part) for part in parts))
    assert "\x1b" not in screen and not _UNSAFE.search(screen)
    # Markup only ever drops its own markers: no character of the reply appears that was not in it.
    assert set(screen) <= set(terminal_text(text)) | set("[main turn 1] •│─(),.\n") | set(terminal_text("\r"))
