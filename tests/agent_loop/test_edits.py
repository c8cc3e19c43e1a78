"""write_file and edit_file on real files: exact edits, atomic writes, mode/CRLF/BOM kept, stale reads, approval."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop import Completed, ToolContext, ToolOutput, default_tools
from dsh.agent_loop.tools import run_tool_call
from dsh.agent_loop.tools.edits import EDIT_DENIED, EDIT_MAX_BYTES, EDIT_NO_APPROVER, EditRequest
from dsh.llm import ToolCall
from dsh.llm.loopback.fault_server import Behaviour
from dsh.llm.redact import Redactor
from tests.agent_loop.agent_support import read_log

pytestmark = pytest.mark.anyio


class Approver:
    """Answers every question with ``answer`` and keeps what it was asked."""

    def __init__(self, answer: str | None = "yes") -> None:
        self.answer = answer
        self.asked: list[EditRequest] = []
        self.during: Any = None  # called while "the user looks at the diff"

    async def __call__(self, request: EditRequest) -> str | None:
        self.asked.append(request)
        if self.during is not None:
            self.during()
        return self.answer


class Tools:
    """The default tools in one session (one ``session_state``) rooted at a working tree."""

    def __init__(self, cwd: Path, approver: Any = None, *, allow_edits: bool = False,
                 redactor: Redactor | None = None) -> None:
        self.registry = default_tools(approver, allow_edits=allow_edits)
        self.ctx = ToolContext(cwd=cwd, turn=1, notify=lambda event: None, redact=redactor or Redactor())

    async def __call__(self, name: str, **args: Any) -> ToolOutput:
        return await run_tool_call(self.registry, ToolCall("c1", name, json.dumps(args)), self.ctx)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


async def test_edit_replaces_exactly_once_after_a_read(work: Path) -> None:
    (work / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    approver = Approver()
    tools = Tools(work, approver)
    await tools("read_file", path="notes.txt")
    result = await tools("edit_file", path="notes.txt", old_string="beta", new_string="BETA")
    assert result == ToolOutput("edited notes.txt: 1 replacement (+1 -1)")
    assert (work / "notes.txt").read_text() == "alpha\nBETA\ngamma\n"
    [request] = approver.asked
    assert request == EditRequest(
        "edit_file", "notes.txt",
        "--- notes.txt\n+++ notes.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma", 1, 1, False, False,
    )
    assert request.subject == "notes.txt (+1 -1)"
    # our own write is the new "last read": a second edit needs no second read
    again = await tools("edit_file", path="notes.txt", old_string="gamma", new_string="GAMMA")
    assert again.text == "edited notes.txt: 1 replacement (+1 -1)"


async def test_absent_and_not_unique_old_strings_say_which(work: Path) -> None:
    (work / "a.py").write_text("x = 1\nx = 1\ny = 2\n")
    tools = Tools(work, Approver())
    await tools("read_file", path="a.py")
    absent = await tools("edit_file", path="a.py", old_string="z = 3", new_string="z = 4")
    assert absent == ToolOutput("Error: old_string not found in a.py", is_error=True)
    twice = await tools("edit_file", path="a.py", old_string="x = 1", new_string="x = 9")
    assert twice == ToolOutput(
        "Error: old_string occurs 2 times in a.py; pass replace_all or a longer old_string", is_error=True
    )
    assert (work / "a.py").read_text() == "x = 1\nx = 1\ny = 2\n"
    every = await tools("edit_file", path="a.py", old_string="x = 1", new_string="x = 9", replace_all=True)
    assert every.text == "edited a.py: 2 replacements (+2 -2)"
    assert (work / "a.py").read_text() == "x = 9\nx = 9\ny = 2\n"
    same = await tools("edit_file", path="a.py", old_string="y", new_string="y")
    assert same == ToolOutput("Error: old_string and new_string are the same; nothing to change", is_error=True)
    missing = await tools("edit_file", path="nope.py", old_string="a", new_string="b")
    assert missing == ToolOutput("Error: nope.py does not exist; create it with write_file", is_error=True)
    empty = await tools("edit_file", path="a.py", old_string="", new_string="b")
    assert empty == ToolOutput("Error: old_string must not be empty", is_error=True)


async def test_an_unread_or_changed_file_is_refused_and_a_new_file_needs_no_read(work: Path) -> None:
    path = work / "f.txt"
    path.write_text("one\n")
    approver = Approver()
    tools = Tools(work, approver)
    unread = await tools("edit_file", path="f.txt", old_string="one", new_string="two")
    assert unread == ToolOutput(
        "Error: f.txt has not been read yet; read it with read_file before changing it", is_error=True
    )
    overwrite = await tools("write_file", path="f.txt", content="two\n")
    assert overwrite.text == unread.text
    await tools("read_file", path="f.txt")
    path.write_text("one, changed by someone else\n")  # a different size
    stale = await tools("edit_file", path="f.txt", old_string="one", new_string="two")
    assert stale == ToolOutput(
        "Error: f.txt changed on disk since it was last read; read it again with read_file", is_error=True
    )
    await tools("read_file", path="f.txt")
    os.utime(path, ns=(1, 1))  # the same size, another modification time
    assert (await tools("write_file", path="f.txt", content="two\n")).text == stale.text
    assert path.read_text() == "one, changed by someone else\n"
    assert approver.asked == []  # nothing stale or unread reaches the user
    created = await tools("write_file", path="new/dir/g.txt", content="hello\nworld\n")
    assert created == ToolOutput("created new/dir/g.txt (2 lines)")
    assert (work / "new" / "dir" / "g.txt").read_text() == "hello\nworld\n"
    assert approver.asked[-1].diff == "--- /dev/null\n+++ new/dir/g.txt\n@@ -0,0 +1,2 @@\n+hello\n+world"
    assert approver.asked[-1].subject == "new/dir/g.txt (new file, +2)"


async def test_a_file_changed_while_the_user_looks_at_the_diff_is_not_overwritten(work: Path) -> None:
    path = work / "f.txt"
    path.write_text("one\n")
    approver = Approver()
    tools = Tools(work, approver)
    await tools("read_file", path="f.txt")
    approver.during = lambda: path.write_text("edited in another window\n")
    result = await tools("edit_file", path="f.txt", old_string="one", new_string="two")
    assert result == ToolOutput(
        "Error: f.txt changed on disk since it was last read; read it again with read_file", is_error=True
    )
    assert path.read_text() == "edited in another window\n"
    approver.during = None
    again = await tools("write_file", path="f.txt", content="x\n")  # the stamp was dropped: read again first
    assert again.text.startswith("Error: f.txt has not been read yet")


async def test_writes_are_atomic_and_keep_mode_crlf_and_bom(work: Path) -> None:
    path = work / "run.sh"
    path.write_bytes("\ufeff#!/bin/sh\r\necho one\r\necho two\r\n".encode())
    path.chmod(0o750)
    os.link(path, work / "old-inode")  # a hard link keeps the inode the file had before the edit
    tools = Tools(work, Approver())
    await tools("read_file", path="run.sh")
    result = await tools("edit_file", path="run.sh", old_string="echo one\necho two", new_string="echo 1\necho 2")
    assert result.text == "edited run.sh: 1 replacement (+2 -2)"
    assert path.read_bytes() == "\ufeff#!/bin/sh\r\necho 1\r\necho 2\r\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    # the old inode was replaced (a temp file renamed over it), not rewritten in place
    assert (work / "old-inode").read_bytes() == "\ufeff#!/bin/sh\r\necho one\r\necho two\r\n".encode()
    assert sorted(p.name for p in work.iterdir()) == ["old-inode", "run.sh"]  # no temp file left
    # a CRLF old_string matches too, and write_file keeps CRLF and the BOM
    crlf = await tools("edit_file", path="run.sh", old_string="echo 1\r\n", new_string="echo uno\r\n")
    assert crlf.text == "edited run.sh: 1 replacement (+1 -1)"
    await tools("write_file", path="run.sh", content="#!/bin/sh\nexit 0\n")
    assert path.read_bytes() == "\ufeff#!/bin/sh\r\nexit 0\r\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o750


async def test_a_failed_write_leaves_the_file_and_no_temp_file(work: Path, monkeypatch) -> None:
    path = work / "f.txt"
    path.write_text("keep me\n")
    tools = Tools(work, Approver())
    await tools("read_file", path="f.txt")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    result = await tools("write_file", path="f.txt", content="new\n")
    assert result == ToolOutput("Error: [Errno 28] No space left on device", is_error=True)
    assert path.read_text() == "keep me\n"
    assert [p.name for p in work.iterdir()] == ["f.txt"]


async def test_a_new_file_gets_the_umask_mode_and_a_symlink_keeps_pointing_at_its_target(work: Path) -> None:
    old = os.umask(0o022)
    try:
        tools = Tools(work, Approver())
        await tools("write_file", path="n.txt", content="x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((work / "n.txt").stat().st_mode) == 0o644
    (work / "target.txt").write_text("a\n")
    (work / "link.txt").symlink_to("target.txt")
    await tools("read_file", path="link.txt")
    assert (await tools("edit_file", path="link.txt", old_string="a", new_string="b")).text == (
        "edited target.txt: 1 replacement (+1 -1)"
    )
    assert (work / "link.txt").is_symlink() and (work / "target.txt").read_text() == "b\n"


async def test_binary_undecodable_and_non_regular_files_are_refused(work: Path) -> None:
    (work / "bin").write_bytes(b"\x7fELF\x00\x01")
    (work / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    os.mkfifo(work / "pipe")  # no writer: a blocking open would wait forever
    tools = Tools(work, Approver())
    with anyio.fail_after(5):  # refused before any freshness check, and never blocked on the FIFO
        binary = await tools("write_file", path="bin", content="text\n")
        latin = await tools("edit_file", path="latin1.txt", old_string="caf", new_string="cafe")
        fifo = await tools("write_file", path="pipe", content="x\n")
    assert binary == ToolOutput(
        "Error: bin looks like a binary file; write_file and edit_file change only UTF-8 text", is_error=True
    )
    assert latin == ToolOutput(
        "Error: latin1.txt is not valid UTF-8; write_file and edit_file change only UTF-8 text", is_error=True
    )
    assert fifo == ToolOutput(f"Error: {os.path.realpath(work / 'pipe')} is a FIFO, not a regular file", is_error=True)
    assert (work / "bin").read_bytes() == b"\x7fELF\x00\x01"


async def test_no_always_and_outside_paths(work: Path, tmp_path: Path) -> None:
    (work / "f.txt").write_text("one\n")
    approver = Approver("no")
    tools = Tools(work, approver)
    await tools("read_file", path="f.txt")
    denied = await tools("edit_file", path="f.txt", old_string="one", new_string="two")
    assert denied == ToolOutput(EDIT_DENIED, is_error=True) and denied.text == "Error: the user denied this edit"
    assert (work / "f.txt").read_text() == "one\n"
    approver.answer = "always"
    assert (await tools("edit_file", path="f.txt", old_string="one", new_string="two")).text.startswith("edited")
    approver.answer = "no"
    asked = len(approver.asked)
    # "always" holds for this tool in this session: no question, even though the approver would say no
    assert (await tools("edit_file", path="f.txt", old_string="two", new_string="three")).text.startswith("edited")
    assert len(approver.asked) == asked
    # ...but not for write_file, and never outside the working tree
    outside = tmp_path / "outside.txt"
    result = await tools("edit_file", path=str(outside), old_string="a", new_string="b")
    assert result.text == f"Error: {outside} does not exist; create it with write_file"
    outside.write_text("a\n")
    await tools("read_file", path=str(outside))
    assert await tools("edit_file", path="../outside.txt", old_string="a", new_string="b") == ToolOutput(
        EDIT_DENIED, is_error=True
    )
    assert approver.asked[-1].outside and approver.asked[-1].path == str(outside)
    assert approver.asked[-1].subject == f"{outside} (+1 -1, outside the working tree)"
    assert (await tools("write_file", path="f.txt", content="x\n")) == ToolOutput(EDIT_DENIED, is_error=True)


async def test_without_an_approver_edits_are_denied_unless_allowed_and_then_only_inside(
    work: Path, tmp_path: Path
) -> None:
    tools = Tools(work)
    denied = await tools("write_file", path="f.txt", content="x\n")
    assert denied == ToolOutput(EDIT_NO_APPROVER, is_error=True)
    assert denied.text == ("Error: file edits need approval and no one can approve them here; "
                           "--allow-edits (or allow_edits = true in config.toml) allows them")
    assert not (work / "f.txt").exists()
    allowed = Tools(work, allow_edits=True)
    assert (await allowed("write_file", path="f.txt", content="x\n")).text == "created f.txt (1 line)"
    outside = await allowed("write_file", path=str(tmp_path / "o.txt"), content="x\n")
    assert outside == ToolOutput(
        f"Error: {tmp_path / 'o.txt'} is outside the working tree; unattended edits stay inside it", is_error=True
    )
    assert not (tmp_path / "o.txt").exists()


async def test_write_of_the_same_content_is_no_change(work: Path) -> None:
    (work / "f.txt").write_text("same\n")
    approver = Approver()
    tools = Tools(work, approver)
    await tools("read_file", path="f.txt")
    same = await tools("write_file", path="f.txt", content="same\n")
    assert same == ToolOutput("(no change: f.txt already has this content)")
    assert approver.asked == []


async def test_an_edit_through_the_agent_loop_is_logged(server, make_agent, work: Path) -> None:
    (work / "f.txt").write_text("hello\n")
    server.push(
        Behaviour("tool_call", id="r1", name="read_file", arguments={"path": "f.txt"}),
        Behaviour("tool_call", id="e1", name="edit_file",
                  arguments={"path": "f.txt", "old_string": "hello", "new_string": "goodbye"}),
        Behaviour("text", text="done\n"),
    )
    approver = Approver()
    agent, _ = make_agent(server.url, tools=default_tools(approver), cwd=work)
    assert await agent.run_turn("edit it") == Completed()
    assert (work / "f.txt").read_text() == "goodbye\n"
    _, records = read_log(agent.session.path)
    outputs = [r["data"]["output"] for r in records if r["type"] == "tool/result"]
    assert outputs == ["hello\n", "edited f.txt: 1 replacement (+1 -1)"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another owner")
async def test_the_owner_is_kept_when_root_edits_someone_elses_file(work: Path) -> None:
    path = work / "theirs.txt"
    path.write_text("a\n")
    os.chown(path, 4321, 4321)
    tools = Tools(work, Approver())
    await tools("read_file", path="theirs.txt")
    assert (await tools("edit_file", path="theirs.txt", old_string="a", new_string="b")).text.startswith("edited")
    info = path.stat()
    assert (info.st_uid, info.st_gid) == (4321, 4321) and path.read_text() == "b\n"


async def test_a_line_break_in_a_file_name_is_shown_not_obeyed(work: Path) -> None:
    approver = Approver()
    tools = Tools(work, approver)
    result = await tools("write_file", path="a\n+++ forged", content="x\n")
    assert result.text == "created a\u240a+++ forged (1 line)"
    assert approver.asked[0].diff.split("\n")[:2] == ["--- /dev/null", "+++ a\u240a+++ forged"]
    assert (work / "a\n+++ forged").read_text() == "x\n"


async def test_files_and_contents_over_the_size_bound_are_refused_before_any_diff(work: Path) -> None:
    (work / "big.txt").write_bytes(b"x" * (EDIT_MAX_BYTES + 1))
    approver = Approver()
    tools = Tools(work, approver)
    big = await tools("edit_file", path="big.txt", old_string="x", new_string="y")
    assert big == ToolOutput("Error: big.txt is larger than 4 MiB; edit it another way", is_error=True)
    huge = await tools("write_file", path="huge.txt", content="y" * (EDIT_MAX_BYTES + 1))
    assert huge == ToolOutput(
        "Error: the new content of huge.txt is larger than 4 MiB; write it another way", is_error=True
    )
    assert approver.asked == [] and not (work / "huge.txt").exists()


async def test_a_file_whose_secrets_the_model_saw_masked_is_not_overwritten_with_the_mask(
    server, make_agent, work: Path
) -> None:
    key = "sk-fileSecret0123456789abcdefgh"  # key-shaped, so masked whoever configured it
    (work / "config.toml").write_text(f'model = "x"\napi_key = "{key}"\n')
    server.push(
        Behaviour("tool_call", id="r1", name="read_file", arguments={"path": "config.toml"}),
        # What the model saw, written back with one change: the key would become ***.
        Behaviour("tool_call", id="w1", name="write_file",
                  arguments={"path": "config.toml", "content": 'model = "y"\napi_key = "sk-***"\n'}),
        Behaviour("tool_call", id="e1", name="edit_file",
                  arguments={"path": "config.toml", "old_string": 'model = "x"', "new_string": 'model = "y"'}),
        Behaviour("text", text="done\n"),
    )
    approver = Approver()
    agent, _ = make_agent(server.url, tools=default_tools(approver), cwd=work)
    assert await agent.run_turn("change the model") == Completed()
    _, records = read_log(agent.session.path)
    outputs = [r["data"]["output"] for r in records if r["type"] == "tool/result"]
    assert outputs == [
        'model = "x"\napi_key = "sk-***"\n',
        "Error: config.toml holds secrets that were masked (***) when it was read; the new content would "
        "write *** over them — change the lines around them with edit_file",
        "edited config.toml: 1 replacement (+1 -1)",
    ]
    assert (work / "config.toml").read_text() == f'model = "y"\napi_key = "{key}"\n'
    # The approval shows the file as it is: a key *shape* is the user's own text, never masked there (only a
    # configured secret is: tests/agent_loop/test_edits_security.py).
    assert [request.diff.split("\n")[-1] for request in approver.asked] == [f' api_key = "{key}"']
