"""Property: whatever the server does and wherever a cancel lands, the log the loop writes is balanced.

Every turn/start has exactly one turn/end, nothing of a turn comes after its end, every tool call of a
turn has a result before it ends, seq is contiguous -- and the live events and returned reasons agree.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop import Agent, RetryPolicy, SessionLog, ToolRegistry
from dsh.llm import DeepSeekClient
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.agent_loop.agent_support import Recorder, assert_well_formed, echo_tool, read_log

BEHAVIOURS = [
    "text", "reasoning", "tool_call", "parallel_tool_calls", "length", "http_503", "http_401", "http_400",
    "no_done", "no_finish", "reset_mid_stream", "malformed_json", "empty", "content_filter", "reset_before_headers",
    "fin_mid_stream", Behaviour("http_429", retry_after="0.001"), Behaviour("stall_mid_stream", text="Part"),
    Behaviour("tool_call", name="no_such_tool"), Behaviour("tool_call", arguments="{broken"),
]

turn_spec = st.tuples(
    st.sampled_from(["hello", "key sk-abcdefghijklmnopqrstuvwxyz0123"]),  # sometimes rejected by the guard
    st.one_of(st.none(), st.integers(min_value=0, max_value=14)),  # cancel after that many events, or never
)


async def _scenario(script: list, turns: list[tuple[str, int | None]], root: Path) -> None:
    async with FaultServer(script=script) as server:
        client = DeepSeekClient(base_url=server.url, api_key=None, stream_idle_timeout=0.2,
                                first_token_timeout=1.0, connect_timeout=2.0)
        tools = ToolRegistry([echo_tool("get_weather"), echo_tool("get_time", safe=False)])
        log = SessionLog.create(root)
        agent = Agent(client, session=log, tools=tools, max_steps=4,
                      retry=RetryPolicy(base_delay=0.001, jitter=0.0, max_retries=2))
        seen = Recorder()
        agent.subscribe(seen)
        reasons = []
        try:
            for prompt, cancel_after in turns:
                start = len(seen.events)

                def maybe_cancel(event, start=start, cancel_after=cancel_after) -> None:
                    if cancel_after is not None and len(seen.events) - start == cancel_after:
                        agent.cancel()

                unsubscribe = agent.subscribe(maybe_cancel)
                with anyio.fail_after(20):
                    reasons.append(await agent.run_turn(prompt))
                unsubscribe()
        finally:
            await agent.aclose()
            await client.aclose()
    _, records = read_log(log.path)
    assert_well_formed(records)
    ends = [r["data"]["reason"] for r in records if r["type"] == "turn/end"]
    assert ends == [reason.to_dict() for reason in reasons]
    assert [e["reason"] for e in seen.of("turn/end")] == ends
    assert len(seen.of("turn/start")) == len(turns)
    # reopening finds nothing to repair
    reopened = SessionLog.open(log.path)
    assert reopened.repaired_turn is None
    reopened.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(st.sampled_from(BEHAVIOURS), max_size=8), turns=st.lists(turn_spec, min_size=1, max_size=3))
def test_every_turn_the_loop_writes_is_balanced(script, turns):
    with tempfile.TemporaryDirectory() as root:
        anyio.run(_scenario, script, turns, Path(root))
