"""The undo journal (agent_loop/journal.py) and the undo (agent_loop/undo.py) under the real edit tools: the
cap, an editor's buffers, a write journaled but never made, a torn line, a journal that cannot be written,
before-images stored once, hostile journal lines, signatures and the key, reading in bounded memory.

The real dsh drives ``/undo`` in tests/reliability/test_undo.py; here the tools run in-process with the
journal in their session state, as the agent puts it there."""

from __future__ import annotations

import json
import os
import stat
import tracemalloc
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.agent_loop.journal import JOURNAL_KEY, Journal, JournalError, digest
from dsh.agent_loop.tools import ToolContext, ToolOutput, default_tools, run_tool_call
from dsh.agent_loop.undo import undo_turn
from dsh.llm import ToolCall
from tests.agent_loop.test_file_access import Buffers

pytestmark = pytest.mark.anyio


async def _yes(request: object) -> str:
    return "yes"


class Turns:
    """The default tools of one session with a journal, one turn at a time."""

    def __init__(self, tree: Path, journal: Journal, files: Buffers | None = None) -> None:
        self.registry = default_tools(files=files)
        self.journal = journal
        self.state: dict[str, Any] = {JOURNAL_KEY: journal}
        self.tree = tree
        self.turn = 1

    async def __call__(self, name: str, **args: Any) -> ToolOutput:
        ctx = ToolContext(cwd=self.tree, turn=self.turn, notify=lambda event: None, approver=_yes,
                          session_state=self.state)
        return await run_tool_call(self.registry, ToolCall("c", name, json.dumps(args)), ctx)

    async def undo(self, turn: int, files: Buffers | None = None) -> list[str]:
        report = await undo_turn(self.journal, turn, files, anyio.to_thread.run_sync)
        return report.lines


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    return Path(os.path.realpath(root))


async def test_past_the_cap_the_oldest_turns_are_dropped_and_the_blobs_stay_bounded(tmp_path: Path, tree: Path) -> None:
    journal = Journal(tmp_path / "s.journal", cap=3000)
    turns = Turns(tree, journal)
    for turn in range(1, 6):  # each turn rewrites a 1000-byte file with new content
        turns.turn = turn
        (tree / f"f{turn}.txt").write_text(str(turn) * 1000)
        await turns("read_file", path=f"f{turn}.txt")
        assert (await turns("write_file", path=f"f{turn}.txt", content="new\n")).text.startswith("wrote")
        assert journal.blob_bytes <= 3000
    assert journal.undoable_turns() == [5, 4, 3] and journal.dropped_turns() == [1, 2]
    assert sum(p.stat().st_size for p in (tmp_path / "s.journal" / "blobs").iterdir()) == 3000
    reloaded = Journal(tmp_path / "s.journal", cap=3000)  # what a resume sees
    assert reloaded.undoable_turns() == [5, 4, 3] and reloaded.dropped_turns() == [1, 2]


async def test_the_running_turn_is_kept_even_past_the_cap(tmp_path: Path, tree: Path) -> None:
    journal = Journal(tmp_path / "s.journal", cap=100)
    turns = Turns(tree, journal)
    (tree / "big.txt").write_text("b" * 500)
    await turns("read_file", path="big.txt")
    await turns("write_file", path="big.txt", content="small\n")
    assert journal.undoable_turns() == [1]
    assert await turns.undo(1) == ["reverted big.txt"] and (tree / "big.txt").read_text() == "b" * 500


async def test_an_editor_s_buffer_is_journaled_and_reverted_through_the_editor(tmp_path: Path, tree: Path) -> None:
    files = Buffers({tree / "a.txt": "one\r\ntwo\r\n"})
    journal = Journal(tmp_path / "s.journal")
    turns = Turns(tree, journal, files)
    await turns("read_file", path="a.txt")
    assert (await turns("edit_file", path="a.txt", old_string="two", new_string="2")).text.startswith("edited")
    assert (await turns("write_file", path="new.txt", content="x\n")).text.startswith("created")
    assert files.texts[tree / "a.txt"] == "one\r\n2\r\n"
    assert await turns.undo(1, files) == [
        "reverted a.txt",
        "new.txt was created through the editor, which dsh cannot delete files through; not removed",
    ]
    assert files.texts[tree / "a.txt"] == "one\r\ntwo\r\n" and not (tree / "a.txt").exists()


async def test_an_editor_change_is_undone_on_disk_once_the_editor_saved_it(tmp_path: Path, tree: Path) -> None:
    files = Buffers({tree / "a.txt": "one\n"})
    journal = Journal(tmp_path / "s.journal")
    turns = Turns(tree, journal, files)
    await turns("read_file", path="a.txt")
    await turns("edit_file", path="a.txt", old_string="one", new_string="1")
    (tree / "a.txt").write_text(files.texts[tree / "a.txt"])  # the editor saved; a terminal dsh resumes
    assert await Turns(tree, Journal(tmp_path / "s.journal")).undo(1) == ["reverted a.txt"]
    assert (tree / "a.txt").read_text() == "one\n"


async def test_a_change_journaled_but_never_written_is_left_as_it_is(tmp_path: Path, tree: Path) -> None:
    """A SIGKILL between the journal's fsync and the write: the file is as it was, and the undo says so."""
    (tree / "a.txt").write_bytes(b"as it was\n")
    journal = Journal(tmp_path / "s.journal")
    journal.record(1, tree / "a.txt", tree, b"as it was\n", b"never written\n")
    journal.record(1, tree / "b.txt", tree, None, b"never created\n")
    journal.close()
    turns = Turns(tree, Journal(tmp_path / "s.journal"))
    assert await turns.undo(1) == ["reverted a.txt (already as before)", "reverted b.txt (already gone)"]
    assert (tree / "a.txt").read_bytes() == b"as it was\n"


async def test_a_withdrawn_change_is_not_undone(tmp_path: Path, tree: Path) -> None:
    journal = Journal(tmp_path / "s.journal")
    seq = journal.record(1, tree / "a.txt", tree, b"x", b"y")
    journal.withdraw(seq)
    assert journal.undoable_turns() == [] and Journal(tmp_path / "s.journal").undoable_turns() == []


async def test_a_torn_last_line_is_ignored_and_cut_before_the_next_record(tmp_path: Path, tree: Path) -> None:
    (tree / "a.txt").write_text("before\n")
    journal = Journal(tmp_path / "s.journal")
    turns = Turns(tree, journal)
    await turns("read_file", path="a.txt")
    await turns("write_file", path="a.txt", content="after\n")
    journal.close()
    index = tmp_path / "s.journal" / "journal.jsonl"
    with index.open("ab") as file:
        file.write(b'{"type":"change","seq":2,"tur')  # a SIGKILL mid-write
    turns = Turns(tree, Journal(tmp_path / "s.journal"))
    assert await turns.undo(1) == ["reverted a.txt"]
    lines = index.read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(line)["type"] for line in lines[:-1]] == ["change", "undo"]


async def test_an_edit_whose_journal_cannot_be_written_is_not_made(tmp_path: Path, tree: Path) -> None:
    (tmp_path / "s.journal").write_text("planted: not a directory")
    (tree / "a.txt").write_text("before\n")
    turns = Turns(tree, Journal(tmp_path / "s.journal"))
    await turns("read_file", path="a.txt")
    result = await turns("write_file", path="a.txt", content="after\n")
    assert result.text == "Error: a.txt was not written: its undo journal cannot be written (Not a directory)"
    assert result.is_error and (tree / "a.txt").read_text() == "before\n"


async def test_a_before_image_is_stored_once_however_often_it_recurs(tmp_path: Path, tree: Path) -> None:
    journal = Journal(tmp_path / "s.journal")
    for name in ("a.txt", "b.txt", "c.txt"):
        journal.record(1, tree / name, tree, b"same text\n" * 100, b"other")
    journal.record(2, tree / "a.txt", tree, b"same text\n" * 100, b"other")
    assert journal.blob_bytes == 1000 and len(list((tmp_path / "s.journal" / "blobs").iterdir())) == 1


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=2000), names=st.lists(st.from_regex(r"[a-z]{1,8}\.txt", fullmatch=True),
                                                      min_size=1, max_size=4, unique=True))
def test_any_bytes_come_back_exactly(tmp_path_factory: pytest.TempPathFactory, data: bytes, names: list[str]) -> None:
    """Whatever a file held (binary, CRLF, a BOM, bad UTF-8), the undo puts those bytes back."""
    base = Path(os.path.realpath(tmp_path_factory.mktemp("any")))
    journal = Journal(base / "s.journal")
    for name in names:
        (base / name).write_bytes(b"dsh wrote this")
        journal.record(1, base / name, base, data, b"dsh wrote this")

    async def undo() -> list[str]:
        return (await undo_turn(journal, 1, None, anyio.to_thread.run_sync)).lines

    lines = anyio.run(undo)
    assert all(line.startswith("reverted ") for line in lines)
    assert all((base / name).read_bytes() == data for name in names)


_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=70), st.lists(st.integers(1, 3)),
                   st.just("../" * 3 + "etc/passwd"), st.just("a" * 64), st.just("/"))


@settings(max_examples=150, deadline=None)
@given(records=st.lists(st.fixed_dictionaries({}, optional={
    key: _VALUE for key in ("type", "seq", "turn", "root", "path", "before", "before_size", "after", "after_size",
                            "via", "turns", "undos", "reverted", "kept")}), max_size=8),
       garbage=st.binary(max_size=40), signed=st.booleans())
def test_a_hostile_journal_loads_and_undoes_nothing_outside(tmp_path_factory: pytest.TempPathFactory,
                                                           records: list[dict[str, Any]], garbage: bytes,
                                                           signed: bool) -> None:
    """Whatever the index holds (a damaged disk, a hand edit; even signed, as if dsh had written it wrong),
    loading it never raises, and an undo of it writes nothing: no record can name a blob outside ``blobs/``
    or a before-image that is not there."""
    base = Path(os.path.realpath(tmp_path_factory.mktemp("hostile")))
    (base / "s.journal" / "blobs").mkdir(parents=True)
    journal = Journal(base / "s.journal", key_file=base / "journal.key")
    encode = journal._signed if signed else (lambda record: json.dumps(record).encode() + b"\n")
    lines = b"".join(encode(record) for record in records if record) + garbage
    (base / "s.journal" / "journal.jsonl").write_bytes(lines)

    async def undo_all() -> None:
        for turn in journal.undoable_turns():
            await undo_turn(journal, turn, None, anyio.to_thread.run_sync)

    anyio.run(undo_all)
    journal.untold()
    journal.dropped_turns()
    assert sorted(path.name for path in base.iterdir() if path.name != "journal.key") == ["s.journal"]


# --- signatures: only what this dsh wrote is trusted (docs/safety.md, "Undo and rewind") -------------------


def _edited(tree: Path, journal: Journal) -> None:
    """Turn 1 changed a.txt from ``before`` to ``after`` (journaled, then written)."""
    journal.record(1, tree / "a.txt", tree, b"before\n", b"after\n")
    (tree / "a.txt").write_bytes(b"after\n")
    journal.close()


def _index(journal_dir: Path) -> Path:
    return journal_dir / "journal.jsonl"


async def test_a_journal_is_trusted_with_its_key_and_with_no_other(tmp_path: Path, tree: Path) -> None:
    key = tmp_path / "state" / "journal.key"
    _edited(tree, Journal(tmp_path / "s.journal", key_file=key))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    other = Journal(tmp_path / "s.journal", key_file=tmp_path / "elsewhere" / "journal.key")
    assert other.undoable_turns() == [] and other.untrusted_entries == 1
    same = Journal(tmp_path / "s.journal", key_file=key)
    assert same.undoable_turns() == [1] and same.untrusted_entries == 0
    assert await Turns(tree, same).undo(1) == ["reverted a.txt"] and (tree / "a.txt").read_bytes() == b"before\n"


@pytest.mark.parametrize("tamper", ["edit a field", "drop the mac", "another journal's line"])
def test_a_line_changed_after_signing_is_not_trusted(tmp_path: Path, tree: Path, tamper: str) -> None:
    key = tmp_path / "journal.key"
    _edited(tree, Journal(tmp_path / "s.journal", key_file=key))
    line = _index(tmp_path / "s.journal").read_bytes()
    where = tmp_path / "s.journal"
    if tamper == "edit a field":
        line = line.replace(b'"path":"a.txt"', b'"path":"b.txt"')
    elif tamper == "drop the mac":
        line = json.dumps({k: v for k, v in json.loads(line).items() if k != "mac"}).encode() + b"\n"
    else:  # the same signed line under another session's name: a signature covers the journal's name
        where = tmp_path / "other.journal"
        where.mkdir()
    _index(where).write_bytes(line)
    journal = Journal(where, key_file=key)
    assert journal.undoable_turns() == [] and journal.untrusted_entries == 1


def test_a_signed_change_next_to_planted_lines_is_kept_and_they_are_counted(tmp_path: Path, tree: Path) -> None:
    key = tmp_path / "journal.key"
    journal = Journal(tmp_path / "s.journal", key_file=key)
    journal.record(1, tree / "a.txt", tree, b"x", b"y")
    journal.close()
    with _index(tmp_path / "s.journal").open("ab") as index:  # a forged undo of turn 1, and a forged change
        index.write(b'{"type":"undo","turn":1,"reverted":[],"kept":[]}\n')
        index.write(json.dumps({"type": "change", "seq": 9, "turn": 2, "root": "/", "path": "/etc/passwd",
                                "before": None, "before_size": None, "after": digest(b""), "after_size": 0,
                                "via": "disk"}).encode() + b"\n")
    reloaded = Journal(tmp_path / "s.journal", key_file=key)
    assert reloaded.undoable_turns() == [1] and reloaded.untrusted_entries == 2
    assert reloaded.untold() == (None, 0)  # a forged undo record is no note to the model either


def test_the_key_is_made_once_and_a_key_that_is_not_the_user_s_file_is_refused(tmp_path: Path, tree: Path) -> None:
    key = tmp_path / "journal.key"
    Journal(tmp_path / "a.journal", key_file=key).record(1, tree / "a.txt", tree, None, b"y")
    made = key.read_bytes()
    Journal(tmp_path / "b.journal", key_file=key).record(1, tree / "b.txt", tree, None, b"y")
    assert key.read_bytes() == made and len(made) == 32
    key.chmod(0o644)  # loosened by a copy or a restore: tightened again, the user's own file
    assert Journal(tmp_path / "a.journal", key_file=key).undoable_turns() == [1]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    key.unlink()
    key.symlink_to(tmp_path / "planted.key")
    (tmp_path / "planted.key").write_bytes(made)
    with pytest.raises(JournalError, match="cannot read or make the undo journal's key"):
        Journal(tmp_path / "c.journal", key_file=key).record(1, tree / "c.txt", tree, None, b"y")


# --- bounded reading --------------------------------------------------------------------------------------


def test_a_huge_index_line_is_skipped_unread_and_counted(tmp_path: Path, tree: Path) -> None:
    """A line past journal.MAX_LINE is never held: the memory to load a 40 MB line stays a few chunks."""
    key = tmp_path / "journal.key"
    _edited(tree, Journal(tmp_path / "s.journal", key_file=key))
    with _index(tmp_path / "s.journal").open("ab") as index:
        index.write(b'{"type":"change","path":"' + b"p" * (40 << 20) + b'"}\n')
    tracemalloc.start()
    try:
        journal = Journal(tmp_path / "s.journal", key_file=key)
        assert journal.undoable_turns() == [1] and journal.untrusted_entries == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20, f"{peak} bytes to load the journal"  # before: the whole file, twice


async def test_a_torn_line_of_any_length_is_cut_before_the_next_record(tmp_path: Path, tree: Path) -> None:
    key = tmp_path / "journal.key"
    _edited(tree, Journal(tmp_path / "s.journal", key_file=key))
    with _index(tmp_path / "s.journal").open("ab") as index:
        index.write(b"x" * (3 << 20))  # a torn tail longer than any chunk read, no newline
    journal = Journal(tmp_path / "s.journal", key_file=key)
    journal.record(2, tree / "b.txt", tree, None, b"new\n")
    journal.close()
    reloaded = Journal(tmp_path / "s.journal", key_file=key)
    assert reloaded.undoable_turns() == [2, 1] and reloaded.untrusted_entries == 0


async def test_a_before_image_of_another_size_than_journaled_is_not_read(tmp_path: Path, tree: Path) -> None:
    key = tmp_path / "journal.key"
    _edited(tree, Journal(tmp_path / "s.journal", key_file=key))
    [blob] = (tmp_path / "s.journal" / "blobs").iterdir()
    blob.write_bytes(b"before\n" + b"\0" * (8 << 20))  # grown behind dsh's back: refused by its size
    assert await Turns(tree, Journal(tmp_path / "s.journal", key_file=key)).undo(1) == [
        "a.txt: its before-image is missing from the journal; not reverted"]
    assert (tree / "a.txt").read_bytes() == b"after\n"
