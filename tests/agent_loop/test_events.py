"""Typed events and their one wire form: round trips, logs of the previous format, no string matching."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop import Agent, SessionLog
from dsh.agent_loop import events as ev
from dsh.agent_loop.plan import CONTENT_LIMIT, STATUSES, PlanItem
from dsh.agent_loop.reasons import (
    Aborted,
    Completed,
    Disposed,
    EndReason,
    Failed,
    Interrupted,
    MaxTokens,
    OtherEnd,
    Rejected,
)
from dsh.llm import Image, Message, ToolCall, Usage

REPO = Path(__file__).resolve().parents[2]

# --- strategies: every event class, every reason kind -----------------------------------------------

texts = st.text(max_size=40)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_/-.", min_size=1, max_size=16)
counts = st.integers(min_value=0, max_value=10**9)
maybe_text = st.none() | texts
json_scalars = st.none() | st.booleans() | st.integers() | texts

tool_calls = st.builds(ToolCall, names, names, texts)
# An image with or without its bytes: an image is equal by its facts (tests/agent_loop/test_image_input.py checks
# that the bytes go into the log with keep_images only).
digests = st.text("0123456789abcdef", min_size=64, max_size=64)
images = st.lists(st.builds(Image, names, st.sampled_from(["image/png", "image/jpeg"]), digests, counts, counts,
                            st.binary(max_size=64), st.booleans()), max_size=3)
maybe_images = images.map(lambda found: tuple(found) or None)
usages = st.builds(Usage, counts, counts, counts, counts, counts, counts)
reasons: st.SearchStrategy[EndReason] = st.one_of(
    st.just(Completed()),
    st.just(MaxTokens()),
    st.just(Interrupted()),
    st.just(Disposed()),
    st.builds(Aborted, st.none() | st.text(min_size=1, max_size=20)),
    st.builds(Rejected, texts),
    st.builds(Failed, names, texts, counts, st.none() | st.integers(100, 599), st.none() | names),
    # an unknown kind is only ever made by reading one
    st.builds(
        lambda kind, extra: EndReason.from_dict({**extra, "kind": kind}),
        names.filter(lambda kind: kind not in _KNOWN_KINDS),
        st.dictionaries(names, json_scalars, max_size=3),
    ),
)
_KNOWN_KINDS = {"completed", "max-tokens", "interrupted", "disposed", "aborted", "rejected", "error"}

EVENTS: dict[type, st.SearchStrategy] = {
    ev.TurnStart: st.builds(ev.TurnStart, counts, texts, maybe_text, maybe_text, maybe_images),
    ev.StepStart: st.builds(ev.StepStart, counts, counts),
    ev.TextDelta: st.builds(ev.TextDelta, texts),
    ev.ReasoningDelta: st.builds(ev.ReasoningDelta, texts),
    ev.StreamKeepAlive: st.just(ev.StreamKeepAlive()),
    ev.AssistantMessage: st.builds(
        ev.AssistantMessage,
        counts,
        counts,
        texts,
        maybe_text,
        st.lists(tool_calls, max_size=3).map(tuple),
        st.none() | st.sampled_from(["stop", "tool_calls", "length"]),
        st.booleans(),
        st.none() | usages,
    ),
    ev.ToolCallStart: st.builds(ev.ToolCallStart, counts, names, names, texts),
    ev.ToolResult: st.builds(ev.ToolResult, counts, names, names, texts, st.booleans(), maybe_text, maybe_images),
    ev.ContextCompacted: st.builds(ev.ContextCompacted, texts, maybe_text, counts, st.none() | usages,
                                   st.none() | counts),
    ev.LlmRetry: st.builds(
        ev.LlmRetry,
        counts,
        counts,
        counts,
        counts,
        st.floats(min_value=0, max_value=60, allow_nan=False),
        names,
        texts,
    ),
    ev.LlmContinue: st.builds(ev.LlmContinue, counts, counts, counts, counts, names, counts, texts,
                              st.none() | usages),
    ev.TurnEnd: st.builds(ev.TurnEnd, counts, reasons),
    ev.JobNotice: st.builds(ev.JobNotice, names, texts),
    ev.CacheDrop: st.builds(ev.CacheDrop, counts, st.floats(0, 1), st.floats(0, 1), texts),
    ev.HookRan: st.builds(ev.HookRan, names, names, names, st.none() | names, st.none() | counts,
                          st.floats(0, 60), st.none() | names),
    ev.HookContext: st.builds(ev.HookContext, counts, names, texts),
    ev.ModelSet: st.builds(ev.ModelSet, names),
    ev.PlanUpdate: st.builds(ev.PlanUpdate, counts, st.lists(
        st.builds(PlanItem, st.text(max_size=CONTENT_LIMIT), st.sampled_from(STATUSES), maybe_text),
        max_size=5).map(tuple)),
    ev.ShellRun: st.builds(ev.ShellRun, texts, st.none() | counts, st.none() | names, st.booleans(),
                           st.floats(0, 60), counts, st.booleans()),
    ev.UnknownEvent: st.builds(
        ev.UnknownEvent,
        names.filter(lambda kind: kind not in _WIRE_TYPES),
        st.dictionaries(names, json_scalars, max_size=3),
    ),
}
_WIRE_TYPES = {cls.type for cls in EVENTS if cls is not ev.UnknownEvent}


def test_every_event_class_has_a_strategy() -> None:
    assert set(EVENTS) == set(ev.Event.__args__)


@given(st.one_of(*EVENTS.values()))
def test_from_wire_inverts_to_wire(event: ev.Event) -> None:
    wire = ev.to_wire(event)
    assert set(wire) == {"type", "data"} and wire["type"] == event.type
    assert ev.from_wire(wire) == event
    assert ev.from_wire(json.loads(json.dumps(wire))) == event  # through the bytes, as logs and children do


@given(st.dictionaries(st.sampled_from(["type", "data", "seq"]), json_scalars | st.dictionaries(names, json_scalars)))
def test_from_wire_accepts_anything_a_peer_might_send(record: dict) -> None:
    event = ev.from_wire(record)
    assert isinstance(event, ev.Event.__args__)
    assert ev.from_wire(ev.to_wire(event)) == event


def test_durability_is_the_log_s() -> None:
    live_only = {ev.TextDelta, ev.ReasoningDelta, ev.StreamKeepAlive, ev.UnknownEvent}
    for cls in EVENTS:
        assert cls.durable is (cls not in live_only), cls


def test_unknown_turn_end_kinds_stay_ordinary_ends() -> None:
    event = ev.from_wire({"type": "turn/end", "data": {"turn": 3, "reason": {"kind": "later", "x": 1}}})
    assert isinstance(event, ev.TurnEnd) and isinstance(event.reason, OtherEnd)
    assert event.reason.kind == "later" and ev.to_wire(event)["data"]["reason"] == {"kind": "later", "x": 1}


# --- logs written by the previous format ------------------------------------------------------------

# A session log written by the previous events module (one dict-carrying Event class and its builder
# functions): one record of every durable type and every turn-end kind, plus a type from a newer version.
PREVIOUS_LOG = Path(__file__).with_name("previous_format.jsonl")
PREVIOUS_FORMAT = PREVIOUS_LOG.read_text().splitlines()[1:]


@pytest.mark.parametrize("line", PREVIOUS_FORMAT)
def test_every_record_of_the_previous_format_reads_back_unchanged(line: str) -> None:
    record = json.loads(line)
    event = ev.from_wire(record)
    assert (type(event) is ev.UnknownEvent) == (record["type"] == "subagent/progress")
    assert ev.to_wire(event) == {"type": record["type"], "data": record["data"]}
    assert json.dumps(ev.to_wire(event)["data"]) == json.dumps(record["data"])  # the same bytes, key order too


def test_fields_added_later_are_written_only_when_set_where_they_were_first_written() -> None:
    def wire(event: ev.Event) -> str:
        return json.dumps(ev.to_wire(event))

    assert wire(ev.TurnStart(1, "hi")) == '{"type": "turn/start", "data": {"turn": 1, "prompt": "hi"}}'
    assert wire(ev.TurnStart(1, "hi", "notice")).endswith('"prompt": "hi", "source": "notice"}}')
    assert wire(ev.ContextCompacted("s", None, 2)) == (
        '{"type": "context/compact", "data": {"summary": "s", "focus": null, "replaced": 2, "usage": null}}'
    )
    assert wire(ev.ContextCompacted("s", "f", 2, None, 7)) == (
        '{"type": "context/compact", "data": {"turn": 7, "summary": "s", "focus": "f", "replaced": 2, "usage": null}}'
    )
    result = ev.ToolResult(1, "c1", "read", "out", cause=RuntimeError("raw cause, live only"))
    assert "raw cause" not in wire(result) and ev.from_wire(ev.to_wire(result)).cause is None


def test_a_log_of_the_previous_format_loads_resumes_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    raw = PREVIOUS_LOG.read_bytes()
    path.write_bytes(raw)
    log = SessionLog.open(path)
    try:
        assert log.repaired_turn is None and log.load_warnings == [] and log.last_turn == 2
        assert log.records() == [json.loads(line) for line in PREVIOUS_FORMAT]
        events = log.events()
        assert [type(event) for event in events[:3]] == [ev.TurnStart, ev.StepStart, ev.LlmRetry]
        assert events[15] == ev.TurnEnd(3, Failed("AUTH", "Authentication Fails", 1, 401, "req-1"))
        assert path.read_bytes() == raw  # opening rewrote nothing
        agent = Agent(client=None, session=log)
        assert agent.turn_number == 2
        assert agent.messages == [
            Message("user", "read the README and summarise it"),
            Message(
                "assistant",
                "",
                reasoning_content="I should read it first.",
                tool_calls=(ToolCall("call_1", "read_file", '{"path": "README.md"}'),),
            ),
            Message("tool", "# dsh\n", tool_call_id="call_1"),
            Message("assistant", "dsh is a terminal harness."),
            Message("user", "background job subagent-1 finished"),
            Message("assistant", "Half an"),
        ]
        log.append(ev.TurnStart(3, "next"))
    finally:
        log.close()
    added = path.read_bytes()[len(raw) :].decode()
    record = json.loads(added)
    assert list(record) == ["type", "seq", "time", "data"] and added.endswith("\n")
    assert (record["type"], record["seq"], record["data"]) == ("turn/start", 25, {"turn": 3, "prompt": "next"})


def test_a_delta_is_one_small_object() -> None:
    delta = ev.TextDelta("x")
    assert not hasattr(delta, "__dict__")  # slots: the stream path makes 100 000s of these
    with pytest.raises(AttributeError):
        delta.text = "y"  # type: ignore[misc]
    assert math.isfinite(ev.from_wire({"type": "llm/retry", "data": {"delay_s": "soon"}}).delay_s)


# --- nothing outside the wire boundary matches on type strings --------------------------------------

PRODUCT = [REPO / "llm", REPO / "agent_loop", REPO / "repl"]
WIRE_BOUNDARY = {REPO / "agent_loop" / "events.py"}


def _product_files() -> list[Path]:
    return sorted(path for root in PRODUCT for path in root.rglob("*.py") if path not in WIRE_BOUNDARY)


def _is_string_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts)
    return False


def _type_comparisons(source: str) -> list[str]:
    """``x.type == "..."`` / ``x.kind in ("...", ...)`` comparisons in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        compares_type = any(isinstance(op, ast.Attribute) and op.attr in ("type", "kind") for op in operands)
        if compares_type and any(_is_string_literal(op) for op in operands):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_product_module_compares_an_event_type_to_a_string() -> None:
    found = [
        f"{path.relative_to(REPO)}:{hit}" for path in _product_files() for hit in _type_comparisons(path.read_text())
    ]
    assert found == []


def test_the_checker_sees_a_string_comparison() -> None:
    source = 'if event.type == "turn/start" or reason.kind in ("error", "aborted") or kind == "x":\n    pass\n'
    assert len(_type_comparisons(source)) == 2
