"""Resuming a session far longer than the model's window: what the next request holds, in bounded memory.

The resume pass cuts the conversation to twice the model's window as it reads the log
(``open_session(window=...)``, ``Conversation.fit``; docs/architecture.md, "The session log"). These tests
hold it to: the same messages as a full rebuild when the session fits; for a longer one, exactly the cut
of the full rebuild (so cutting as it goes changes nothing); memory that does not follow the log; and the
recap, ``/retry``'s prompt, ``/cost`` and the repair as they were.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop import events as ev
from dsh.agent_loop import resume as resume_module
from dsh.agent_loop.conversation import Conversation, message_tokens
from dsh.agent_loop.reasons import Completed, Rejected
from dsh.agent_loop.recap import Recap
from dsh.agent_loop.resume import open_session, resume_budget
from dsh.agent_loop.session import Notice, Session
from dsh.agent_loop.session_log import INTERRUPTED_TOOL_OUTPUT, SessionLog
from dsh.llm import ToolCall, Usage, lines
from dsh.llm.models import ModelSettings
from tests.agent_loop.session_configs import StubConfig

OUTPUT = "0123456789 abcdef\n" * 100  # 1 800 characters: about 450 estimated tokens
WINDOW = 1_000  # tokens: a session of 40 such turns is far over twice this


def _turn(log: SessionLog, turn: int, *, output: str = OUTPUT, reply: bool = True) -> None:
    log.append(ev.TurnStart(turn, f"prompt {turn}"))
    log.append(ev.StepStart(turn, 1))
    if not reply:  # a refused request: the turn leaves no trace in the conversation
        log.append(ev.TurnEnd(turn, Rejected("no")))
        return
    call = ToolCall(f"c{turn}", "read_file", '{"path": "a.py"}')
    log.append(ev.AssistantMessage(turn, 1, "", "thinking", (call,), "tool_calls"))
    log.append(ev.ToolCallStart(turn, call.id, call.name, call.arguments))
    log.append(ev.ToolResult(turn, call.id, call.name, output))
    log.append(ev.StepStart(turn, 2))
    log.append(ev.AssistantMessage(turn, 2, f"answer {turn}", finish_reason="stop", usage=Usage(10, 5, 15)))
    log.append(ev.TurnEnd(turn, Completed()))


def _full(path: Path) -> Conversation:
    """The conversation as resume rebuilt it before the cut: every record applied as an event."""
    log, conversation = open_session(path)
    log.close()
    return conversation


def _cut_once(path: Path, window: int) -> list[Any]:
    """The reference: the full rebuild, then one cut to the budget."""
    conversation = _full(path)
    conversation.fit(resume_budget(window))
    return conversation.messages


def _big_log(root: Path, turns: int, **kwargs: Any) -> Path:
    log = SessionLog.create(root)
    for turn in range(1, turns + 1):
        _turn(log, turn, **kwargs)
    log.close()
    return log.path


def test_a_session_that_fits_resumes_with_the_same_messages(tmp_path: Path) -> None:
    path = _big_log(tmp_path, 6)
    full = _full(path).messages
    assert sum(map(message_tokens, full)) < resume_budget(WINDOW * 10)
    log, conversation = open_session(path, window=WINDOW * 10)
    log.close()
    assert conversation.messages == full and conversation.resume_dropped == 0


def test_a_long_session_is_cut_as_one_cut_of_the_whole_would_cut_it(tmp_path: Path) -> None:
    path = _big_log(tmp_path, 40)
    full = _full(path).messages
    log, conversation = open_session(path, window=WINDOW)
    log.close()
    kept = conversation.messages
    assert kept == _cut_once(path, WINDOW)
    assert kept == full[len(full) - len(kept):]  # the newest messages, in order
    assert kept[0].role == "user" and kept[0].content.startswith("prompt ")  # a whole turn first
    assert sum(map(message_tokens, kept)) <= resume_budget(WINDOW)
    assert sum(map(message_tokens, full[len(full) - len(kept) - 5:])) > resume_budget(WINDOW)  # no more fits
    assert conversation.resume_dropped == len(full) - len(kept)


def test_a_newest_turn_longer_than_the_budget_is_kept_whole(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path)
    for turn in range(1, 4):
        _turn(log, turn)
    _turn(log, 4, output="z" * (resume_budget(WINDOW) * 4 * 2))
    log.close()
    resumed, conversation = open_session(log.path, window=WINDOW)
    resumed.close()
    assert conversation.messages[0].content == "prompt 4"
    assert conversation.messages == _cut_once(log.path, WINDOW)


def test_a_compaction_summary_is_kept_before_the_cut(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path)
    for turn in range(1, 5):
        _turn(log, turn)
    log.append(ev.ContextCompacted("the summary of turns 1-4", None, 16))
    for turn in range(5, 40):
        _turn(log, turn, reply=turn % 7 != 0)
    log.close()
    resumed, conversation = open_session(log.path, window=WINDOW)
    resumed.close()
    messages = conversation.messages
    assert messages[0].content.endswith("the summary of turns 1-4")
    assert messages[1].content.startswith("prompt ") and messages[1].content != "prompt 5"
    assert messages == _cut_once(log.path, WINDOW)


def test_memory_does_not_follow_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Read and parsed in 256 KB batches instead of 4 MB ones, so that a 5 MB log is many batches.
    monkeypatch.setattr(lines, "_CHUNK", 1 << 18)
    path = _big_log(tmp_path, 1_500)  # about 5 MB of log, 2.7 MB of it tool output
    size = path.stat().st_size
    tracemalloc.start()
    try:
        log, conversation = open_session(path, window=WINDOW)
        _, bounded_peak = tracemalloc.get_traced_memory()
        log.close()
        del conversation
        tracemalloc.reset_peak()
        log, _ = open_session(path)
        _, full_peak = tracemalloc.get_traced_memory()
        log.close()
    finally:
        tracemalloc.stop()
    assert full_peak > size  # the measure sees the whole conversation when it is kept
    assert bounded_peak < size / 2, (bounded_peak, full_peak, size)  # 256 KB batches and the cut, not the log


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.booleans()), max_size=40))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_records_apply_as_their_events_do(script: list[tuple[int, int, bool]]) -> None:
    """``apply_record`` (the resume path) and ``apply(from_wire(...))`` agree on any record sequence,
    odd ones included: wrong field types, unknown call ids, notices, compactions, turns without replies."""
    by_event, by_record = Conversation("sys"), Conversation("sys")
    records: list[dict[str, Any]] = []
    turn = 0
    for kind, size, odd in script:
        text = "t" * size * 3
        if kind == 0:
            turn += 1
            records.append(ev.to_wire(ev.TurnStart(turn, text, source="notice" if odd else None)))
        elif kind == 1:
            records.append(ev.to_wire(ev.StepStart(turn, size)))
        elif kind == 2:
            calls = tuple(ToolCall(f"c{i}", "f", "{}") for i in range(size))
            records.append(ev.to_wire(ev.AssistantMessage(turn, 1, text, "r" if odd else None, calls)))
        elif kind == 3:
            records.append(ev.to_wire(ev.ToolResult(turn, f"c{size}", "f", text)))
        elif kind == 4:
            records.append(ev.to_wire(ev.JobNotice("j", text)))
        elif kind == 5:
            records.append(ev.to_wire(ev.ContextCompacted(text or "s", None, 1, None, turn if odd else None)))
        else:
            records.append(ev.to_wire(ev.TurnEnd(turn, Completed())))
        if odd and kind in (2, 3):  # a field of the wrong type reads as its default on both paths
            records[-1]["data"] = {**records[-1]["data"], "content": 3, "output": None, "tool_calls": "x"}
    for record in records:
        by_event.apply(ev.from_wire(record))
        by_record.apply_record(record["type"], record["data"])
    assert by_record.messages == by_event.messages
    assert by_record.pending_notices == by_event.pending_notices


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.booleans()), min_size=1, max_size=60),
       st.integers(5, 200))
@settings(max_examples=200, deadline=None)
def test_cutting_as_the_log_is_read_ends_where_one_cut_of_everything_does(
    turns: list[tuple[int, int, bool]], budget: int
) -> None:
    """Whatever the turns (sizes, tool calls, refused ones, notices, compactions) and the budget, the running
    cut of the resume pass (``_Bounded``: a cut whenever twice the budget is held) keeps what one cut of the
    whole rebuilt conversation keeps."""
    records: list[dict[str, Any]] = []
    for turn, (size, calls, odd) in enumerate(turns, start=1):
        text = "w" * size * 7
        if odd and calls == 3:
            records.append(ev.to_wire(ev.ContextCompacted("summary " + text, None, 1)))
        if odd and calls == 2:
            records.append(ev.to_wire(ev.JobNotice("j", "notice " + text)))
        records.append(ev.to_wire(ev.TurnStart(turn, f"prompt {turn} {text}")))
        records.append(ev.to_wire(ev.StepStart(turn, 1)))
        if not (odd and calls == 0):  # else refused: the turn is withdrawn
            ids = [f"c{turn}_{index}" for index in range(calls)]
            calls_made = tuple(ToolCall(call_id, "f", text) for call_id in ids)
            records.append(ev.to_wire(ev.AssistantMessage(turn, 1, text, None, calls_made)))
            records.extend(ev.to_wire(ev.ToolResult(turn, i, "f", text * 2)) for i in ids)
        records.append(ev.to_wire(ev.TurnEnd(turn, Completed())))
    whole, running = Conversation(), Conversation()
    for record in records:
        whole.apply_record(record["type"], record["data"])
    whole.fit(budget)
    bounded = resume_module._Bounded(running, budget)
    handlers = running.record_handlers()
    for record in records:
        handlers[record["type"]](record["data"])
        if record["type"] == ev.TurnEnd.type:
            bounded.check()
    bounded.finish()
    assert running.messages == whole.messages


def test_the_recap_and_the_retry_prompt_are_those_of_a_full_resume(tmp_path: Path) -> None:
    path = _big_log(tmp_path, 40)
    full, cut = Recap(), Recap()
    open_session(path, on_record=full)[0].close()
    open_session(path, on_record=cut, window=WINDOW)[0].close()
    assert list(cut.turns) == list(full.turns) and [t.turn for t in cut.turns] == [38, 39, 40]
    assert (cut.last_prompt, cut.last_prompt_turn) == (full.last_prompt, full.last_prompt_turn) == ("prompt 40", 40)


def test_the_repair_still_closes_a_torn_unfinished_turn(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path)
    for turn in range(1, 41):
        _turn(log, turn)
    log.append(ev.TurnStart(41, "prompt 41"))
    log.append(ev.StepStart(41, 1))
    call = ToolCall("c41", "read_file", "{}")
    log.append(ev.AssistantMessage(41, 1, "", "r", (call,), "tool_calls"))
    log.close()
    with open(log.path, "ab") as file:
        file.write(b'{"type":"tool/result","seq":999,"da')  # torn by a crash
    resumed, conversation = open_session(log.path, window=WINDOW)
    try:
        assert resumed.repaired_turn == 41 and resumed.last_turn == 41
        assert resumed.load_summary is not None and "torn last line" in resumed.load_summary
        assert conversation.messages[-3].content == "prompt 41"
        assert conversation.messages[-1].role == "tool" and conversation.messages[-1].content == INTERRUPTED_TOOL_OUTPUT
    finally:
        resumed.close()
    assert log.path.read_bytes().endswith(b'"kind":"interrupted"}}}\n')
    assert conversation.messages == _cut_once(log.path, WINDOW)  # the repaired log, read whole and cut once


@pytest.mark.parametrize("model", ["small-model", "unknown-model"])
def test_a_session_resume_cuts_to_its_models_window_and_counts_no_old_usage(tmp_path: Path, model: str) -> None:
    root = tmp_path / "sessions"
    path = _big_log(root, 40)
    assert b'"prompt_tokens":10' in path.read_bytes()  # the log's replies carry usage; /cost does not read it
    expected = _cut_once(path, WINDOW) if model == "small-model" else _full(path).messages  # 1M tokens: all fits

    heard: list[object] = []

    async def main() -> None:
        config = StubConfig(model=model, models={"small-model": ModelSettings(context_window=WINDOW)})
        session = Session(config, sessions_root=root, project_context=False)
        session.subscribe(heard.append)
        await session.start(resume=str(path))
        try:
            agent = session.ensure_agent()
            assert agent.messages == expected
            assert session.last_prompt == "prompt 40" and session.recap is not None
            assert session.usage.requests == 0 and session.usage.cost == 0.0  # /cost: this process's requests
        finally:
            await session.aclose()

    anyio.run(main)
    notices = [update.text for update in heard if isinstance(update, Notice)]
    if model == "small-model":
        dropped = len(_full(path).messages) - len(expected)
        assert notices == [
            f"dsh: this session is longer than twice the model's context window: the next request holds its "
            f"newest {len(expected)} messages; the {dropped} older ones stay in the log"
        ]
    else:
        assert notices == []
