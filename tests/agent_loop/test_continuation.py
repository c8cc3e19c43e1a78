"""An answer that survives a cut (agent_loop/continuation.py): Agent -> DeepSeekClient -> real loopback HTTP ->
the fault server, which serves DeepSeek's chat prefix completion on ``/beta/chat/completions``.

What a user relies on: the answer shown once and whole, the session log holding it once with the cut's record,
the continuation asked of the beta route with the text so far as an assistant ``prefix``, and nothing of the
kind for a reply whose tool call was cut or on an endpoint that is not DeepSeek's dialect.
"""

from __future__ import annotations

import pytest

from dsh.agent_loop import Completed, Failed, MaxTokens, ToolRegistry
from dsh.agent_loop.continuation import ContinuationPolicy, continue_words
from dsh.agent_loop.events import LlmContinue
from dsh.llm.loopback.fault_server import Behaviour
from tests.agent_loop.agent_support import durable_types, echo_tool, read_log

pytestmark = pytest.mark.anyio

ANSWER = "The answer begins here, and then it goes on to the end."
FIRST = "The answer begins here,"  # what the cut stream sends (text_frames splits it at words)


def _on(server, *cuts: Behaviour | str) -> None:
    """The script: each cut in turn, then the whole answer (a prefix request gets the rest of it)."""
    server.push(*cuts)
    server.default = Behaviour("text", text=ANSWER)


async def test_a_stream_cut_after_text_is_continued_from_that_text(server, make_agent):
    _on(server, Behaviour("reset_mid_stream", text=FIRST))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy())
    assert await agent.run_turn("explain") == Completed()
    assert seen.text() == ANSWER  # shown once, whole
    first, second = server.requests
    assert first.path == "/chat/completions" and second.path == "/beta/chat/completions"
    assert second.json["messages"][-1] == {"role": "assistant", "content": FIRST, "prefix": True}
    assert second.json["messages"][:-1] == first.json["messages"]  # the same conversation, so the cache serves it
    _, records = read_log(agent.session.path)
    assert durable_types(records) == ["turn/start", "step/start", "llm/continue", "assistant/message", "turn/end"]
    cut = records[2]["data"]
    assert (cut["code"], cut["kept_chars"], cut["attempt"], cut["max_attempts"]) == ("TRANSPORT", len(FIRST), 1, 2)
    assert "Connection reset by peer" in cut["message"]
    assert records[3]["data"]["content"] == ANSWER and records[3]["data"]["finish_reason"] == "stop"
    # The next turn's request carries the answer once, as one assistant message.
    await agent.run_turn("thanks")
    assert [m["content"] for m in server.requests[-1].json["messages"] if m["role"] == "assistant"] == [ANSWER]


async def test_the_line_names_the_cut_and_what_was_kept(server, make_agent):
    _on(server, Behaviour("fin_mid_stream", text=FIRST))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy())
    assert await agent.run_turn("explain") == Completed()
    event = LlmContinue(**{k: v for k, v in seen.of("llm/continue")[0].items() if k != "cause"})
    assert continue_words(event) == f"[continuing after TRANSPORT: {len(FIRST)} chars kept (prefix completion)]"
    assert continue_words(LlmContinue(1, 1, 1, 2, "TRANSPORT", 1214)) == (
        "[continuing after TRANSPORT: 1 214 chars kept (prefix completion)]")
    assert continue_words(LlmContinue(1, 1, 1, 2, "length", 3)) == (
        "[continuing after the output-token limit: 3 chars kept (prefix completion)]")
    assert continue_words(LlmContinue(1, 1, 1, 2, "\x1b[31mX", 3)).startswith("[continuing after UNKNOWN: ")


async def test_a_stall_after_text_is_continued(server, make_agent):
    _on(server, Behaviour("stall_mid_stream", text=FIRST))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy(),
                             client_options={"stream_idle_timeout": 0.3})
    assert await agent.run_turn("explain") == Completed()
    assert seen.text() == ANSWER
    assert [e["code"] for e in seen.of("llm/continue")] == ["TIMEOUT"]


async def test_continuations_stop_at_max_continuations_and_the_cut_stands(server, make_agent):
    server.push(*[Behaviour("reset_mid_stream", text=text) for text in ("One", " two", " three")])
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy(max_continuations=2))
    reason = await agent.run_turn("count")
    assert isinstance(reason, Failed) and reason.code == "TRANSPORT"
    assert len(server.requests) == 3
    assert [r.json["messages"][-1].get("content") for r in server.requests[1:]] == ["One", "One two"]
    assert seen.text() == "One two three"
    _, records = read_log(agent.session.path)
    assert [r["data"]["attempt"] for r in records if r["type"] == "llm/continue"] == [1, 2]
    interrupted = [r["data"] for r in records if r["type"] == "assistant/message"]
    assert [(m["content"], m["interrupted"]) for m in interrupted] == [("One two three", True)]


async def test_a_cut_tool_call_is_not_continued(server, make_agent):
    server.push(Behaviour("reset_mid_tool_call", text="Let me look."))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy(),
                             tools=ToolRegistry([echo_tool("get_weather")]))
    reason = await agent.run_turn("weather?")
    assert isinstance(reason, Failed) and reason.code == "TRANSPORT"
    assert len(server.requests) == 1 and seen.of("llm/continue") == []


async def test_a_server_error_after_text_stands(server, make_agent):
    server.push(Behaviour("error_event", text=FIRST))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy())
    reason = await agent.run_turn("explain")
    assert isinstance(reason, Failed)
    assert len(server.requests) == 1 and seen.of("llm/continue") == []


async def test_without_a_policy_a_cut_ends_the_turn_as_before(server, make_agent):
    _on(server, Behaviour("reset_mid_stream", text=FIRST))
    agent, seen = make_agent(server.url)  # another dialect's endpoint: no continuation policy
    reason = await agent.run_turn("explain")
    assert isinstance(reason, Failed) and reason.code == "TRANSPORT"
    assert len(server.requests) == 1 and seen.text() == FIRST


async def test_auto_continue_goes_on_past_the_output_token_limit(server, make_agent):
    _on(server, Behaviour("length", text=FIRST))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy(auto_continue=True))
    assert await agent.run_turn("explain") == Completed()
    assert seen.text() == ANSWER
    assert server.requests[1].path == "/beta/chat/completions"
    (event,) = seen.of("llm/continue")
    assert event["code"] == "length" and event["usage"] is not None  # the capped request's tokens are counted
    _, records = read_log(agent.session.path)
    assert [r["data"]["content"] for r in records if r["type"] == "assistant/message"] == [ANSWER]


async def test_without_auto_continue_the_output_token_limit_ends_the_turn(server, make_agent):
    _on(server, Behaviour("length", text=FIRST))
    agent, _ = make_agent(server.url, continuation=ContinuationPolicy())
    assert await agent.run_turn("explain") == MaxTokens()
    assert len(server.requests) == 1


async def test_past_the_budget_a_cut_is_not_continued(server, make_agent):
    from dsh.agent_loop.reasons import BudgetStop

    _on(server, Behaviour("reset_mid_stream", text=FIRST))
    agent, seen = make_agent(server.url, continuation=ContinuationPolicy())
    asked: list[int] = []

    def budget() -> BudgetStop | None:  # the first request is within the cap; anything after it is not
        asked.append(1)
        return None if len(asked) == 1 else BudgetStop(0.52, 0.50)

    agent.before_request = budget
    reason = await agent.run_turn("explain")
    assert isinstance(reason, Failed) and reason.code == "TRANSPORT"  # the cut stands: no request past the cap
    assert len(server.requests) == 1 and seen.of("llm/continue") == []
