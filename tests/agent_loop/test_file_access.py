"""The file tools through a :class:`~dsh.agent_loop.tools.FileAccess` (an editor's buffers under ``dsh acp``):
inside the tree they read and write through it; dsh's own checks stay in front (a symlink out of the tree, a path
outside it: the local tools), and an edit still needs the text the model read (agent_loop/tools/file_access.py).

``Buffers`` is a whole FileAccess (a dict of texts), as an editor's would be; tests/repl/test_acp_agent.py drives
the real one over ACP."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.tools import ToolContext, ToolOutput, default_tools, run_tool_call
from dsh.llm import ToolCall

pytestmark = pytest.mark.anyio


class Buffers:
    def __init__(self, texts: dict[Path, str]) -> None:
        self.texts = texts
        self.reads: list[Path] = []
        self.writes: list[tuple[Path, str]] = []

    async def read_text(self, path: Path) -> str:
        self.reads.append(path)
        if path not in self.texts:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        return self.texts[path]

    async def write_text(self, path: Path, text: str) -> None:
        self.writes.append((path, text))
        self.texts[path] = text


async def _call(tree: Path, files: Buffers, ctx: ToolContext, name: str, **args: Any) -> ToolOutput:
    registry = default_tools(files=files)
    return await run_tool_call(registry, ToolCall("c", name, json.dumps(args)), ctx)


def _ctx(tree: Path) -> ToolContext:
    async def yes(request: object) -> str:
        return "yes"

    return ToolContext(cwd=tree, turn=1, notify=lambda event: None, approver=yes)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    return Path(os.path.realpath(root))


async def test_inside_the_tree_the_buffer_is_read_and_edited_not_the_disk(tree: Path) -> None:
    (tree / "a.txt").write_text("disk\n")
    files = Buffers({tree / "a.txt": "buffer one\nbuffer two\n"})
    ctx = _ctx(tree)
    assert (await _call(tree, files, ctx, "read_file", path="a.txt", offset=2)).text == "buffer two\n"
    edited = await _call(tree, files, ctx, "edit_file", path="a.txt", old_string="one", new_string="1")
    assert edited.text == "edited a.txt: 1 replacement (+1 -1)"
    assert files.writes == [(tree / "a.txt", "buffer 1\nbuffer two\n")]
    assert (tree / "a.txt").read_text() == "disk\n"
    created = await _call(tree, files, ctx, "write_file", path="new.txt", content="fresh\n")
    assert created.text == "created new.txt (1 line)" and files.texts[tree / "new.txt"] == "fresh\n"


async def test_a_buffer_changed_since_it_was_read_is_not_edited(tree: Path) -> None:
    files = Buffers({tree / "a.txt": "one\n"})
    ctx = _ctx(tree)
    unread = await _call(tree, files, ctx, "edit_file", path="a.txt", old_string="one", new_string="1")
    assert unread.text == "Error: a.txt has not been read yet; read it with read_file before changing it"
    await _call(tree, files, ctx, "read_file", path="a.txt")
    files.texts[tree / "a.txt"] = "one, typed in the editor since\n"
    stale = await _call(tree, files, ctx, "edit_file", path="a.txt", old_string="one", new_string="1")
    assert stale.text == "Error: a.txt changed since it was last read; read it again with read_file"
    assert files.writes == []


async def test_a_symlink_out_of_the_tree_and_a_path_outside_it_stay_with_the_local_tools(tree: Path,
                                                                                        tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside on disk\n")
    os.symlink(outside, tree / "link.txt")
    files = Buffers({Path(os.path.realpath(outside)): "never asked"})
    ctx = _ctx(tree)
    assert (await _call(tree, files, ctx, "read_file", path="link.txt")).text == "outside on disk\n"
    assert (await _call(tree, files, ctx, "read_file", path=str(outside))).text == "outside on disk\n"
    assert files.reads == []
