"""A long log's resume skims the part its cut leaves out (agent_loop/resume_prefix.py); the result is the exact one.

Each log here is resumed twice, from two copies: by ``open_session`` with a :class:`Recap` and a window (the
skim, when the log is long enough) and with the same recap behind a plain function (the exact pass, record by
record, as before the skim). Everything a resume gives is compared: the messages, what the cut left out, the
queued notices, the recap (its turns, ``/retry``'s prompt, the spend, the model, the plan), the load warnings,
the repair, and the file afterwards.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop import events as ev
from dsh.agent_loop import resume_prefix
from dsh.agent_loop.plan import PlanItem
from dsh.agent_loop.reasons import Completed, Rejected
from dsh.agent_loop.recap import Recap
from dsh.agent_loop.resume import open_session
from dsh.agent_loop.session_log import SessionLog
from dsh.llm import Image, ToolCall, Usage
from dsh.llm.models import model_info

WINDOW = 1_000  # tokens: the budget is 2 000, the first tail tried 24 000 bytes
OUTPUT = "def f(x):\n    return \"x\\\\y\"  # ünïcode\n" * 20


def _turn(log: SessionLog, turn: int, *, calls: int = 1, reply: bool = True, notice: bool = False,
          images: bool = False, output: str = OUTPUT) -> None:
    log.append(ev.TurnStart(turn, f"prompt {turn} " * 5, source="notice" if notice else None))
    log.append(ev.StepStart(turn, 1))
    if not reply:
        log.append(ev.TurnEnd(turn, Rejected("no")))
        return
    batch = tuple(ToolCall(f"c{turn}_{index}", "read_file", '{"path": "a \\"b\\".py"}') for index in range(calls))
    usage = Usage(100 + turn, 5, 105 + turn, 80, 20 + turn, 0)
    log.append(ev.AssistantMessage(turn, 1, "" if turn % 3 else "a word first", "thinking", batch, "tool_calls",
                                   usage=usage))
    for call in batch:
        log.append(ev.ToolCallStart(turn, call.id, call.name, call.arguments))
        picture = (Image("a.png", "image/png", "ab" * 32, 10, 85),) if images else None
        log.append(ev.ToolResult(turn, call.id, call.name, output, images=picture))
    log.append(ev.StepStart(turn, 2))
    log.append(ev.AssistantMessage(turn, 2, f"answer {turn}", finish_reason="stop", usage=usage))
    log.append(ev.TurnEnd(turn, Completed()))


def _regular(log: SessionLog) -> None:
    for turn in range(1, 120):
        _turn(log, turn, calls=2 if turn % 7 == 0 else 1)


def _eventful(log: SessionLog) -> None:
    """Notices, turns that deliver them, a compaction, a model and a plan change, withdrawn turns, images."""
    log.append(ev.ModelSet("deepseek-v4-pro"))
    for turn in range(1, 120):
        if turn % 11 == 0:
            log.append(ev.JobNotice(f"job{turn}", f"job {turn} finished"))
        if turn == 40:
            log.append(ev.ContextCompacted("the summary of turns 1-39", None, 77, Usage(900, 50, 950)))
        if turn == 50:
            log.append(ev.PlanUpdate(turn, (PlanItem("read the code", "completed"),)))
        _turn(log, turn, reply=turn % 9 != 0, notice=turn % 11 == 1, images=turn % 13 == 0,
              calls=0 if turn % 17 == 0 else 1)


def _open_last_turn(log: SessionLog) -> None:
    _regular(log)
    log.append(ev.TurnStart(500, "the prompt a crash cut short"))
    log.append(ev.StepStart(500, 1))
    call = ToolCall("pending", "run_command", "{}")
    log.append(ev.AssistantMessage(500, 1, "", None, (call,), "tool_calls"))


def _sparse_tail(log: SessionLog) -> None:
    """The newest turns are all refused: the first tail tried holds too few messages and a longer one is read."""
    _regular(log)
    for turn in range(200, 260):
        _turn(log, turn, reply=False)
        log.append(ev.TurnStart(turn + 1000, "x" * 2000))
        log.append(ev.TurnEnd(turn + 1000, Rejected("too long")))


def _hostile(path: Path) -> None:
    """Garbage, a gap, a forged line with a record's head, a lone surrogate, a record of no known type, a torn end."""
    lines = path.read_bytes().split(b"\n")
    middle = len(lines) // 3
    lines[middle:middle] = [
        b"garbage",
        b"",
        b'{"type":"tool/result","seq":1,"time":"t","data":{"turn":1,"id":"c1_0","output":"\\ud83d"}}',
        b'{"type":"assistant/message","seq":1,"time":"t","data":{"turn":1,"content":"',
        b'{"type":"weird/kind","seq":2,"time":"t","data":[1]}',
        b'{"type":"step/start","seq":99999,"time":"t","data":{"turn":1,"step":1}}',
    ]
    path.write_bytes(b"\n".join(lines) + b'{"type":"turn/sta')


LOGS: dict[str, Callable[[SessionLog], None]] = {
    "regular": _regular, "eventful": _eventful, "open last turn": _open_last_turn, "sparse tail": _sparse_tail,
}


def _resume(path: Path, recap: Recap, *, skim: bool) -> dict[str, Any]:
    hook: Callable[[dict[str, Any]], None] = recap if skim else (lambda record: recap(record))
    log, conversation = open_session(path, window=WINDOW, on_record=hook, record_kinds=Recap.kinds)
    records = [{key: value for key, value in record.items() if key != "time"} for record in log.records()]
    log.close()
    return {
        "messages": conversation.messages, "dropped": conversation.resume_dropped,
        "notices": conversation.pending_notices, "records": records, "last_turn": log.last_turn,
        "repaired": log.repaired_turn,
        "warnings": [line.replace(str(path.parent), "DIR") for line in log.load_warnings],
        "summary": (log.load_summary or "").replace(str(path.parent), "DIR"),
        "recap": {item.name: getattr(recap, item.name) for item in fields(Recap)},
    }


def _both(tmp_path: Path, build: Callable[[SessionLog], None], *, hostile: bool = False) -> tuple[Any, Any]:
    log = SessionLog.create(tmp_path / "made")
    build(log)
    log.close()
    if hostile:
        _hostile(log.path)
    results = []
    for name, skim in (("skimmed", True), ("exact", False)):
        copy = tmp_path / name / log.path.name
        copy.parent.mkdir()
        shutil.copy(log.path, copy)
        results.append(_resume(copy, Recap(info=model_info("deepseek-flash")), skim=skim))
    return results[0], results[1]


@pytest.fixture
def skims(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Each skim tried: (lines skimmed, whether it stood)."""
    seen: list[tuple[int, bool]] = []
    scan, accepted = resume_prefix.PrefixSkim.scan, resume_prefix.PrefixSkim.accepted

    def counted_scan(self: resume_prefix.PrefixSkim, *args: Any) -> tuple[int, int]:
        found = scan(self, *args)
        seen.append((found[1], False))
        return found

    def counted_accepted(self: resume_prefix.PrefixSkim) -> bool:
        stands = accepted(self)
        seen[-1] = (seen[-1][0], stands)
        return stands

    monkeypatch.setattr(resume_prefix.PrefixSkim, "scan", counted_scan)
    monkeypatch.setattr(resume_prefix.PrefixSkim, "accepted", counted_accepted)
    return seen


@pytest.mark.parametrize("name", list(LOGS))
@pytest.mark.parametrize("hostile", [False, True], ids=["clean", "hostile"])
def test_a_skimmed_resume_is_the_exact_one(tmp_path: Path, skims: list[tuple[int, bool]], name: str,
                                           hostile: bool) -> None:
    skimmed, exact = _both(tmp_path, LOGS[name], hostile=hostile)
    assert skims and skims[0][0] > 500  # the first try skimmed most of the log
    for key in exact:
        assert skimmed[key] == exact[key], key
    assert exact["dropped"] > 0  # the cut left messages out: the log is far longer than the window


def test_the_skim_stands_on_a_plain_log_and_not_when_the_tail_is_too_thin(tmp_path: Path,
                                                                          skims: list[tuple[int, bool]]) -> None:
    _both(tmp_path / "plain", _regular)
    assert skims[0][1] and len(skims) == 1  # read once: the skimmed prefix, then the tail
    skims.clear()
    _both(tmp_path / "thin", _sparse_tail)
    assert not skims[0][1] and skims[-1][1]  # a longer tail read again, and that one stands


def test_hostile_lines_in_the_skimmed_part_are_reported_as_before(tmp_path: Path) -> None:
    skimmed, _ = _both(tmp_path, _regular, hostile=True)
    assert "skipped 2 unreadable records" in skimmed["summary"] and "sequence gap" in skimmed["summary"]
    assert "torn last line" in skimmed["summary"]


def test_what_the_cut_left_out_counts_from_the_last_compaction(tmp_path: Path) -> None:
    """``resume_dropped`` is the conversation's messages the cut left out (docs/architecture.md): the messages a
    compaction replaced are in its summary, not left out, even where a cut was made before it was read."""
    log = SessionLog.create(tmp_path)
    _eventful(log)
    log.close()
    whole, full = open_session(log.path)
    whole.close()
    resumed, cut = open_session(log.path, window=WINDOW, on_record=lambda record: None)
    resumed.close()
    assert 0 < cut.resume_dropped == len(full.messages) - len(cut.messages)
