"""Peak RSS of one full agent turn at 1x and 10x the deltas, each in a fresh process.

``python -m bench.rss BASE_URL ROOT`` runs one turn against ``BASE_URL`` with its session log under
``ROOT`` and prints ``{"baseline_mb", "peak_mb"}``: resident set after imports and set-up, and the
process's peak resident set (``VmHWM``) after the turn. The parent (:func:`peak_rss`) runs it per stream size.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env
from bench.loop import scaling_streams, temp_root

__all__ = ["peak_rss"]


def _status_mb(field: str) -> float:
    """``VmHWM`` (peak) or ``VmRSS`` (now) of this process, in MB.

    Not ``ru_maxrss``: on Linux that survives ``execve`` and so starts at the forking parent's peak.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


async def _one_turn(base_url: str, root: Path) -> dict[str, float]:
    from bench.subjects import BENCH_KEY
    from dsh.agent_loop import Agent, SessionLog, ToolRegistry
    from dsh.llm import DeepSeekClient

    async with DeepSeekClient(base_url=base_url, api_key=BENCH_KEY) as client:
        agent = Agent(client, session=SessionLog.create(root, cwd=root), tools=ToolRegistry(), cwd=root)
        baseline = _status_mb("VmRSS")
        reason = await agent.run_turn("Write a long answer.")
        await agent.aclose()
    if reason.kind != "completed":
        raise SystemExit(f"turn ended {reason.to_dict()}")
    return {"baseline_mb": baseline, "peak_mb": _status_mb("VmHWM")}


def _measure(base_url: str, root: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.rss", base_url, str(root)],
        cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.rss exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


async def peak_rss(settings: Settings, server: BenchServer) -> list[Figure]:
    parts: dict[str, Stats] = {}
    details: dict[str, float | str] = {}
    with temp_root("rss") as root:
        for label, stream in zip(("1x", "10x"), scaling_streams(settings), strict=True):
            runs = [_measure(server.base_url(stream), root) for _ in range(settings.size(3, 2))]
            parts[label] = Stats.of([run["peak_mb"] for run in runs])
            details[f"{label}_stream"] = stream
            details[f"{label}_baseline_mb"] = round(statistics.median(run["baseline_mb"] for run in runs), 1)
    return [Figure("peak_rss_mb", "MB", parts=parts, details=details)]


if __name__ == "__main__":
    import anyio

    print(json.dumps(anyio.run(_one_turn, sys.argv[1], Path(sys.argv[2]))))
