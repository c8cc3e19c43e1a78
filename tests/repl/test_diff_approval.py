"""The edit approval: the whole diff above the question, coloured on a TTY, sanitized, ``v`` when too long."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.tools.edit_plan import unified_diff
from dsh.repl.approvals import diff_approval, shown_diff
from dsh.repl.renderer import Renderer
from dsh.repl.sanitize import sanitize
from dsh.repl.styles import ADDED, DIM, REMOVED, RESET, terminal_text

DIFF = "--- notes.txt\n+++ notes.txt\n@@ -1,2 +1,2 @@\n keep\n-old\n+new"


def test_a_short_diff_is_shown_inline_above_the_question() -> None:
    approval = diff_approval(DIFF, "notes.txt (+1 -1)", tool="edit_file")
    assert not approval.must_view and approval.noun == "diff"
    assert approval.question == (
        "      --- notes.txt\n      +++ notes.txt\n      @@ -1,2 +1,2 @@\n       keep\n      -old\n      +new\n"
        "  [approve] edit_file notes.txt (+1 -1)  (y / n / a) "
    )
    assert terminal_text(approval.question) == approval.question  # no colour without color=True


def test_added_and_removed_lines_get_named_styles_on_a_tty() -> None:
    approval = diff_approval(DIFF, "notes.txt (+1 -1)", tool="edit_file", color=True)
    assert terminal_text(approval.question) == (
        "      --- notes.txt\n      +++ notes.txt\n"
        f"      {DIM}@@ -1,2 +1,2 @@{RESET}\n       keep\n      {REMOVED}-old{RESET}\n      {ADDED}+new{RESET}\n"
        "  [approve] edit_file notes.txt (+1 -1)  (y / n / a) "
    )
    # the answer line keeps the colour: the renderer's line() joins Styled text without losing spans
    line = Renderer(color=True).line(approval.question + "yes")
    assert terminal_text(line).endswith(
        f"{ADDED}+new{RESET}\n  [approve] edit_file notes.txt (+1 -1)  (y / n / a) yes\n"
    )


def test_hostile_text_in_a_diff_is_made_visible() -> None:
    diff = "--- a\n+++ a\n@@ -0,0 +1 @@\n+echo \x1b]52;c;ZXZpbA==\x07 \u202eexe.txt\tend" + " " * 50 + "hidden"
    shown = terminal_text(diff_approval(diff, "a (+1 -0)", tool="edit_file", color=True).question)
    assert "\x1b]" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "+echo \u241b]52;c;ZXZpbA==\u2407 <U+202E>exe.txt\u2409end\u2420\u00d750hidden" in shown


def test_a_diff_too_long_for_the_screen_must_be_viewed_first() -> None:
    lines = [f"+line {n}" for n in range(40)]
    diff = "--- /dev/null\n+++ big.txt\n@@ -0,0 +1,40 @@\n" + "\n".join(lines)
    approval = diff_approval(diff, "big.txt (new file, +40)", tool="write_file", rows=24, cols=80)
    size = f"43 lines / {len(diff)} chars"
    assert approval.must_view
    assert approval.question == (
        f"  [approve] write_file big.txt (new file, +40): diff is {size} \u2014 v to view  (v / n) "
    )
    assert approval.viewed_question == (
        f"  [approve] write_file big.txt (new file, +40): the diff above ({size})  (y / n / a) "
    )
    assert approval.view.startswith(f"  [diff] write_file big.txt (new file, +40), {size}:\n      --- /dev/null\n")
    assert approval.view.endswith("      +line 39\n") and approval.view.count("\n") == 44  # the whole diff
    assert not diff_approval(diff, "big.txt", tool="write_file", rows=60, cols=80).must_view
    # a long line counts by the rows it wraps to
    wide = "--- a\n+++ a\n@@ -1 +1 @@\n+" + "x" * 1990
    assert diff_approval(wide, "a", tool="write_file", rows=24, cols=80).must_view


def test_the_view_block_keeps_its_colour() -> None:
    diff = "--- a\n+++ a\n@@ -1,30 +1,30 @@\n" + "\n".join(f"-{n}\n+{n}!" for n in range(30))
    approval = diff_approval(diff, "a (+30 -30)", tool="edit_file", rows=24, cols=80, color=True)
    text = terminal_text(Renderer(color=True).block(approval.view))
    assert f"      {REMOVED}-0{RESET}\n      {ADDED}+0!{RESET}\n" in text


HOSTILE = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.sampled_from("\x1b\x07\x9b\x9d\x90\r\n\n\n\t \u202a\u202e\u2066\u2069\u200b\u200d\u2060\ufeff\u2028"),
    )
)
_SGR = re.compile(r"\x1b\[[0-9;]*m")


@given(HOSTILE, HOSTILE)
def test_any_edit_is_shown_whole_and_inert_before_y_counts(before: str, after: str) -> None:
    diff, added, removed = unified_diff(before or None, after, "f.txt")
    approval = diff_approval(diff, f"f.txt (+{added} -{removed})", tool="edit_file", rows=24, cols=80, color=True)
    approved = terminal_text(approval.view if approval.must_view else approval.question)  # what y answers
    plain = _SGR.sub("", approved)
    assert "\x1b" not in plain and "\r" not in plain
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs") and c not in "\n\t" for c in plain)
    for line in shown_diff(diff):
        assert sanitize(line) in plain
    if not approval.must_view:
        assert approval.question.endswith("  (y / n / a) ")
