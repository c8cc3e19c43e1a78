"""The one safe open (``dsh.agent_loop.safe_open``) and its users, on real FIFOs, sockets, devices and links.

Every open here would hang the test if it waited on a FIFO with no writer: the timeout is the hang guard,
not a speed bound.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop import SessionLog, SessionLogError
from dsh.agent_loop.project import find_git_dir, project_root, read_git_file
from dsh.agent_loop.safe_open import NotRegularFile, open_regular, open_regular_fd, read_regular
from dsh.agent_loop.tools.edit_paths import GIT_CONFIG, git_area
from dsh.llm import error_chain

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kinds(tmp_path: Path) -> Iterator[dict[str, tuple[Path, str]]]:
    """Paths of each kind that is not a regular file, with how a message names it."""
    os.mkfifo(tmp_path / "pipe")  # no writer: a blocking open would wait forever
    (tmp_path / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        yield {
            "fifo": (tmp_path / "pipe", "a FIFO"),
            "socket": (tmp_path / "sock", "a socket"),
            "directory": (tmp_path / "dir", "a directory"),
            "character device": (Path("/dev/null"), "a character device"),
        }


def _open_following(path: Path) -> Any:
    with open_regular(path) as file:
        return file.read()


def _open_not_following(path: Path) -> Any:
    fd, _ = open_regular_fd(path, follow_symlinks=False)
    os.close(fd)


def _read_bounded(path: Path) -> Any:
    return read_regular(path, 100)


OPENS: dict[str, Callable[[Path], Any]] = {
    "open_regular": _open_following,
    "open_regular_fd(follow_symlinks=False)": _open_not_following,
    "read_regular": _read_bounded,
}


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "character device"])
@pytest.mark.parametrize("opener", sorted(OPENS))
def test_what_is_not_a_regular_file_is_refused_by_name_and_never_waited_on(
    kinds: dict[str, tuple[Path, str]], kind: str, opener: str
) -> None:
    path, named = kinds[kind]
    with pytest.raises(NotRegularFile) as caught:
        OPENS[opener](path)
    assert str(caught.value) == f"{path} is {named}, not a regular file"
    assert caught.value.kind == named


def test_a_link_is_followed_only_when_asked_and_refused_with_eloop_otherwise(
    tmp_path: Path, kinds: dict[str, tuple[Path, str]]
) -> None:
    (tmp_path / "real.txt").write_bytes(b"real\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    (tmp_path / "link-to-pipe").symlink_to(kinds["fifo"][0])
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")

    assert _open_following(tmp_path / "link.txt") == b"real\n"
    with pytest.raises(NotRegularFile, match="is a FIFO, not a regular file"):
        _open_following(tmp_path / "link-to-pipe")  # followed, and what it names is refused unopened
    with pytest.raises(FileNotFoundError):
        _open_following(tmp_path / "dangling")
    for name in ("link.txt", "link-to-pipe", "dangling"):
        for opener in (_open_not_following, _read_bounded):
            with pytest.raises(OSError) as caught:
                opener(tmp_path / name)
            assert caught.value.errno == errno.ELOOP, (name, opener)


def test_the_descriptor_is_the_file_blocking_and_not_inherited_by_children(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"{}\n")
    fd, info = open_regular_fd(path, os.O_RDWR | os.O_APPEND, follow_symlinks=False)
    try:
        assert (info.st_dev, info.st_ino) == (path.stat().st_dev, path.stat().st_ino)
        assert os.get_blocking(fd)
        assert not os.get_inheritable(fd)
        os.write(fd, b"[]\n")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"{}\n[]\n"


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.binary(max_size=200_000), limit=st.integers(min_value=0, max_value=250_000))
def test_read_regular_reads_at_most_the_limit_and_replaces_what_is_not_utf8(
    tmp_path: Path, data: bytes, limit: int
) -> None:
    path = tmp_path / "file"
    path.write_bytes(data)
    assert read_regular(path, limit) == data[:limit].decode("utf-8", "replace")


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_session_log_that_is_not_a_regular_file_fails_with_one_line(
    tmp_path: Path, kinds: dict[str, tuple[Path, str]], kind: str
) -> None:
    # A socket used to fail with the open's ENXIO text beneath the line; now it is named like a FIFO.
    path, named = kinds[kind]
    with pytest.raises(SessionLogError) as caught:
        SessionLog.open(str(path))
    assert error_chain(caught.value) == f"session log {path} is not a regular file ({named})"


def test_a_symlinked_session_log_fails_with_one_line_and_no_errno_text(tmp_path: Path) -> None:
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    with pytest.raises(SessionLogError) as caught:
        SessionLog.open("zero", root=tmp_path)
    expected = f"session log {tmp_path / 'zero.jsonl'} is a symbolic link; dsh opens only regular files"
    assert error_chain(caught.value) == expected


def test_git_files_that_are_fifos_or_links_are_not_read_and_nothing_waits(
    tmp_path: Path, kinds: dict[str, tuple[Path, str]]
) -> None:
    assert read_git_file(kinds["fifo"][0]) is None
    secret = tmp_path / "environ"
    secret.write_text("gitdir: /leaked\n", encoding="utf-8")
    (tmp_path / "HEAD").symlink_to(secret)
    assert read_git_file(tmp_path / "HEAD") is None  # never through a symlink

    worktree = tmp_path / "worktree"
    worktree.mkdir()
    os.mkfifo(worktree / ".git")  # neither a directory nor a gitdir file: not a repository, and not waited on
    assert find_git_dir(worktree) is None
    assert project_root(worktree) == worktree


def test_a_gitdir_file_leads_the_project_root_and_the_git_area_to_the_same_git_directory(tmp_path: Path) -> None:
    worktree = Path(os.path.realpath(tmp_path)) / "wt"
    (worktree / "src").mkdir(parents=True)
    (worktree / "hidden").mkdir()
    (worktree / ".git").write_text("gitdir: hidden\n", encoding="utf-8")  # relative to the file's directory
    assert find_git_dir(worktree / "src") == (worktree, worktree / "hidden")
    assert project_root(worktree / "src") == worktree
    assert git_area(worktree / "hidden" / "config") == GIT_CONFIG  # no .git in the path: the file names it
    assert git_area(worktree / "src" / "main.py") is None
    store = tmp_path / "store"
    (worktree / ".git").write_text(f"gitdir: {store}\n", encoding="utf-8")
    assert find_git_dir(worktree) == (worktree, store)
