"""``sandbox_cost_ms`` and ``sandbox_vs_bare``: one ``sh -c true`` through ``run_command`` under bubblewrap
(``sandbox = "bwrap"``, docs/safety.md) against the same command bare, in a git repository, paired.

The sandboxed run is run_shell's (``run_sandboxed``): it pays for bwrap's namespaces, its mounts (the tree, the
git directory, its read-only files, a private /tmp), its pid-1 init and the reaper that reports the command's
own wait status, plus the check of the sandbox's plan before each command (the plan itself is made at the first).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios, unavailable
from bench.loop import temp_root
from dsh.agent_loop.sandbox import Sandbox, sandbox_problem
from dsh.agent_loop.tools.shell import run_command, run_sandboxed

__all__ = ["sandbox_cost"]


def _subject(tree: Path, sandbox: Sandbox | None) -> Callable[[], Awaitable[float | None]]:
    async def run() -> None:
        argv = ["/bin/sh", "-c", "true"]
        if sandbox is not None:
            result = await run_sandboxed(sandbox, argv, cwd=tree, timeout=60, output_limit=64 * 1024)
        else:
            result = await run_command(argv, cwd=tree, timeout=60)
        assert result.exit_code == 0, result

    return run


async def sandbox_cost(settings: Settings, server: BenchServer) -> list[Figure]:
    if shutil.which("bwrap") is None:
        reason = "bwrap is not installed: apt-get install bubblewrap"
        return [unavailable("sandbox_cost_ms", "ms", reason), unavailable("sandbox_vs_bare", "x", reason)]
    if (problem := sandbox_problem()) is not None:
        return [unavailable("sandbox_cost_ms", "ms", problem), unavailable("sandbox_vs_bare", "x", problem)]
    repeat = settings.size(40, 10)
    with temp_root("sandbox") as root:
        tree = root / "tree"
        tree.mkdir()
        subprocess.run(["git", "init", "-q", str(tree)], check=True)
        samples = await paired_async(
            settings, {"sandboxed": _subject(tree, Sandbox()), "bare": _subject(tree, None)}, repeat=repeat
        )
    added = [(a - b) * 1000 for a, b in zip(samples["sandboxed"], samples["bare"], strict=True)]
    details = {"bare_ms": round(statistics.median(samples["bare"]) * 1000, 2),
               "sandboxed_ms": round(statistics.median(samples["sandboxed"]) * 1000, 2)}
    return [
        Figure("sandbox_cost_ms", "ms", Stats.of(added), details=details),
        Figure("sandbox_vs_bare", "x", Stats.of(ratios(samples["sandboxed"], samples["bare"])), details=details),
    ]
