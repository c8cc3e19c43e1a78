"""Every turn-end reason end to end: Agent -> DeepSeekClient -> real loopback HTTP -> fault server.

Each test checks what the user relies on: the reason returned, the live events, and the durable
records read back from the JSONL file on disk.
"""

from __future__ import annotations

import anyio
import pytest

from dsh.agent_loop import (
    Aborted,
    Agent,
    Completed,
    Disposed,
    Failed,
    MaxTokens,
    PromptGuard,
    Rejected,
    Tool,
    ToolOutput,
    ToolRegistry,
)
from dsh.llm import Finish, TextDelta
from dsh.llm.loopback import streams
from dsh.llm.loopback.fault_server import BEHAVIOURS, Behaviour, closed_port
from tests import canaries
from tests.agent_loop.agent_support import (
    ScriptedClient,
    assert_well_formed,
    durable_types,
    echo_tool,
    read_log,
)

pytestmark = pytest.mark.anyio

CONTEXT_MESSAGE = (
    "This model's maximum context length is 131072 tokens. However, you requested 140000 tokens (140000 in "
    "the messages, 0 in the completion). Please reduce the length of the messages or completion."
)


async def _length_then_tool_call(ex) -> bool:  # a step that hits the output cap mid tool call
    call = streams.ToolCallSpec("call_len_1", "get_weather", '{"location": "Hangzhou"}')
    frames = streams.tool_call_frames((call,), reasoning=None)
    frames[-3] = streams.frame(streams.chunk({"content": None}, finish_reason="length"))
    await ex.start_stream()
    await ex.send_frames(frames)
    return await ex.finish()


@pytest.fixture
def length_tool_call(monkeypatch) -> str:
    """A behaviour the fault server lacks, registered for one test only (the registry is global)."""
    monkeypatch.setitem(BEHAVIOURS, "test_length_tool_call", _length_then_tool_call)
    return "test_length_tool_call"


async def test_completed_text(server, make_agent):
    agent, seen = make_agent(server.url)
    reason = await agent.run_turn("Say hello.")
    assert reason == Completed()
    assert seen.text() == "Hello! How can I help you today?"
    header, records = read_log(agent.session.path)
    assert header["type"] == "session" and header["version"] == 1 and header["id"] == agent.session.id
    assert durable_types(records) == ["turn/start", "step/start", "assistant/message", "turn/end"]
    assert records[0]["data"] == {"turn": 1, "prompt": "Say hello."}
    assert records[2]["data"]["content"] == "Hello! How can I help you today?"
    assert records[2]["data"]["finish_reason"] == "stop"
    assert records[2]["data"]["interrupted"] is False
    assert records[-1]["data"] == {"turn": 1, "reason": {"kind": "completed"}}
    # live-only events never reach the log
    assert "text/delta" in seen.types and "text/delta" not in durable_types(records)
    assert server.requests[0].json["messages"] == [{"role": "user", "content": "Say hello."}]


async def test_transport_refused_port_keeps_the_full_chain_in_the_durable_turn_end(make_agent):
    with closed_port() as port:
        base = f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{port}/v1?key={canaries.URL_QUERY}"
        agent, _ = make_agent(base)
        reason = await agent.run_turn("hello")
    expected = (
        f"request to the endpoint at http://***@127.0.0.1:{port}/v1 failed: All connection attempts failed: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})"
    )
    assert reason == Failed(code="TRANSPORT", message=expected, step=1, detail="refused",
                           endpoint=f"http://***@127.0.0.1:{port}/v1")
    _, records = read_log(agent.session.path)
    end = records[-1]
    assert end["type"] == "turn/end"
    assert end["data"]["reason"] == {"kind": "error", "code": "TRANSPORT", "message": expected, "step": 1,
                                     "detail": "refused", "endpoint": f"http://***@127.0.0.1:{port}/v1"}
    retries = [r["data"] for r in records if r["type"] == "llm/retry"]
    assert [r["attempt"] for r in retries] == [1, 2, 3, 4, 5]
    assert all(r["code"] == "TRANSPORT" and r["message"] == expected for r in retries)
    raw = agent.session.path.read_text()
    for canary in (canaries.URL_USER, canaries.URL_PASSWORD, canaries.URL_QUERY, canaries.API_KEY):
        assert canary not in raw
    assert agent.last_failure is not None and agent.last_failure.code == "TRANSPORT"


RETRIED = 6  # the first attempt and five retries


@pytest.mark.parametrize(
    ("behaviour", "code", "status", "message", "requests"),
    [
        ("http_400", "INVALID_REQUEST", 400,
         "The `reasoning_content` in the thinking mode must be passed back to the API.", 1),
        ("http_400_context", "CONTEXT_WINDOW_EXCEEDED", 400, CONTEXT_MESSAGE, 1),
        ("http_401", "AUTH", 401, "Authentication Fails, Your api key: ****abcd is invalid", 1),
        ("http_402", "QUOTA", 402, "Insufficient Balance", 1),
        ("http_403", "AUTH", 403, "Permission denied: this API key may not use this model", 1),
        ("http_413", "INVALID_REQUEST", 413, "Request body too large", 1),
        ("http_422", "HTTP_422", 422, "Invalid Parameters: temperature must be between 0 and 2", 1),
        ("http_418", "HTTP_418", 418, "I'm a Teapot", 1),
        (Behaviour("http_429", retry_after="0.001"), "RATE_LIMIT", 429, "Rate Limit Reached", RETRIED),
        ("http_500", "SERVER", 500, "Internal Server Error", RETRIED),
        ("http_502_html", "SERVER", 502, "API error (HTTP 502) from {E}", RETRIED),
        ("http_503", "SERVER", 503, "Server Overloaded, please try again later", RETRIED),
    ],
)
async def test_every_http_code_ends_the_turn_with_its_code(server, make_agent, behaviour, code, status, message,
                                                           requests):
    server.push(*[behaviour] * requests)
    agent, seen = make_agent(server.url)
    reason = await agent.run_turn("hello")
    message = message.replace("{E}", f"the endpoint at 127.0.0.1:{server.port}")
    # A first turn's overflow had nothing to compact: the agent says so, for the fix line.
    alone = {"detail": "nothing-to-compact"} if code == "CONTEXT_WINDOW_EXCEEDED" else {}
    # The endpoint that answered is kept for the fix line: the fault server's URL, unnamed.
    assert reason == Failed(code=code, message=message, step=1, status=status,
                            request_id=f"fault-{requests:04d}", endpoint=server.url, **alone)
    assert len(server.requests) == requests
    assert len(seen.of("llm/retry")) == requests - 1
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"] == {
        "kind": "error", "code": code, "message": message, "step": 1, "status": status,
        "request_id": f"fault-{requests:04d}", "endpoint": server.url, **alone,
    }
    assert "assistant/message" not in durable_types(records)
    assert_well_formed(records)


@pytest.mark.parametrize(
    ("behaviour", "code", "message", "prefix"),
    [
        ("no_finish", "STREAM_CLOSED", "SSE stream ended without [DONE]", "No finish"),
        ("malformed_json", "MALFORMED_RESPONSE",
         'malformed SSE payload: {"id": "x", "choices": [{"delta": {"content": "unterminated', "Hi"),
        ("content_filter", "CONTENT_FILTER", 'stream from {E} finished with finish_reason "content_filter"',
         "The answer is cut here"),
    ],
)
async def test_stream_failures_after_content_end_error_and_keep_what_was_shown(
    server, make_agent, behaviour, code, message, prefix
):
    server.push(behaviour)
    agent, seen = make_agent(server.url)
    reason = await agent.run_turn("hello")
    assert isinstance(reason, Failed)
    assert (reason.code, reason.step) == (code, 1)
    message = message.replace("{E}", f"the endpoint at 127.0.0.1:{server.port}")
    assert reason.message.startswith(message)  # then whatever lies beneath (e.g. the JSON error)
    assert len(server.requests) == 1  # never retried
    assert seen.text() == prefix
    _, records = read_log(agent.session.path)
    assert durable_types(records) == ["turn/start", "step/start", "assistant/message", "turn/end"]
    assert records[2]["data"]["content"] == prefix and records[2]["data"]["interrupted"] is True


async def test_reset_mid_stream_is_transport_and_not_streamed_twice(server, make_agent):
    server.push("reset_mid_stream")
    agent, seen = make_agent(server.url)
    reason = await agent.run_turn("hello")
    assert isinstance(reason, Failed) and reason.code == "TRANSPORT"
    assert reason.message.startswith(f"stream from the endpoint at {server.url} failed: ")
    assert "Connection reset by peer" in reason.message
    assert len(server.requests) == 1
    assert seen.text() == "Half an answer"


async def test_max_tokens(server, make_agent):
    server.push("length")
    agent, _ = make_agent(server.url)
    assert await agent.run_turn("write a lot") == MaxTokens()
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"] == {"kind": "max-tokens"}
    assert records[-2]["data"]["finish_reason"] == "length"


async def test_max_tokens_is_sticky_across_a_later_step(server, make_agent, length_tool_call):
    server.push(length_tool_call, "text")
    agent, seen = make_agent(server.url, tools=ToolRegistry([echo_tool("get_weather")]))
    reason = await agent.run_turn("weather?")
    assert reason == MaxTokens()
    assert [m["finish_reason"] for m in seen.of("assistant/message")] == ["length", "stop"]
    assert len(server.requests) == 2  # the turn went on after the capped step
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"] == {"kind": "max-tokens"}


async def test_rejected_by_the_guard_sends_nothing_and_logs_no_secret(server, make_agent):
    agent, _ = make_agent(server.url)
    reason = await agent.run_turn(f"deploy with key {canaries.API_KEY} please")
    assert reason == Rejected("prompt contains what looks like a secret (sk-…); not sent")
    assert server.requests == []
    _, records = read_log(agent.session.path)
    assert durable_types(records) == ["turn/start", "turn/end"]
    assert records[-1]["data"]["reason"] == {
        "kind": "rejected", "reason": "prompt contains what looks like a secret (sk-…); not sent"}
    assert canaries.API_KEY not in agent.session.path.read_text()
    assert records[0]["data"]["prompt"] == "deploy with key sk-… please"
    # the rejected prompt does not linger in the conversation
    assert await agent.run_turn("hello") == Completed()
    assert server.requests[0].json["messages"] == [{"role": "user", "content": "hello"}]


async def test_rejected_by_a_prompt_hook(server, make_agent, tmp_path):
    seen_stdin = tmp_path / "hook-stdin.txt"
    hook = f'cat > "{seen_stdin}"; echo "no deploys on Friday"; echo second line; exit 3'
    agent, _ = make_agent(server.url, guard=PromptGuard(hook_command=hook))
    reason = await agent.run_turn("deploy to production")
    assert reason == Rejected("no deploys on Friday")
    assert seen_stdin.read_text() == "deploy to production"
    assert server.requests == []
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"] == {"kind": "rejected", "reason": "no deploys on Friday"}


async def test_a_hook_that_exits_zero_lets_the_prompt_through(server, make_agent):
    agent, _ = make_agent(server.url, guard=PromptGuard(hook_command="cat >/dev/null; exit 0"))
    assert await agent.run_turn("hello") == Completed()
    assert len(server.requests) == 1


async def test_aborted_mid_stream_keeps_the_prefix_and_the_next_turn_runs(server, make_agent):
    server.push(Behaviour("stall_mid_stream", text="Partial answer so far"))
    agent, seen = make_agent(server.url)

    def cancel_when_shown(event) -> None:
        if event.type == "text/delta" and seen.text() == "Partial answer so far":
            agent.cancel()

    agent.subscribe(cancel_when_shown)
    with anyio.fail_after(10):
        reason = await agent.run_turn("tell me")
    assert reason == Aborted("cancelled")
    _, records = read_log(agent.session.path)
    assert durable_types(records) == ["turn/start", "step/start", "assistant/message", "turn/end"]
    message = records[2]["data"]
    assert message["content"] == "Partial answer so far"
    assert message["interrupted"] is True and message["tool_calls"] == []
    assert records[-1]["data"]["reason"] == {"kind": "aborted", "reason": "cancelled"}

    assert await agent.run_turn("go on") == Completed()
    assert server.requests[-1].json["messages"] == [
        {"role": "user", "content": "tell me"},
        {"role": "assistant", "content": "Partial answer so far"},
        {"role": "user", "content": "go on"},
    ]
    _, records = read_log(agent.session.path)
    assert_well_formed(records)


async def test_cancel_by_the_callers_scope_ends_aborted_and_propagates(server, make_agent):
    server.push(Behaviour("stall_mid_stream", text="Partial"))
    agent, seen = make_agent(server.url)
    results = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            agent.subscribe(lambda event: event.type == "text/delta" and group.cancel_scope.cancel())

            async def run() -> None:
                results.append(await agent.run_turn("tell me"))

            group.start_soon(run)
    assert results == []  # run_turn re-raised the cancellation instead of returning
    assert seen.of("turn/end")[-1]["reason"] == {"kind": "aborted", "reason": "cancelled"}
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"] == {"kind": "aborted", "reason": "cancelled"}
    assert records[-2]["data"]["content"] == "Partial" and records[-2]["data"]["interrupted"] is True
    assert not agent.running
    assert await agent.run_turn("again") == Completed()


async def test_cancel_while_a_tool_runs_gives_pending_calls_a_failed_result(server, make_agent):
    started = anyio.Event()

    async def never_finishes(args, ctx) -> ToolOutput:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    tools = ToolRegistry([
        Tool("get_weather", "slow", {"type": "object"}, never_finishes),
        echo_tool("get_time", safe=False),
    ])
    server.push("parallel_tool_calls")
    agent, _ = make_agent(server.url, tools=tools)
    async with anyio.create_task_group() as group:
        async def watch() -> None:
            await started.wait()
            agent.cancel()

        group.start_soon(watch)
        with anyio.fail_after(10):
            reason = await agent.run_turn("weather and time")
    assert reason == Aborted("cancelled")
    _, records = read_log(agent.session.path)
    results = [r["data"] for r in records if r["type"] == "tool/result"]
    assert [(r["id"], r["output"], r["is_error"]) for r in results] == [
        ("call_00_a1", "Error: tool call cancelled", True),
        ("call_01_b2", "Error: tool call cancelled", True),
    ]
    calls = [r["data"]["id"] for r in records if r["type"] == "tool/call"]
    assert calls == ["call_00_a1", "call_01_b2"]
    assert_well_formed(records)
    # The conversation stays valid for the API: every call has its result.
    assert await agent.run_turn("next") == Completed()
    sent = server.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[2] == {"role": "tool", "content": "Error: tool call cancelled", "tool_call_id": "call_00_a1"}


async def test_closing_the_agent_mid_turn_ends_it_disposed(server, make_agent):
    server.push("stall_after_headers")
    agent, seen = make_agent(server.url)
    results = []
    async with anyio.create_task_group() as group:
        async def run() -> None:
            results.append(await agent.run_turn("hello"))

        group.start_soon(run)
        with anyio.fail_after(10):
            while len(server.requests) < 1:
                await anyio.sleep(0.01)
            await agent.aclose()
    assert results == [Disposed()]
    assert seen.of("turn/end")[-1]["reason"] == {"kind": "disposed"}
    _, records = read_log(agent.session.path)
    assert records[-1]["data"]["reason"] == {"kind": "disposed"}


async def test_the_max_steps_guard(server, make_agent):
    server.default = Behaviour("tool_call")
    agent, _ = make_agent(server.url, tools=ToolRegistry([echo_tool("get_weather")]), max_steps=3)
    reason = await agent.run_turn("loop forever")
    assert isinstance(reason, Failed)
    assert (reason.code, reason.step) == ("MAX_STEPS", 3)
    assert reason.message == "turn stopped after 3 steps (the max-steps guard); the model kept calling tools"
    assert len(server.requests) == 3
    _, records = read_log(agent.session.path)
    assert_well_formed(records)


async def test_turn_numbers_count_up_and_every_turn_is_balanced(server, make_agent):
    server.push("text", "http_401", "length")
    agent, _ = make_agent(server.url)
    kinds = [(await agent.run_turn(f"prompt {n}")).kind for n in range(3)]
    assert kinds == ["completed", "error", "max-tokens"]
    assert agent.turn_number == 3
    _, records = read_log(agent.session.path)
    assert [r["data"]["turn"] for r in records if r["type"] == "turn/end"] == [1, 2, 3]
    assert_well_formed(records)


async def test_thinking_mode_tool_call_messages_carry_reasoning_back(server, make_agent):
    server.push("tool_call", "text", Behaviour("tool_call", reasoning=None), "text", "reasoning", "text")
    agent, _ = make_agent(server.url, tools=ToolRegistry([echo_tool("get_weather")]), thinking=True)
    assert await agent.run_turn("weather?") == Completed()
    assert await agent.run_turn("again?") == Completed()
    assert await agent.run_turn("think") == Completed()
    assert await agent.run_turn("bye") == Completed()
    sent = server.requests[-1].json
    assert sent["thinking"] == {"type": "enabled"}
    assistants = [m for m in sent["messages"] if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == "Need the weather; call it."
    assert "tool_calls" in assistants[0]
    assert assistants[2]["reasoning_content"] == "" and "tool_calls" in assistants[2]
    # plain replies are sent back without their reasoning
    assert [("reasoning_content" in m) for m in assistants] == [True, False, True, False, False]


async def test_a_non_llm_failure_gets_code_unknown_with_its_chain():
    class Boom(Exception):
        pass

    try:
        raise Boom("adapter bug")
    except Boom as inner:
        outer = RuntimeError("client fell over")
        outer.__cause__ = inner
    client = ScriptedClient([TextDelta("x"), outer])
    agent = Agent(client)
    reason = await agent.run_turn("hi")
    assert reason == Failed(code="UNKNOWN", message="client fell over: adapter bug", step=1)
    assert agent.last_failure is outer


async def test_a_scripted_client_turn_without_a_log():
    agent = Agent(ScriptedClient([TextDelta("hi there"), Finish("stop")]))
    assert await agent.run_turn("hello") == Completed()
    assert [m.role for m in agent.messages] == ["user", "assistant"]


async def test_a_second_concurrent_turn_is_refused():
    release = anyio.Event()

    class WaitingClient:
        async def stream(self, request):
            await release.wait()
            yield TextDelta("a")
            yield Finish("stop")

    agent = Agent(WaitingClient())
    errors = []

    async def second() -> None:
        try:
            await agent.run_turn("two")
        except Exception as exc:
            errors.append(exc)
        release.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(second)
            await agent.run_turn("one")
    assert [getattr(e, "code", None) for e in errors] == ["TURN_BUSY"]
