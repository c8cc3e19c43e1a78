"""The tree's files for ``@`` completion (agent_loop/path_index.py): git's tracked and untracked-not-ignored files,
a bounded walk outside git, fuzzy matching best first, sizes in tokens, hostile names never breaking the list."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dsh.agent_loop.path_index import PathIndex


def _index(cwd: Path) -> PathIndex:
    index = PathIndex(cwd)
    index.start()
    index.wait(30)
    assert index.listed
    return index


def test_git_files_and_untracked_not_ignored_and_their_folders(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "app.py").write_text("x" * 400)
    (tmp_path / "src" / "lib" / "util.py").write_text("")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "debug.log").write_text("ignored")
    subprocess.run(["git", "add", "src/app.py", ".gitignore"], cwd=tmp_path, check=True)
    index = _index(tmp_path)

    assert index.match("") == ["src/", ".gitignore"]
    assert index.match("app") == ["src/app.py"]
    assert index.match("SL") == ["src/lib/", "src/lib/util.py"]  # any case, in order
    assert index.match("log") == []  # ignored: not offered
    assert index.tokens("src/app.py") == 100 and index.tokens("src/") is None


def test_the_name_s_own_match_comes_first_and_shorter_paths_before_longer(tmp_path: Path) -> None:
    for path in ("app/deep/other.py", "lib/app.py", "tests/test_app.py", "zap_pie.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    index = _index(tmp_path)  # not a repository: the walk

    assert index.match("app") == ["app/", "lib/app.py", "tests/test_app.py", "app/deep/", "app/deep/other.py",
                                  "zap_pie.txt"]


def test_hostile_names_are_listed_without_breaking_the_list(tmp_path: Path) -> None:
    (tmp_path / "line\nbreak.py").write_text("")
    (tmp_path / "esc\x1b[2J.py").write_text("")
    (tmp_path / os.fsdecode(b"bad\xff.py")).write_text("")
    (tmp_path / "fine.py").write_text("")
    index = _index(tmp_path)

    assert index.match("py") == ["bad\udcff.py", "fine.py", "esc\x1b[2J.py"]  # a newline in a name: left out
    assert index.match(".*[(") == []  # the query is text, not a pattern
