"""Child process for the durability tests: runs turns against a fault server until it is SIGKILLed.

    python agent_child_turn.py REPO URL ROOT MODE

Prints the session log path, then ``turn 1 done``; in the second turn prints ``streaming`` at the first
text delta (MODE=stream) or ``tool running`` once its tool has started (MODE=tool), then waits to die.
"""

from __future__ import annotations

import sys

sys.path.insert(0, sys.argv[1])

import anyio

from dsh.agent_loop import Agent, RetryPolicy, SessionLog, Tool, ToolRegistry
from dsh.llm import DeepSeekClient


async def main(url: str, root: str, mode: str) -> None:
    log = SessionLog.create(root)
    print(log.path, flush=True)

    async def block(args, ctx):
        print("tool running", flush=True)
        await anyio.sleep_forever()

    tools = ToolRegistry([
        Tool("quick", "q", {"type": "object"}, lambda args, ctx: _ok(), concurrency_safe=True),
        Tool("block", "b", {"type": "object"}, block, concurrency_safe=False),  # runs after quick's result
    ])
    async with DeepSeekClient(base_url=url, api_key=None) as client:
        agent = Agent(client, session=log, tools=tools, retry=RetryPolicy(base_delay=0.001))
        shown = False

        def on_event(event) -> None:
            nonlocal shown
            if mode == "stream" and event.type == "text/delta" and agent.turn_number == 2 and not shown:
                shown = True
                print("streaming", flush=True)

        agent.subscribe(on_event)
        await agent.run_turn("first")
        print("turn 1 done", flush=True)
        await agent.run_turn("second")
        print("turn 2 finished (should have been killed)", flush=True)


async def _ok() -> str:
    return "quick ok"


anyio.run(main, *sys.argv[2:5])
