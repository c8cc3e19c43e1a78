"""search_text's byte path (agent_loop/tools/search_pattern.py ``LineFinder.found``; docs/performance.md, the search
row): lines found in a file's raw bytes, only they decoded, give exactly what decoding the whole file and trying
each line gives, on hostile bytes (bad UTF-8 around the literal and the newline, NULs past the probe, surrogates);
and the open it uses (``open_regular_fd(blocking=False)``) still refuses a FIFO unopened and reads a real file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsh.agent_loop.safe_open import NotRegularFile, open_regular_fd
from dsh.agent_loop.tools import default_tools, run_tool_call
from dsh.agent_loop.tools.registry import ToolContext
from dsh.agent_loop.tools.search_pattern import LineFinder
from dsh.llm import ToolCall

pytestmark = pytest.mark.timeout(120)

_PATTERNS = ["ab", "é", "aé|xy", r"\bab\s+\w+E\b", "a.b", "E|ab", r"(?<=\n)a", "é$", "^ab", "x?y", r"\ud800"]
# Bytes that break UTF-8 next to the literal: a lone lead byte, a lone continuation, a cut 3-byte sequence,
# an encoded surrogate, an overlong NUL.
_BYTES = [b"a", b"b", b"ab", b" ", b"\n", b"\r\n", b"E", b"x", b"y", "é".encode(), b"\xc3", b"\xa9", b"\xe2\x82",
          b"\xed\xa0\x80", b"\xc0\x80", b"\xff", b"\0"]


def _plain(source: str, data: bytes) -> list[tuple[int, str]]:
    lines = data.decode("utf-8", "replace").split("\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    plain = re.compile(source)
    return [(number, line) for number, line in enumerate(lines, start=1) if plain.search(line)]


@example("é", [b"\xc3", "é".encode(), b"\n", b"\xc3\n", "é".encode()])
@example("aé|xy", [b"\xe2\x82", b"a", "é".encode(), b"\n", b"x\xa9y"])
@example(r"\ud800", [b"\xed\xa0\x80"])
@settings(max_examples=800, deadline=None)
@given(st.sampled_from(_PATTERNS), st.lists(st.sampled_from(_BYTES), max_size=40))
def test_lines_found_in_the_bytes_are_the_lines_of_the_decoded_text(source: str, pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    found = [(number, line) for number, line, _ in LineFinder.of(source).found(data)]
    assert found == _plain(source, data)


def test_the_rarest_literal_of_a_branch_finds_the_candidate_lines() -> None:
    finder = LineFinder.of(r"\bclass\s+\w+Error\b")
    assert finder.branches == (("Error", "class"),)  # "Error" holds an upper-case letter: fewer lines hold it
    data = b"class A:\n    pass\nclass ValueError(Exception):\n\xff class BadError\n"
    assert [(number, line) for number, line, _ in finder.found(data)] == [
        (3, "class ValueError(Exception):"), (4, "\ufffd class BadError")]


def test_a_huge_file_of_candidate_lines_is_searched_to_its_last_line() -> None:
    data = b"import o\n" * 200_000 + b"import os\n"
    assert [(number, line) for number, line, _ in LineFinder.of("import os").found(data)] == [
        (200_001, "import os")]


def test_a_fifo_is_refused_unopened_by_the_search_open(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # no writer: an open that waited would hang here
    with pytest.raises(NotRegularFile, match="is a FIFO, not a regular file"):
        open_regular_fd(tmp_path / "pipe", follow_symlinks=True, blocking=False)


def test_the_search_open_reads_a_whole_file_left_non_blocking(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"x" * 300_000)
    fd, info = open_regular_fd(tmp_path / "f.txt", follow_symlinks=True, blocking=False)
    try:
        assert not os.get_blocking(fd)
        assert len(os.read(fd, info.st_size + 1)) == 300_000
    finally:
        os.close(fd)


@pytest.mark.anyio
async def test_search_text_shows_lines_around_bad_utf8_and_skips_a_nul_in_the_probe(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_bytes(b"\xffclass KeyError:\n\xc3\nclass Fine:\n")
    (tmp_path / "b.bin").write_bytes(b"\0class ValueError:\n")
    (tmp_path / "c.txt").write_bytes(b"x" * 9000 + b"\0\nclass LateError:\n")  # a NUL past the probe: searched
    call = ToolCall("c", "search_text", json.dumps({"pattern": r"class \w+Error"}))
    output = await run_tool_call(default_tools(), call, ToolContext(cwd=tmp_path, turn=1, notify=lambda event: None))
    assert output.text.splitlines() == ["a.py:1: \ufffdclass KeyError:", "c.txt:2: class LateError:"]
