"""The one checker of what a session log guarantees (agent_loop/session_log.py and the agent that feeds it).

Every suite that reads a log back -- the agent-loop tests, the reliability suite, the e2e runs -- calls
:func:`assert_well_formed` on its records (and :func:`assert_header` on line 1 when it has it). The rules
are what the writer promises, no more:

* every record is ``{"type", "seq", "time", "data"}``: a durable event type, ``seq`` contiguous from 1,
  ``time`` an ISO UTC timestamp with milliseconds, ``data`` an object;
* turns: turn numbers strictly increase; a ``turn/start`` never opens inside another turn; each turn ends
  with exactly one ``turn/end`` for that turn; nothing of a turn comes after its end; the log ends with no
  turn open (opening a log closes an open last turn with ``interrupted``); ``job/notice`` and
  ``context/compact`` records belong to no turn and may come anywhere (an automatic compaction inside a
  turn names it); a ``cache/drop`` comes after its turn's end, outside any turn, and names the last turn;
* steps: inside a turn, ``step/start`` numbers run 1, 2, 3 ...; ``assistant/message`` and ``llm/retry``
  carry the current step; at most one ``assistant/message`` per step;
* tool calls: the calls of an ``assistant/message`` are pending until each has exactly one ``tool/result``
  (no other result, none twice); a ``tool/call`` announces a pending call at most once and before its
  result (a repaired log may answer a call that was never announced); no new ``assistant/message`` while
  calls are pending, and no ``turn/end`` either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DURABLE_TYPES", "assert_header", "assert_well_formed", "read_log"]

# The record types a log holds: the on-disk format, pinned here rather than imported from the writer.
DURABLE_TYPES = frozenset({"turn/start", "step/start", "assistant/message", "tool/call", "tool/result", "llm/retry",
                           "turn/end", "job/notice", "context/compact", "cache/drop", "model/set"})

_RECORD_KEYS = {"type", "seq", "time", "data"}
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_NOT_IN_A_TURN = {"job/notice", "context/compact"}


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and records of a session log, read straight from disk with plain ``json``: every line,
    the last included, must be whole."""
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), f"{path} does not end with a complete line: {raw[-200:]!r}"
    lines = raw.decode("utf-8").splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def assert_header(header: Mapping[str, Any]) -> None:
    """Line 1: ``{"type": "session", "version": 1, "id", "createdAt", "cwd", "project"}``."""
    assert set(header) == {"type", "version", "id", "createdAt", "cwd", "project"}, header
    assert header["type"] == "session" and header["version"] == 1, header
    assert isinstance(header["id"], str) and header["id"], header
    assert _TIME.fullmatch(header["createdAt"]), header


def _assert_record_shape(record: Mapping[str, Any], index: int) -> None:
    assert set(record) == _RECORD_KEYS, f"record {index + 1} has keys {sorted(record)}"
    assert record["type"] in DURABLE_TYPES, f"record {index + 1}: {record['type']!r} is not a durable type"
    assert isinstance(record["data"], dict), f"record {index + 1}: data is {record['data']!r}"
    assert isinstance(record["time"], str) and _TIME.fullmatch(record["time"]), f"record {index + 1}: {record}"


class _Turn:
    """What one open turn has seen so far."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.step = 0
        self.messages_in_step = 0
        # The calls of the step's assistant/message: without a result yet, with a tool/call, with a result.
        self.pending: set[str] = set()
        self.announced: set[str] = set()
        self.answered: set[str] = set()


def assert_well_formed(records: Sequence[Mapping[str, Any]]) -> None:
    """Fail with the first rule the records break (see the module docstring)."""
    for index, record in enumerate(records):
        _assert_record_shape(record, index)
    assert [record["seq"] for record in records] == list(range(1, len(records) + 1)), "seq is not 1, 2, 3 ..."
    turn: _Turn | None = None
    last = 0
    for record in records:
        kind, data = record["type"], record["data"]
        where = f"seq {record['seq']} ({kind})"
        if kind in _NOT_IN_A_TURN:
            continue
        if kind == "model/set":  # /model or /profile between turns (repl/model_commands.py)
            assert turn is None, f"{where}: inside turn {turn.number if turn else 0}"
            continue
        if kind == "cache/drop":  # the session writes it once the turn has ended (agent_loop/session_usage.py)
            assert turn is None and data.get("turn") == last, f"{where}: not after the end of turn {last}"
            continue
        if kind == "turn/start":
            assert turn is None, f"{where}: turn {data['turn']} started inside turn {turn.number}"
            assert data["turn"] > last, f"{where}: turn {data['turn']} after turn {last}"
            turn = _Turn(data["turn"])
            last = data["turn"]
            continue
        assert turn is not None, f"{where}: outside a turn"
        assert data.get("turn") == turn.number, f"{where}: turn {data.get('turn')} inside turn {turn.number}"
        if kind == "turn/end":
            assert not turn.pending, f"{where}: turn {turn.number} ended with unanswered tool calls {turn.pending}"
            turn = None
        elif kind == "step/start":
            assert data["step"] == turn.step + 1, f"{where}: step {data['step']} after step {turn.step}"
            assert not turn.pending, f"{where}: a new step with unanswered tool calls {turn.pending}"
            turn.step = data["step"]
            turn.messages_in_step = 0
        elif kind == "llm/retry":
            assert data["step"] == turn.step, f"{where}: a retry of step {data['step']} in step {turn.step}"
        elif kind == "assistant/message":
            assert data["step"] == turn.step, f"{where}: a message of step {data['step']} in step {turn.step}"
            assert turn.messages_in_step == 0, f"{where}: a second assistant/message in step {turn.step}"
            assert not turn.pending, f"{where}: a new message with unanswered tool calls {turn.pending}"
            turn.messages_in_step = 1
            ids = [call["id"] for call in data["tool_calls"]]
            assert len(set(ids)) == len(ids), f"{where}: repeated tool call ids {ids}"
            turn.pending, turn.announced, turn.answered = set(ids), set(), set()
        elif kind == "tool/call":
            call = data["id"]
            assert call in turn.pending, f"{where}: a call {call!r} the last assistant/message did not make"
            assert call not in turn.announced, f"{where}: call {call!r} announced twice"
            turn.announced.add(call)
        elif kind == "tool/result":
            call = data["id"]
            assert call not in turn.answered, f"{where}: a second result for {call!r}"
            assert call in turn.pending, f"{where}: a result for unknown call {call!r}"
            turn.pending.discard(call)
            turn.answered.add(call)
    assert turn is None, f"turn {turn.number} has no turn/end"
