"""The front matter reader of skills and commands (agent_loop/front_matter.py): what Claude Code's and the Agent
Skills format's examples use is read; anything else is one error naming the line."""

from __future__ import annotations

import pytest

from dsh.agent_loop.front_matter import FrontMatterError, fold_line, split_front_matter


def test_the_documented_shapes_are_read() -> None:
    text = ("---\nname: pdf-processing\ndescription: \"Extract text: tables \\u00e9\"  \nlicense: 'It''s MIT'\n"
            "allowed-tools: Bash(git add:*), Read  # a comment\nmetadata:\n  author: example-org\n  version: \"1.0\"\n"
            "tags:\n  - one\n  - 'two'\nlist: [a, \"b\"]\nfolded: >-\n  one\n  two\n\n  three\nliteral: |\n  a\n  b\n"
            "empty:\n---\n# Body\n")
    front, body = split_front_matter(text)
    assert front == {
        "name": "pdf-processing", "description": "Extract text: tables é", "license": "It's MIT",
        "allowed-tools": "Bash(git add:*), Read", "metadata": {"author": "example-org", "version": "1.0"},
        "tags": ["one", "two"], "list": ["a", "b"], "folded": "one two\nthree", "literal": "a\nb\n", "empty": "",
    }
    assert body == "# Body\n"


def test_no_front_matter_is_the_whole_body() -> None:
    assert split_front_matter("Review $ARGUMENTS\n") == ({}, "Review $ARGUMENTS\n")


@pytest.mark.parametrize(("text", "error"), [
    ("---\nname: x\n", "it has no closing '---' line"),
    ("---\nname: x\nname: y\n---\n", "line 3: the key 'name' is given twice"),
    ("---\njust words\n---\n", "line 2: not a 'key: value' line"),
    ("---\nd: \"open\n---\n", "line 2: a double-quoted string that does not end on its line"),
    ("---\nd: &anchor x\n---\n", "line 2: a value starting with '&' (flow mappings, anchors and tags are not read)"),
    ("---\nd: {a: 1}\n---\n", "line 2: a value starting with '{' (flow mappings, anchors and tags are not read)"),
    ("---\nd:\n  - a\n  b\n---\n", "line 3: an indented line that is neither '- item' nor 'key: value'"),
    ("---\n  d: x\n---\n", "line 2: an indented line where a 'key: value' line was expected"),
])
def test_what_is_not_read_names_its_line(text: str, error: str) -> None:
    with pytest.raises(FrontMatterError) as caught:
        split_front_matter(text)
    assert str(caught.value) == error


def test_fold_line_keeps_one_safe_line() -> None:
    assert fold_line("a\x1b[2J\r\nb\u202e\u2028c\t d", 100) == "a [2J b c d"
    assert fold_line("x" * 10, 5) == "xxxx…"
