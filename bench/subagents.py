"""Subagent round trips: the child dsh provider, and the ACP provider against the raw ACP SDK.

``child_dsh_roundtrip_ms``  spawn of ``python -m dsh.repl.serve --stdio`` to its answer (one turn
                            against the bench server), through the ``dsh`` provider.
``acp_vs_raw_sdk``          spawn -> initialize -> session/new -> prompt -> child reaped, against
                            ``repl/demo/acp_agent.py``: dsh's ACP provider over the SDK's own
                            ``spawn_agent_process`` doing the same, side by side.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import subjects
from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios
from bench.loop import temp_root
from dsh.repl import demo

__all__ = ["acp_vs_raw_sdk", "child_dsh_roundtrip"]

ACP_AGENT = Path(demo.__file__).with_name("acp_agent.py")
TASK = "Say hello."


async def child_dsh_roundtrip(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.agent_loop.subagent import Provider, SubagentRequest
    from dsh.agent_loop.subagent.dsh_sdk import DshSdkRun, DshSettings

    answers: list[float] = []
    teardowns: list[float] = []
    with temp_root("child") as root:
        provider = Provider(
            "bench",
            DshSdkRun,
            DshSettings(model="deepseek-v4-flash", base_url=server.base_url("text"), api_key=subjects.BENCH_KEY,
                        env={"XDG_STATE_HOME": str(root / "state")}),
        )

        async def run() -> float:
            start = time.perf_counter()
            async with provider.run(SubagentRequest("bench", TASK, cwd=str(root))) as child:
                result = await child.result()
                answered = time.perf_counter() - start
            teardowns.append(time.perf_counter() - start - answered)
            if result.stop_reason != "completed" or "Hello" not in result.output:
                raise RuntimeError(f"the child dsh run ended {result.stop_reason}: {result.diagnostic}")
            answers.append(answered)
            return answered

        samples = await paired_async(settings, {"child": run}, repeat=settings.size(8, 4))
    return [
        Figure(
            "child_dsh_roundtrip_ms",
            "ms",
            Stats.of([s * 1000 for s in samples["child"]]),
            target=("<", 500.0),
            details={"teardown_ms": round(statistics.median(teardowns[-len(samples["child"]):]) * 1000, 1)},
        )
    ]


class _RawClient:
    """The least an ACP client must implement to run one prompt: collect chunks, refuse permissions."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks.append(update.content.text)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **_: Any) -> Any:
        from acp.schema import DeniedOutcome, RequestPermissionResponse

        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _raw_sdk(cwd: Path) -> Callable[[], Awaitable[float]]:
    import acp
    from acp.schema import ClientCapabilities, Implementation

    async def run() -> float:
        client = _RawClient()
        start = time.perf_counter()
        async with acp.spawn_agent_process(client, sys.executable, str(ACP_AGENT), cwd=str(cwd)) as (conn, _proc):
            await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="bench", version="0.1.0"),
            )
            session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
            response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(TASK)])
        elapsed = time.perf_counter() - start
        if response.stop_reason != "end_turn" or TASK not in "".join(client.chunks):
            raise RuntimeError(f"the raw ACP run ended {response.stop_reason}")
        return elapsed

    return run


def _provider(cwd: Path) -> Callable[[], Awaitable[float]]:
    from dsh.agent_loop.subagent import SubagentRequest
    from dsh.agent_loop.subagent.acp import from_config

    provider = from_config("bench", {"provider": "acp", "command": [sys.executable, str(ACP_AGENT)]})

    async def run() -> float:
        start = time.perf_counter()
        async with provider.run(SubagentRequest("bench", TASK, cwd=str(cwd))) as child:
            result = await child.result()
        elapsed = time.perf_counter() - start
        if result.stop_reason != "completed" or TASK not in result.output:
            raise RuntimeError(f"the ACP provider run ended {result.stop_reason}: {result.diagnostic}")
        return elapsed

    return run


async def acp_vs_raw_sdk(settings: Settings, server: BenchServer) -> list[Figure]:
    with temp_root("acp") as root:
        samples = await paired_async(
            settings, {"provider": _provider(root), "raw": _raw_sdk(root)}, repeat=settings.size(8, 2)
        )
    return [
        Figure(
            "acp_vs_raw_sdk",
            "x",
            Stats.of(ratios(samples["provider"], samples["raw"])),
            target=("<=", 1.1),
            details={
                "provider_ms": round(statistics.median(samples["provider"]) * 1000, 1),
                "raw_sdk_ms": round(statistics.median(samples["raw"]) * 1000, 1),
            },
        )
    ]
