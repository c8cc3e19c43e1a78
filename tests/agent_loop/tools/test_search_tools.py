"""glob and search_text (agent_loop/tools/search.py; docs/tools.md, "Search: glob and search_text"): the files git
lists in real repositories (nested .gitignore files, a negation, .git/info/exclude, the global excludes file),
ignored trees never opened, ranked and bounded results with the count of the rest, hostile names and lines
escaped; the fast line finder checked against the plain line-by-line search it stands for."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsh.agent_loop import tree_files
from dsh.agent_loop.tools import default_tools, run_tool_call
from dsh.agent_loop.tools.registry import ToolContext, ToolOutput
from dsh.agent_loop.tools.search_pattern import (
    LineFinder,
    glob_regex,
    required_literal,
    required_literals,
    required_runs,
)
from dsh.llm import ToolCall

pytestmark = pytest.mark.anyio

_OPENED: list[str] | None = None  # while set, every path this process opens (the audit hook below)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], str | bytes):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


async def _call(cwd: Path, name: str, **args: Any) -> ToolOutput:
    ctx = ToolContext(cwd=cwd, turn=1, notify=lambda event: None)
    return await run_tool_call(default_tools(), ToolCall("c", name, json.dumps(args)), ctx)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own, whose .gitconfig names a global excludes file ignoring *.secret."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/global-ignore\n")
    (home / "global-ignore").write_text("*.secret\n")
    monkeypatch.setenv("HOME", str(home))
    for name in ("GIT_CONFIG_GLOBAL", "XDG_CONFIG_HOME", "GIT_CONFIG_SYSTEM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Path:
    """A repository whose every kind of ignore rule hides one file that says needle, and shows the rest."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _write(root, {
        ".gitignore": "*.log\n!keep.log\nbuild/\n",
        "keep.log": "needle kept by a negation\n",
        "debug.log": "needle in an ignored log\n",
        "build/out.txt": "needle in an ignored folder\n",
        "src/.gitignore": "generated.py\n",
        "src/app.py": "def needle():\n    return 1\n",
        "src/generated.py": "needle from a nested .gitignore\n",
        "src/local.py": "needle excluded by .git/info/exclude\n",
        "notes/api.secret": "needle in the global excludes file\n",
        "notes/todo.md": "- find the needle\n",
    })
    (root / ".git" / "info" / "exclude").write_text("src/local.py\n")
    _git(root, "add", ".gitignore", "src/.gitignore", "src/app.py", "keep.log")
    _git(root, "commit", "-qm", "start")
    return root


async def test_search_text_reads_what_git_lists_with_every_ignore_rule_applied(repo: Path) -> None:
    found = await _call(repo, "search_text", pattern="needle")

    assert found == ToolOutput("keep.log:1: needle kept by a negation\n"
                               "notes/todo.md:1: - find the needle\n"  # untracked, not ignored
                               "src/app.py:1: def needle():")


async def test_glob_lists_what_git_lists_most_recently_modified_first(repo: Path) -> None:
    os.utime(repo / "src" / "app.py", ns=(1, 2_000_000_000_000_000_000))
    os.utime(repo / "notes" / "todo.md", ns=(1, 1_000_000_000_000_000_000))

    assert (await _call(repo, "glob", pattern="**/*.py")).text == "src/app.py"
    assert (await _call(repo, "glob", pattern="**/*.{md,py}")).text == "src/app.py\nnotes/todo.md"
    assert (await _call(repo, "glob", pattern="*.py", path="src")).text == "src/app.py"
    assert (await _call(repo, "glob", pattern="*.log")).text == "keep.log"


async def test_the_global_excludes_file_named_by_git_config_global_applies(repo: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "other-config"
    config.write_text(f"[core]\n\texcludesFile = {tmp_path / 'other-ignore'}\n")
    (tmp_path / "other-ignore").write_text("*.md\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))

    found = await _call(repo, "glob", pattern="notes/*")

    assert found.text == "notes/api.secret"  # *.secret is HOME's rule, no longer read; *.md is this one's


async def test_a_file_named_outright_is_searched_even_when_git_ignores_it(repo: Path) -> None:
    found = await _call(repo, "search_text", pattern="needle", path="debug.log")

    assert found.text == "debug.log:1: needle in an ignored log"


async def test_deleted_tracked_files_are_not_returned_and_untracked_folders_are(repo: Path) -> None:
    (repo / "src" / "app.py").unlink()  # still in the index
    _write(repo, {"fresh/deep/new.py": "needle\n"})

    assert (await _call(repo, "glob", pattern="**/*.py")).text == "fresh/deep/new.py"
    assert (await _call(repo, "search_text", pattern="needle", glob="*.py")).text == "fresh/deep/new.py:1: needle"


async def test_an_ignored_node_modules_is_never_opened_by_git_or_by_the_search(repo: Path) -> None:
    global _OPENED
    (repo / ".gitignore").write_text("node_modules/\n")
    modules = repo / "node_modules" / "left-pad"
    modules.mkdir(parents=True)
    os.mkfifo(modules / ".gitignore")  # git would wait on it forever had it entered the folder
    os.mkfifo(modules / "index.js")
    (modules / "README.md").write_text("needle\n")
    _OPENED = []
    try:
        started = time.monotonic()
        found = await _call(repo, "search_text", pattern="needle")
        listed = await _call(repo, "glob", pattern="**")
        elapsed = time.monotonic() - started
        opened = list(_OPENED)
    finally:
        _OPENED = None

    assert "node_modules" not in found.text and "node_modules" not in listed.text
    assert "[git could not list" not in found.text
    assert elapsed < tree_files.GIT_TIMEOUT / 2
    assert [path for path in opened if path.startswith(str(repo / "node_modules"))] == []
    assert str(repo / "src" / "app.py") in opened  # the hook did see the search's opens


async def test_more_results_than_shown_end_with_how_many_in_groups_of_three(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("hit\n" * 1_334)
    (tmp_path / "two.txt").write_text("pair\npair\n")
    for n in range(105):
        (tmp_path / f"f{n:03}.md").write_text("")

    found = await _call(tmp_path, "search_text", pattern="hit")
    most = await _call(tmp_path, "search_text", pattern="hit", max_results=5_000)
    one_more = await _call(tmp_path, "search_text", pattern="pair", max_results=1)
    files = await _call(tmp_path, "glob", pattern="*.md")

    assert found.text.splitlines()[-2:] == ["big.txt:100: hit",
                                            "… 1 234 more matching lines not shown (narrow the pattern or path)"]
    assert most.text.splitlines()[-2:] == ["big.txt:1000: hit",  # max_results is capped at 1 000
                                           "… 334 more matching lines not shown (narrow the pattern or path)"]
    assert one_more.text == "two.txt:1: pair\n… 1 more matching line not shown (narrow the pattern or path)"
    assert len(files.text.splitlines()) == 101
    assert files.text.splitlines()[-1] == "… 5 more files not shown (narrow the pattern or path)"


async def test_hostile_names_and_lines_are_escaped(tmp_path: Path, home: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "line\nbreak.txt").write_text("needle\n")
    (tmp_path / "esc\x1b[2J.txt").write_text("needle \x1b]0;pwned\x07 \u202etxt.exe\r\n")
    (tmp_path / os.fsdecode(b"bad\xff.txt")).write_text("needle \udcff\n", errors="surrogateescape")

    found = await _call(tmp_path, "search_text", pattern="needle")
    listed = await _call(tmp_path, "glob", pattern="*.txt")

    assert found.text.splitlines() == [
        "bad\\udcff.txt:1: needle \ufffd",
        "esc\\x1b[2J.txt:1: needle \\x1b]0;pwned\\x07 \\u202etxt.exe",
        "line\\x0abreak.txt:1: needle",
    ]
    assert sorted(listed.text.splitlines()) == ["bad\\udcff.txt", "esc\\x1b[2J.txt", "line\\x0abreak.txt"]


async def test_a_long_line_is_shown_around_its_match(tmp_path: Path) -> None:
    (tmp_path / "min.js").write_text("a" * 5_000 + "needle" + "b" * 5_000 + "\n")

    found = await _call(tmp_path, "search_text", pattern="needle")

    assert found.text == "min.js:1: …" + "a" * 60 + "needle" + "b" * 174 + "…"


async def test_outside_a_repository_the_walk_skips_dependency_and_cache_folders(tmp_path: Path) -> None:
    _write(tmp_path, {"a.py": "needle\n", "node_modules/x.js": "needle\n", ".venv/lib.py": "needle\n",
                      "__pycache__/a.py": "needle\n", "sub/b.py": "needle\n"})

    assert (await _call(tmp_path, "search_text", pattern="needle")).text == "a.py:1: needle\nsub/b.py:1: needle"
    assert (await _call(tmp_path, "glob", pattern="**/*.py")).text.splitlines() in (["a.py", "sub/b.py"],
                                                                                    ["sub/b.py", "a.py"])


async def test_a_repository_git_cannot_list_in_time_is_walked_and_says_so(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.mkfifo(repo / "notes" / ".gitignore")  # planted: git waits on it
    monkeypatch.setattr(tree_files, "GIT_TIMEOUT", 1.0)

    found = await _call(repo, "search_text", pattern="needle", glob="*.py")

    assert found.text == (
        "[git could not list this repository (git ls-files took longer than 1 s): walked it instead, skipping "
        ".git, node_modules, virtualenvs and caches; .gitignore not applied]\n"
        "src/app.py:1: def needle():\n"
        "src/generated.py:1: needle from a nested .gitignore\n"
        "src/local.py:1: needle excluded by .git/info/exclude")


async def test_paths_elsewhere_are_searched_and_shown_whole_and_bad_ones_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _write(tmp_path, {"elsewhere/x.txt": "needle\n"})

    found = await _call(work, "search_text", pattern="needle", path="../elsewhere")
    missing = await _call(work, "search_text", pattern="needle", path="nope")
    too_long = await _call(work, "glob", pattern="*", path="x" * 5_000)
    not_a_folder = await _call(tmp_path, "glob", pattern="*", path="elsewhere/x.txt")
    climbing = await _call(work, "glob", pattern="../elsewhere/*")

    assert found.text == f"{tmp_path / 'elsewhere'}/x.txt:1: needle"
    assert missing == ToolOutput(f"Error: {work / 'nope'} does not exist", is_error=True)
    assert too_long == ToolOutput("Error: path is longer than 4096 characters", is_error=True)
    assert not_a_folder == ToolOutput(f"Error: {tmp_path / 'elsewhere' / 'x.txt'} is not a directory", is_error=True)
    assert climbing.is_error and climbing.text.startswith("Error: the pattern is relative to `path`")


async def test_a_pattern_that_only_matches_deeper_says_how_to_reach_those_files(tmp_path: Path) -> None:
    _write(tmp_path, {"src/a.py": "", "src/deep/b.py": ""})

    assert (await _call(tmp_path, "glob", pattern="*.py")).text == (
        "no files match *.py here; **/*.py matches 2 (* does not cross /)")
    assert (await _call(tmp_path, "glob", pattern="*.rs")).text == "no files match"
    assert (await _call(tmp_path, "search_text", pattern="zzz")).text == "no matches"


def test_glob_syntax() -> None:
    def matches(pattern: str, path: str) -> bool:
        return glob_regex(pattern).fullmatch(path) is not None

    assert matches("src/**/*.py", "src/a.py") and matches("src/**/*.py", "src/x/y/a.py")
    assert not matches("src/*.py", "src/x/a.py") and not matches("*.py", "x/a.py")
    assert matches("**", "a/b/c") and matches("a/**", "a/b/c") and not matches("a/**", "b/c")
    assert matches("?.md", "a.md") and not matches("?.md", "/.md") and not matches("a?b", "a/b")
    assert matches("[ab].py", "b.py") and not matches("[!ab].py", "a.py") and not matches("[!a]", "/")
    assert matches("[+-0]", "+") and not matches("[+-0]", "/")  # a range holding / still never matches it
    assert matches("*.{ts,tsx}", "x.tsx") and not matches("*.{ts,tsx}", "x.js")
    assert matches("{a,b/{c,d}}.txt", "b/d.txt")
    assert matches("a[b", "a[b") and matches("{x}", "{x}") and matches("a.b(c)+", "a.b(c)+")  # plain characters


@given(st.text(max_size=40))
def test_any_glob_pattern_compiles(pattern: str) -> None:
    glob_regex(pattern).fullmatch("a/b.c")


def test_the_literal_a_pattern_requires_is_read_conservatively() -> None:
    assert required_literal("def needle") == "def needle"
    assert required_literal(r"\bclass\s+\w+Error\b") == "class"
    assert required_literal(r"foo\.bar(baz)?") == "foo.bar"
    assert required_literal("ab*cd") == "cd" and required_literal("ab+") == "ab" and required_literal("x{2}yz") == "yz"
    assert required_literal("a[xyz]+bc") == "bc" and required_literal("(?i)abc") == ""
    assert required_literal(r"ab\x41cdef") == "ab" and required_literal("a|bcd") == ""
    assert required_runs(r"\bclass\s+\w+Error\b") == ["class", "Error"]
    assert required_literals("TODO|FIXME") == (("TODO",), ("FIXME",))
    assert required_literals("(?:TODO|FIX(ME)?)") == (("TODO",), ("FIX",))
    assert required_literals("TODO|.*") == ()


_PIECES = [
    "ab", "a", "b", " ", "A", r"\bab", "ab|xy", "c|b ", "ks", "si|k", "a|b", "(a|bc)", "^a", "a$", r"\Aa", r"b\Z",
    "(?!a)b", "a.*b", r"\s+", "[ab]+c", "a{2}", "(?<=a)b", "(?<!a)b", "x?y", r"\d", ".", "(?:ab)+", "$", "^", r"[^a]",
    r"\w+", r"b(?!\s)", r"(?<!\s)a", "a|",
]


# Where a line alone matches but the whole text does not at the same place: the finder must try these line by line.
@example([r"\Aa"], True, "b\na")
@example([r"b\Z"], True, "b\nb")
@example([r"b(?!\s)"], True, "b\nb")
@example([r"(?<!\s)a"], True, "b\na")
@example(["(a|bc)", r"(?<!\s)a"], False, "b\naa")
@example(["ks|i"], True, "x\n\u212a\u017f\n\u0130\u0131")  # the letters that fold to ASCII ones
@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3), st.booleans(),
       st.text(alphabet="ab cxy1\n\tABKkiIsS\u212a\u0130\u0131\u017f", max_size=60))
def test_the_line_finder_finds_exactly_the_lines_a_plain_search_finds(pieces: list[str], fold: bool,
                                                                         text: str) -> None:
    source = "".join(pieces)
    flags = re.IGNORECASE if fold else 0
    finder = LineFinder.of(source, flags)
    lines = text.split("\n")
    if text.endswith("\n") or not text:
        lines.pop()
    plain = re.compile(source, flags)
    expected = [(number, line) for number, line in enumerate(lines, start=1) if plain.search(line)]

    assert [(number, line) for number, line, _ in finder.lines(text)] == expected
    if expected:
        assert finder.may_match(text.encode())
