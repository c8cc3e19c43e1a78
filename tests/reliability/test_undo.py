"""``/undo`` and ``/rewind N`` in the real dsh (piped stdin), edits scripted by the fault server (issue 26, item 2).

Every edit is a real ``write_file`` / ``edit_file`` call the fault server scripts, under ``--allow-edits``; the
undo is the slash command typed on the next line, or after ``--resume`` in a new process (a file changed in
between, a symlink swapped in, a SIGKILL mid-turn). The lines asserted are the exact ones the user sees
(docs/safety.md, "Undo and rewind").
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dsh_harness import FIGURES, Home, LineReader, config_text, dsh_command, dsh_env, make_home, run_dsh, stop_process

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.waiting import wait_until

NOTE_END = "Those files are as they were before that turn: read them again before changing them.]"


def _call(name: str, **arguments: object) -> Behaviour:
    return Behaviour("tool_call", name=name, arguments=arguments)


def _home(tmp_path: Path, server: FaultServer) -> Home:
    return make_home(tmp_path, config_text(extra=f'base_url = "{server.url}"\n'))


def _lines(run: object) -> list[str]:
    return run.stdout.splitlines()  # type: ignore[attr-defined]


def _after(lines: list[str], marker: str) -> list[str]:
    return lines[lines.index(marker):]


def _journal(home: Home) -> Path:
    return home.only_session().with_suffix(".journal")


def test_undo_restores_the_bytes_removes_a_created_file_and_tells_the_model(tmp_path: Path,
                                                                           server: FaultServer) -> None:
    home = _home(tmp_path, server)
    work = home.workspace
    crlf = b"\xef\xbb\xbfone\r\ntwo\r\n"  # a BOM and CRLF lines, kept by the edit and by the undo
    (work / "crlf.txt").write_bytes(crlf)
    plain = (work / "notes.txt").read_bytes()
    server.push(
        _call("read_file", path="crlf.txt"), _call("edit_file", path="crlf.txt", old_string="two", new_string="TWO"),
        _call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="rewritten\n"),
        _call("write_file", path="src/new.txt", content="fresh\n"), "text", "text",
    )
    run = run_dsh(home, ["--allow-edits"], ["change them", "/undo", "/undo", "and now?"], label="undo")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 1:")[:6] == [
        "undo turn 1:",
        "  reverted crlf.txt",
        "  reverted notes.txt",
        "  removed src/new.txt (dsh created it)",
        "nothing to undo: no turn of this session has file changes left to undo",
        "[main turn 2] Hello! How can I help you today?",
    ]
    assert (work / "crlf.txt").read_bytes() == crlf and (work / "notes.txt").read_bytes() == plain
    assert not (work / "src" / "new.txt").exists()
    # The next prompt carries the note (and the log has it with the prompt, for a resume).
    prompt = server.requests[-1].json["messages"][-1]["content"]
    assert prompt == ("[the user undid file changes with /undo, back to before turn 1: crlf.txt, notes.txt, "
                      f"src/new.txt. {NOTE_END}\n\nand now?")
    assert list((_journal(home) / "blobs").iterdir()) == []  # undone: its before-images are no longer kept


def test_a_turn_that_fails_before_any_answer_does_not_use_up_the_note(tmp_path: Path, server: FaultServer) -> None:
    """Its prompt is withdrawn from the conversation, note and all; the next prompt carries the note again."""
    home = _home(tmp_path, server)
    server.push(_call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="edited\n"),
                "text", "reset_before_headers", "text", "text")
    run = run_dsh(home, ["--allow-edits"], ["change it", "/undo", "first try", "second try", "third"], label="told")
    assert run.returncode == 0, run.stderr
    prompts = [request.json["messages"][-1]["content"] for request in server.requests[-3:]]
    note = f"[the user undid file changes with /undo, back to before turn 1: notes.txt. {NOTE_END}\n\n"
    assert prompts == [note + "first try", note + "second try", "third"]


def test_rewind_2_undoes_the_last_two_turns_that_changed_files(tmp_path: Path, server: FaultServer) -> None:
    home = _home(tmp_path, server)
    work = home.workspace
    (work / "a.txt").write_text("a0\n")
    (work / "b.txt").write_text("b0\n")
    server.push(
        _call("read_file", path="a.txt"), _call("edit_file", path="a.txt", old_string="a0", new_string="a1"), "text",
        _call("read_file", path="b.txt"), _call("edit_file", path="b.txt", old_string="b0", new_string="b2"), "text",
        "text",  # turn 3 changes nothing: not counted
        _call("edit_file", path="a.txt", old_string="a1", new_string="a4"), "text",
    )
    run = run_dsh(home, ["--allow-edits"], ["one", "two", "three", "four", "/rewind 2"], label="rewind")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 4:") == [
        "undo turn 4:", "  reverted a.txt", "undo turn 2:", "  reverted b.txt"]
    assert (work / "a.txt").read_text() == "a1\n" and (work / "b.txt").read_text() == "b0\n"
    # A resume knows what was undone: what is left is turn 1.
    run = run_dsh(home, ["--resume", "last"], ["/rewind 5", "/undo"], label="rewind-after-resume")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 1:") == [
        "undo turn 1:",
        "  reverted a.txt",
        "only 1 turn had file changes left to undo",
        "nothing to undo: no turn of this session has file changes left to undo",
    ]
    assert (work / "a.txt").read_text() == "a0\n"


def test_a_file_changed_since_is_named_and_kept_after_a_resume(tmp_path: Path, server: FaultServer) -> None:
    home = _home(tmp_path, server)
    work = home.workspace
    (work / "other.txt").write_text("other\n")
    server.push(
        _call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="x" * 120),
        _call("read_file", path="other.txt"), _call("write_file", path="other.txt", content="changed\n"), "text",
    )
    assert run_dsh(home, ["--allow-edits", "-p", "change them"], label="edit").returncode == 0
    (work / "notes.txt").write_text("y" * 98)  # the user's own change since
    run = run_dsh(home, ["--resume", "last"], ["/undo"], label="undo-after-resume")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 1:") == [
        "undo turn 1:",
        "  notes.txt changed since dsh wrote it (size 120 -> 98 bytes); not reverted",
        "  reverted other.txt",
    ]
    assert (work / "notes.txt").read_text() == "y" * 98 and (work / "other.txt").read_text() == "other\n"
    # Undone just before quitting: the model hears of it with the first prompt after the next resume.
    server.push("text")
    assert run_dsh(home, ["--resume", "last", "-p", "next?"], label="prompt-after-undo").returncode == 0
    assert server.requests[-1].json["messages"][-1]["content"] == (
        "[the user undid file changes with /undo, back to before turn 1: other.txt (not reverted, changed since: "
        f"notes.txt). {NOTE_END}\n\nnext?")


def test_kill_9_after_the_edit_then_resume_and_undo(tmp_path: Path, server: FaultServer) -> None:
    home = _home(tmp_path, server)
    work = home.workspace
    before = (work / "notes.txt").read_bytes()
    server.push(_call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="mid-turn\n"),
                "stall_before_headers")
    process = subprocess.Popen(dsh_command(["--allow-edits"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=dsh_env(home), cwd=work)
    try:
        assert process.stdin is not None
        process.stdin.write(b"change it\n")
        process.stdin.flush()
        reader = LineReader(process)
        wait_until(lambda: reader.pump(0.1) and "[tool result] wrote notes.txt" in reader.text, 60,
                   "the edit's result line")
    finally:
        stop_process(process)  # SIGKILL, the turn still open
    assert process.returncode == -9 and (work / "notes.txt").read_text() == "mid-turn\n"
    run = run_dsh(home, ["--resume", "last"], ["/undo"], label="undo-after-kill")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 1:") == ["undo turn 1:", "  reverted notes.txt"]
    assert (work / "notes.txt").read_bytes() == before


def test_kill_9_between_the_journal_and_the_write_then_resume_and_undo(tmp_path: Path,
                                                                      server: FaultServer) -> None:
    """The worst moment: the before-image is journaled, the file not yet written. The undo finds the file
    as it was and says so; nothing is overwritten."""
    home = _home(tmp_path, server)
    work = home.workspace
    before = (work / "notes.txt").read_bytes()
    server.push(_call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="never\n"))
    run = run_dsh(home, ["--allow-edits", "-p", "change it"], launcher=("-m", "tests.reliability.killed_mid_edit_dsh"),
                  label="killed-mid-edit")
    assert run.returncode == -9
    assert (work / "notes.txt").read_bytes() == before
    run = run_dsh(home, ["--resume", "last"], ["/undo", "/undo"], label="undo-after-kill-mid-edit")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 1:") == [
        "undo turn 1:",
        "  reverted notes.txt (already as before)",
        "nothing to undo: no turn of this session has file changes left to undo",
    ]
    assert (work / "notes.txt").read_bytes() == before


def test_a_symlink_swapped_in_after_the_edit_is_not_followed(tmp_path: Path, server: FaultServer) -> None:
    home = _home(tmp_path, server)
    work = home.workspace
    outside = home.root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("keep me\n")
    (outside / "new.txt").write_text("fresh\n")  # what the swapped src/ would hold
    server.push(
        _call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="edited\n"),
        _call("write_file", path="src/new.txt", content="fresh\n"), "text",
    )
    assert run_dsh(home, ["--allow-edits", "-p", "change them"], label="edit").returncode == 0
    (work / "notes.txt").unlink()
    (work / "notes.txt").symlink_to(outside / "secret.txt")
    (work / "src" / "new.txt").unlink()
    (work / "src").rmdir()
    (work / "src").symlink_to(outside)
    run = run_dsh(home, ["--resume", "last"], ["/undo"], label="undo-symlinks")
    assert run.returncode == 0, run.stderr
    assert _after(_lines(run), "undo turn 1:") == [
        "undo turn 1:",
        "  notes.txt is a symlink now; not reverted",
        "  src/new.txt: src is a symlink now; not reverted",
    ]
    assert (outside / "secret.txt").read_text() == "keep me\n" and (outside / "new.txt").read_text() == "fresh\n"


def test_past_the_cap_the_oldest_turns_cannot_be_undone_and_undo_says_so(tmp_path: Path,
                                                                          server: FaultServer) -> None:
    home = _home(tmp_path, server)
    work = home.workspace
    for name in "abc":
        (work / f"{name}.txt").write_text(name * 1999 + "\n")
        server.push(_call("read_file", path=f"{name}.txt"), _call("write_file", path=f"{name}.txt", content="short\n"),
                    "text")
    run = run_dsh(home, ["--allow-edits"], ["one", "two", "three", "/rewind 3", "/undo"],
                  launcher=("-m", "tests.reliability.small_journal_dsh"), label="cap")  # a 3000-byte cap
    assert run.returncode == 0, run.stderr
    past = "; turns 1-2 changed files but are past the journal's cap, so their changes cannot be undone"
    assert _after(_lines(run), "undo turn 3:") == [
        "undo turn 3:",
        "  reverted c.txt",
        "only 1 turn had file changes left to undo" + past,
        "nothing to undo: no turn of this session has file changes left to undo" + past,
    ]
    assert (work / "c.txt").read_text() == "c" * 1999 + "\n" and (work / "a.txt").read_text() == "short\n"
    assert list((_journal(home) / "blobs").iterdir()) == []  # dropped and undone: nothing kept


def test_sessions_rm_removes_the_journal(tmp_path: Path, server: FaultServer) -> None:
    home = _home(tmp_path, server)
    server.push(_call("read_file", path="notes.txt"), _call("write_file", path="notes.txt", content="edited\n"), "text")
    assert run_dsh(home, ["--allow-edits", "-p", "change it"], label="edit").returncode == 0
    log = home.only_session()
    journal = _journal(home)
    assert (journal / "journal.jsonl").is_file() and len(list((journal / "blobs").iterdir())) == 1
    FIGURES["undo journal of one small edit (bytes: index line + before-image)"] = str(
        sum(path.stat().st_size for path in journal.rglob("*") if path.is_file()))
    run = run_dsh(home, ["sessions", "rm", log.stem], label="rm")
    assert run.returncode == 0, run.stderr
    assert not os.path.lexists(log) and not os.path.lexists(journal)
