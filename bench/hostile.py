"""Peak RSS of one agent turn under each hostile stream, each in a fresh process.

``python -m bench.hostile BASE_URL ROOT`` runs one turn (default tools, a 2 s first-token deadline)
against ``BASE_URL`` and prints ``{"peak_mb", "seconds", "end"}``. The parent (:func:`hostile_peak_rss`)
serves each stream from the fault server: a gzip keep-alive bomb (5 GiB inflated from ~5 MB on the
wire), 10^6 tool calls in one response, and one 100 MiB tool argument (docs/reliability.md,
"Hostile streams"). The figure is the worst of the three; the target is 512 MB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env
from bench.loop import temp_root
from bench.rss import _status_mb

__all__ = ["hostile_peak_rss"]


async def _one_turn(base_url: str, root: Path) -> dict[str, object]:
    from bench.subjects import BENCH_KEY
    from dsh.agent_loop import Agent, SessionLog, default_tools
    from dsh.llm import DeepSeekClient

    started = time.monotonic()
    async with DeepSeekClient(base_url=base_url, api_key=BENCH_KEY, first_token_timeout=2.0) as client:
        agent = Agent(client, session=SessionLog.create(root, cwd=root), tools=default_tools(), cwd=root)
        reason = await agent.run_turn("Go.")
        await agent.aclose()
    return {"peak_mb": _status_mb("VmHWM"), "seconds": time.monotonic() - started, "end": reason.kind}


def _measure(base_url: str, root: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.hostile", base_url, str(root)],
        cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, check=False, timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.hostile exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


async def hostile_peak_rss(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    streams = {
        "keepalive_bomb": Behaviour("keepalive_bomb", inflated_mb=settings.size(5120, 500)),
        "tool_call_flood": Behaviour("tool_call_flood", count=settings.size(1_000_000, 100_000)),
        "huge_argument": Behaviour("huge_arguments", mb=settings.size(100, 20)),
    }
    parts: dict[str, Stats] = {}
    details: dict[str, float | str] = {}
    fault = FaultServer().start_in_thread()
    try:
        with temp_root("hostile") as root:
            for label, behaviour in streams.items():
                # The first-token timeout is retried once: the retry meets the bomb too.
                fault.push(*([behaviour] * (2 if label == "keepalive_bomb" else 1)))
                run = _measure(fault.url, root)
                fault.clear_script()
                parts[label] = Stats.of([float(run["peak_mb"])])
                details[f"{label}_seconds"] = round(float(run["seconds"]), 1)
                details[f"{label}_end"] = str(run["end"])
    finally:
        fault.stop()
    return [Figure("hostile_peak_rss_mb", "MB", target=("<", 512.0), parts=parts, details=details)]


if __name__ == "__main__":
    import anyio

    print(json.dumps(anyio.run(_one_turn, sys.argv[1], Path(sys.argv[2]))))
