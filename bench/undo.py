"""``undo_journal_vs_bare`` and ``undo_journal_cost_ms``: one ``edit_file`` through the real tool with the undo
journal (agent_loop/journal.py: the before-image stored and fsynced, the index line fsynced) against the same
edit without one, paired in the same run, on a 1 KiB and a 1 MiB file (docs/safety.md, "Undo and rewind").

Each edit changes a counter in the file, so every before-image is new (none is shared: the worst case for the
blob store). ``details`` gives the journal's bytes per edit: its index line and its before-image.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios
from bench.loop import temp_root
from dsh.agent_loop.journal import JOURNAL_KEY, Journal
from dsh.agent_loop.tools import ToolContext, default_tools, run_tool_call
from dsh.llm import ToolCall

__all__ = ["undo_journal_cost"]

_SIZES = {"1 KiB": 1 << 10, "1 MiB": 1 << 20}


def _editor(tree: Path, name: str, size: int, journal: Journal | None) -> Callable[[], Awaitable[float | None]]:
    registry = default_tools(allow_edits=True)
    state = {JOURNAL_KEY: journal} if journal is not None else {}
    ctx = ToolContext(cwd=tree, turn=1, notify=lambda event: None, session_state=state)
    path = tree / name
    path.write_text("v0\n" + "x" * (size - 4) + "\n")
    counter = [0]

    async def call(tool: str, **args: object) -> str:
        return (await run_tool_call(registry, ToolCall("c", tool, json.dumps(args)), ctx)).text

    async def edit() -> float | None:
        await call("read_file", path=name, limit=1)  # the edit needs the file read; not timed
        old, new = f"v{counter[0]}\n", f"v{counter[0] + 1}\n"
        counter[0] += 1
        ctx.turn = counter[0]  # a turn per edit, as a session of one-edit turns
        start = time.perf_counter()
        result = await call("edit_file", path=name, old_string=old, new_string=new)
        elapsed = time.perf_counter() - start
        assert result.startswith("edited"), result
        return elapsed

    return edit


async def undo_journal_cost(settings: Settings, server: BenchServer) -> list[Figure]:
    repeat = settings.size(40, 8)
    parts_ratio: dict[str, Stats] = {}
    parts_ms: dict[str, Stats] = {}
    details: dict[str, object] = {}
    with temp_root("undo") as root:
        for label, size in _SIZES.items():
            tree = root / label.replace(" ", "")
            tree.mkdir()
            tree = Path(os.path.realpath(tree))
            journal = Journal(root / f"{label.replace(' ', '')}.journal", cap=1 << 40)
            samples = await paired_async(settings, {
                "journal": _editor(tree, "journaled.txt", size, journal),
                "bare": _editor(tree, "bare.txt", size, None),
            }, repeat=repeat)
            parts_ratio[label] = Stats.of(ratios(samples["journal"], samples["bare"]))
            parts_ms[label] = Stats.of([(a - b) * 1000 for a, b in zip(samples["journal"], samples["bare"],
                                                                          strict=True)])
            index = (journal.directory / "journal.jsonl").stat().st_size
            edits = len(samples["journal"]) + settings.warmup
            blobs = sum(entry.stat().st_size for entry in (journal.directory / "blobs").iterdir())
            journal.close()
            details[f"{label}_index_bytes_per_edit"] = round(index / edits)
            details[f"{label}_blob_bytes_per_edit"] = round(blobs / edits)
            details[f"{label}_bare_ms"] = round(statistics.median(samples["bare"]) * 1000, 3)
            details[f"{label}_journal_ms"] = round(statistics.median(samples["journal"]) * 1000, 3)
    return [
        Figure("undo_journal_vs_bare", "x", parts=parts_ratio, details=details),
        Figure("undo_journal_cost_ms", "ms", parts=parts_ms, details=details),
    ]
