"""Compaction against the fault server: the summary request, the durable record, resume, failure, auto."""

from __future__ import annotations

import pytest

from dsh.agent_loop import Completed, SessionLog, ToolRegistry
from dsh.agent_loop import events as ev
from dsh.agent_loop.compact import COMPACT_INSTRUCTION, SUMMARY_HEADER, compaction_attempts, transcript
from dsh.llm import ErrorCode, HarnessError, Message, ToolCall
from dsh.llm.loopback.fault_server import Behaviour
from tests.agent_loop.agent_support import assert_well_formed, echo_tool, read_log

SUMMARY = "The user asked for the weather in Hangzhou; it is sunny. Nothing is left to do."


@pytest.mark.anyio
async def test_compact_sends_the_conversation_and_replaces_it_by_the_summary(server, make_agent, session_root):
    server.push("tool_call", "text", Behaviour("text", text=SUMMARY), "text")
    agent, recorder = make_agent(server.url, tools=ToolRegistry([echo_tool("get_weather")]), system_prompt="sys")
    assert await agent.run_turn("weather?") == Completed()
    event = await agent.compact("the weather")

    asked = server.requests[2].json
    assert "tools" not in asked  # a plain request: the model cannot call a tool instead of answering
    roles = [m["role"] for m in asked["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert asked["messages"][-1]["content"] == COMPACT_INSTRUCTION + "\n\nGive most room to: the weather"

    assert event.summary == SUMMARY and event.replaced == 4 and event.focus == "the weather"
    assert event.usage is not None and event.usage.completion_tokens > 0
    assert recorder.events[-1] == event
    assert agent.messages == [Message("system", "sys"), Message("user", SUMMARY_HEADER + SUMMARY)]

    assert await agent.run_turn("and tomorrow?") == Completed()
    sent = server.requests[-1].json["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("system", "sys"), ("user", SUMMARY_HEADER + SUMMARY), ("user", "and tomorrow?"),
    ]
    live = agent.messages
    session_id = agent.session.id
    await agent.aclose()

    _, records = read_log(session_root / f"{session_id}.jsonl")
    compact = [r for r in records if r["type"] == "context/compact"]
    assert len(compact) == 1 and compact[0]["data"]["summary"] == SUMMARY and "turn" not in compact[0]["data"]
    assert_well_formed(records)
    resumed, _ = make_agent(server.url, session=SessionLog.open(session_id, root=session_root), system_prompt="sys")
    assert resumed.messages == live


@pytest.mark.anyio
async def test_a_failed_compaction_leaves_the_conversation_unchanged(server, make_agent):
    server.push("text", "http_401", "length")
    agent, _ = make_agent(server.url)
    assert await agent.run_turn("hello") == Completed()
    before = agent.messages
    with pytest.raises(HarnessError) as failure:
        await agent.compact()
    assert failure.value.code == ErrorCode.AUTH
    assert agent.messages == before
    with pytest.raises(HarnessError) as cut:
        await agent.compact()
    assert cut.value.code == ErrorCode.COMPACT and str(cut.value) == "the summary was cut off at the output-token limit"
    assert agent.messages == before
    assert not agent.running
    assert all(r["type"] != "context/compact" for r in read_log(agent.session.path)[1])


@pytest.mark.anyio
async def test_a_summary_the_log_cannot_hold_replaces_nothing(server, make_agent):
    server.push("text", Behaviour("text", text=SUMMARY))
    agent, _ = make_agent(server.url)
    assert await agent.run_turn("hello") == Completed()
    before = agent.messages
    agent.session.close()  # every later append fails
    with pytest.raises(HarnessError) as failure:
        await agent.compact()
    assert failure.value.code == ErrorCode.SESSION_LOG
    assert agent.messages == before


@pytest.mark.anyio
async def test_nothing_to_compact(server, make_agent):
    agent, _ = make_agent(server.url, system_prompt="sys")
    with pytest.raises(HarnessError) as failure:
        await agent.compact()
    assert failure.value.code == ErrorCode.COMPACT and str(failure.value) == "nothing to compact yet"
    assert server.requests == []


@pytest.mark.anyio
async def test_a_conversation_too_long_to_summarize_is_sent_again_as_a_cut_transcript(server, make_agent):
    server.push("text", "http_400_context", Behaviour("text", text=SUMMARY))
    agent, _ = make_agent(server.url)
    assert await agent.run_turn("hello") == Completed()
    event = await agent.compact()
    assert event.summary == SUMMARY
    second = server.requests[2].json["messages"]
    assert [m["role"] for m in second] == ["user"]
    assert second[0]["content"].startswith("The conversation so far, as a transcript:")
    assert second[0]["content"].endswith(COMPACT_INSTRUCTION)


@pytest.mark.anyio
async def test_auto_compaction_compacts_once_and_retries_once(server, make_agent):
    server.push("text", "http_400_context", Behaviour("text", text=SUMMARY), "text")
    agent, recorder = make_agent(server.url, auto_compact=True)
    assert await agent.run_turn("hello") == Completed()
    assert await agent.run_turn("more") == Completed()
    retried = server.requests[-1].json["messages"]
    assert [(m["role"], m["content"]) for m in retried] == [("user", SUMMARY_HEADER + SUMMARY)]
    compacted = [e for e in recorder.events if isinstance(e, ev.ContextCompacted)]
    assert len(compacted) == 1 and compacted[0].turn == 2 and compacted[0].replaced == 3
    _, records = read_log(agent.session.path)
    assert_well_formed(records)
    # The answer after the summary is part of the conversation; the turn's prompt lives in the summary.
    assert [m.role for m in agent.messages] == ["user", "assistant"]


@pytest.mark.anyio
async def test_auto_compaction_off_or_failing_leaves_the_failure(server, make_agent):
    server.push("http_400_context")
    agent, _ = make_agent(server.url)
    end = await agent.run_turn("hello")
    assert end.kind == "error" and end.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert len(server.requests) == 1

    server.push("http_400_context", "http_401")
    auto, _ = make_agent(server.url, auto_compact=True)
    end = await auto.run_turn("hello")
    assert end.kind == "error" and end.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert "maximum context length" in end.message
    assert auto.messages == []


def test_the_attempts_go_from_the_whole_conversation_to_a_quarter_transcript() -> None:
    history = [Message("system", "s"), Message("user", "u" * 400),
               Message("assistant", "", tool_calls=(ToolCall("c", "list_dir", "{}"),)),
               Message("tool", "a.txt", tool_call_id="c"), Message("assistant", "done")]
    attempts = list(compaction_attempts(history, None))
    assert len(attempts) == 3
    assert attempts[0][:-1] == tuple(history) and attempts[0][-1].content == COMPACT_INSTRUCTION
    text = transcript(history[1:])
    assert "[tool call] list_dir({})" in text and "[tool result]\na.txt" in text
    half, quarter = attempts[1][1].content, attempts[2][1].content
    assert attempts[1][0].role == "system" and len(quarter) < len(half)
    assert text[len(text) - len(text) // 2 :] in half
