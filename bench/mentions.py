"""``@`` completion on a 100 000-file repository (issue 39 part 1): how long one completion's match takes, and
how long listing the tree takes (in a worker thread behind the prompt; agent_loop/path_index.py).

The repository is made fast: one ``git update-index --index-info`` writes 100 000 index entries of the empty blob
(git lists an index entry whether or not the file is on disk), spread over nested folders as a real tree is.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness import BenchServer, Figure, Settings, Stats, repeat_sync
from dsh.agent_loop.path_index import PathIndex

__all__ = ["mention_completion"]

QUERIES = ("app", "srcutil", "test_mod4", "readme", "pkg17/handler", "zzzq")  # short, spread, deep, none


def _repository(root: Path, files: int) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    empty = subprocess.run(["git", "hash-object", "-t", "blob", "--stdin"], input=b"", capture_output=True,
                           check=True, cwd=root).stdout.decode().strip()
    lines = (f"100644 {empty}\tsrc/pkg{i % 97}/mod{i % 13}/{'test_' if i % 5 == 0 else ''}module_{i}.py\n"
             for i in range(files))
    subprocess.run(["git", "update-index", "--index-info"], input="".join(lines).encode(), check=True, cwd=root)


async def mention_completion(settings: Settings, server: BenchServer) -> list[Figure]:
    """``mention_complete_ms``: the slowest query's median match; ``mention_list_ms``: listing the tree."""
    files = settings.size(100_000, 20_000)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-mentions-") as temp:
        root = Path(temp)
        _repository(root, files)
        index = PathIndex(root)

        def listing() -> float:
            start = time.perf_counter()
            index.refresh()
            return time.perf_counter() - start

        listed = repeat_sync(settings, listing, repeat=3)
        parts = {query: Stats.of([s * 1000 for s in repeat_sync(settings, lambda query=query: _match(index, query))])
                 for query in QUERIES}
    return [Figure("mention_complete_ms", "ms", target=("<", 50.0), parts=parts, details={"files": files}),
            Figure("mention_list_ms", "ms", Stats.of([s * 1000 for s in listed]), details={"files": files})]


def _match(index: PathIndex, query: str) -> float:
    start = time.perf_counter()
    index.match(query)
    return time.perf_counter() - start
