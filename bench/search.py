"""``search_vs_rg``, ``search_ignored_opens``, ``search_peak_mb``: the ``search_text`` tool (agent_loop/tools/search.py)
against ripgrep on a large real tree, paired (docs/tools.md, "Search: glob and search_text").

The tree is a git repository made from a copy of this virtualenv's ``site-packages`` (hard links where the file
system allows: real code, about 12 000 files and 1 GB, shared libraries among them), every file in the index
(``git update-index --info-only``: hashed, not stored), plus an ignored ``node_modules/`` of many small files that
hold every pattern searched for. Each repetition runs the tool the way the agent does (``run_tool_call``, the
worker thread and all) and ``rg -n --hidden`` (both read dotfiles and follow .gitignore) back to back, and keeps
the ratio of the two times; one part per pattern: a rare literal, a common one, a regex whose literal is short,
an alternation, a case-insensitive literal.

``search_ignored_opens`` counts the files under ``node_modules`` the tool's process opened during a search (a
Python audit hook sees every ``open``): the target is none. ``search_peak_mb`` is the peak of Python's allocations
(``tracemalloc``) during one search; rg's peak RSS is in the details.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio.to_thread

from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios, unavailable
from bench.loop import temp_root
from dsh.agent_loop.tools import default_tools, run_tool_call
from dsh.agent_loop.tools.registry import ToolContext, ToolOutput
from dsh.llm import ToolCall

__all__ = ["search_vs_rg"]

RATIO_TARGET = ("<=", 3.0)
PATTERNS: dict[str, tuple[str, bool]] = {  # part -> (pattern, ignore case)
    "rare_literal": ("def needle_in_haystack", False),
    "common_literal": ("import os", False),
    "regex": (r"\bclass\s+\w+Error\b", False),
    "alternation": ("TODO|FIXME", False),
    "ignore_case": ("import os", True),
}
_OPENED: list[str] | None = None  # while set: every path this process opens
_HOOKED = False  # the audit hook is in (it cannot be taken out: it records only while _OPENED is set)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], str | bytes):
        _OPENED.append(os.fsdecode(args[0]))


def _tree(root: Path, modules: int) -> int:
    """The repository: site-packages copied in and indexed, node_modules ignored; how many files are indexed."""
    source = Path(sysconfig.get_paths()["purelib"])
    try:
        shutil.copytree(source, root, symlinks=True, copy_function=os.link)
    except (shutil.Error, OSError):  # another file system: a real copy
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(source, root, symlinks=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("node_modules/\n")
    listed = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"], cwd=root, check=True,
                            capture_output=True).stdout
    subprocess.run(["git", "update-index", "--add", "--info-only", "-z", "--stdin"], cwd=root, input=listed,
                   check=True)
    hay = "".join(f"{pattern}\n" for pattern, _ in PATTERNS.values()) + "class NodeError:\n"
    for n in range(modules):
        folder = root / "node_modules" / f"pkg{n % 200}" / "lib"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{n}.js").write_text(hay)
    return listed.count(b"\0")


def _search(root: Path, pattern: str, ignore_case: bool) -> Any:
    tools = default_tools()
    call = ToolCall("c", "search_text", json.dumps({"pattern": pattern, "ignore_case": ignore_case}))

    async def run() -> ToolOutput:
        output = await run_tool_call(tools, call, ToolContext(cwd=root, turn=1, notify=lambda event: None))
        if output.is_error:
            raise RuntimeError(f"search_text failed: {output.text[:300]}")
        return output

    return run


def _rg(rg: str, root: Path, pattern: str, ignore_case: bool) -> tuple[bytes, float]:
    """rg's output and its peak RSS (MB); an error fails the benchmark."""
    argv = [rg, "-n", "--hidden", "--no-heading", "--color", "never", *(["-i"] if ignore_case else []), pattern]
    with subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: no match
        raise RuntimeError(f"rg exited with {proc.returncode}")
    return out, usage.ru_maxrss / 1024


def _counted(output: ToolOutput) -> int:
    """Lines the tool found: those shown and the ones its last line counts."""
    lines = output.text.splitlines()
    if lines and lines[-1].startswith("… "):
        return len(lines) - 1 + int(lines[-1].split(" more ")[0][2:].replace(" ", ""))
    return 0 if lines == ["no matches"] else len(lines)


async def _part(settings: Settings, rg: str, root: Path, pattern: str, ignore_case: bool) -> tuple[Stats, dict]:
    search = _search(root, pattern, ignore_case)

    async def timed() -> None:
        await search()

    async def baseline() -> None:
        await anyio.to_thread.run_sync(_rg, rg, root, pattern, ignore_case)

    samples = await paired_async(settings, {"search_text": timed, "rg": baseline})
    out, rg_peak = _rg(rg, root, pattern, ignore_case)
    found = await search()
    details = {"search_text_ms": round(statistics.median(samples["search_text"]) * 1000, 1),
               "rg_ms": round(statistics.median(samples["rg"]) * 1000, 1), "found": _counted(found),
               "rg_lines": out.count(b"\n"), "rg_peak_rss_mb": round(rg_peak, 1),
               "rg_node_modules_lines": out.count(b"node_modules/")}
    return Stats.of(ratios(samples["search_text"], samples["rg"])), details


async def _ignored_opens(root: Path) -> tuple[int, float]:
    """Files under node_modules opened during one search, and the search's peak of Python allocations (MB)."""
    global _OPENED, _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    _OPENED = []
    tracemalloc.start()
    try:
        await _search(root, "import os", False)()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        opened = list(_OPENED)
    finally:
        tracemalloc.stop()
        _OPENED = None
    inside = str(root / "node_modules") + "/"
    return sum(1 for path in opened if path.startswith(inside)), peak


async def search_vs_rg(settings: Settings, server: BenchServer) -> list[Figure]:
    rg = shutil.which("rg")
    if rg is None:
        reason = "rg (ripgrep) is not installed: apt-get install ripgrep"
        return [unavailable("search_vs_rg", "x", reason, RATIO_TARGET),
                unavailable("search_ignored_opens", "opens", reason, ("<=", 0.0)),
                unavailable("search_peak_mb", "MB", reason)]
    with temp_root("search") as temp:
        root = temp / "tree"
        started = time.perf_counter()
        indexed = _tree(root, settings.size(20_000, 2_000))
        made_s = round(time.perf_counter() - started, 1)
        parts: dict[str, Stats] = {}
        details: dict[str, Any] = {"indexed_files": indexed, "node_modules_files": settings.size(20_000, 2_000),
                                   "tree_made_s": made_s}
        for name, (pattern, ignore_case) in PATTERNS.items():
            parts[name], details[name] = await _part(settings, rg, root, pattern, ignore_case)
        opens, peak = await _ignored_opens(root)
    return [Figure("search_vs_rg", "x", target=RATIO_TARGET, parts=parts, details=details),
            Figure("search_ignored_opens", "opens", Stats.of([float(opens)]), target=("<=", 0.0)),
            Figure("search_peak_mb", "MB", Stats.of([peak]))]
