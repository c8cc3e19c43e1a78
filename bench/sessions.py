"""Session files at scale: listing 1 000 logs holding 2 GB, and resuming a 1 GB log.

``sessions_list_ms``: ``list_sessions`` over 1 000 logs of 2 MB each. Each log has real records at its
start and end and a sparse hole between them (so the bench writes little); listing reads only a
log's head and tail, so what lies between cannot matter -- and a whole-file read would show up as
time at once. ``resume_1gb``: a fresh process opens (locks, streams, repairs) a 1 GB log and rebuilds
its conversation; half its turns keep a 1 MB tool result, half are rejected 1 MB prompts the
conversation drops. Time and peak RSS (``VmHWM``) of that process.
``python -m bench.sessions PATH`` is the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env, repeat_sync
from bench.loop import temp_root

__all__ = ["resume_1gb", "sessions_list"]

_MB = 1 << 20


def _head(ident: str, prompt: str) -> bytes:
    header = {"type": "session", "version": 1, "id": ident, "createdAt": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    start = {"type": "turn/start", "seq": 1, "time": "t", "data": {"turn": 1, "prompt": prompt}}
    return (json.dumps(header) + "\n" + json.dumps(start, separators=(",", ":")) + "\n").encode()


def _write_sparse_logs(root: Path, count: int, size: int) -> None:
    tail = b'{"type":"turn/end","seq":999,"time":"t","data":{"turn":40,"reason":{"kind":"completed"}}}\n'
    for index in range(count):
        path = root / f"20260101-{index:06d}-bench.jsonl"
        with open(path, "wb") as file:
            file.write(_head(path.stem, f"bench prompt {index}"))
            file.seek(size - len(tail) - 1)
            file.write(b"\n" + tail)


async def sessions_list(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.agent_loop import list_sessions

    count = 1000
    size = 2 * _MB
    with temp_root("sessions") as root:
        _write_sparse_logs(root, count, size)

        def once() -> float:
            start = time.perf_counter()
            infos = list_sessions(root)
            elapsed = time.perf_counter() - start
            if len(infos) != count or infos[-1].turns != 40:
                raise RuntimeError("the bench logs were not all listed")
            return elapsed

        samples = repeat_sync(settings, once)
    return [Figure("sessions_list_ms", "ms", Stats.of([s * 1000 for s in samples]), target=("<", 300.0),
                   details={"logs": count, "total_gb": round(count * size / 1e9, 2)})]


def _write_big_log(path: Path, total: int) -> int:
    """Turns of ~1 MB each up to ``total`` bytes; returns the number of turns."""
    payload = "r" * _MB
    header = {"type": "session", "version": 1, "id": path.stem, "createdAt": "t", "cwd": "/"}
    seq = 0
    turn = 0
    written = 0
    with open(path, "wb", buffering=8 * _MB) as file:
        file.write((json.dumps(header) + "\n").encode())

        def put(kind: str, data: dict[str, object]) -> None:
            nonlocal seq, written
            seq += 1
            line = json.dumps({"type": kind, "seq": seq, "time": "t", "data": data}, separators=(",", ":"))
            written += file.write(line.encode() + b"\n")

        while written < total:
            turn += 1
            if turn % 2:
                put("turn/start", {"turn": turn, "prompt": "read it"})
                put("step/start", {"turn": turn, "step": 1})
                call = {"id": f"c{turn}", "name": "read_file", "arguments": "{}"}
                put("assistant/message", {"turn": turn, "step": 1, "content": "", "reasoning_content": None,
                                          "tool_calls": [call], "finish_reason": "tool_calls",
                                          "interrupted": False, "usage": None})
                put("tool/result", {"turn": turn, "id": f"c{turn}", "name": "read_file", "output": payload,
                                    "is_error": False, "diagnostic": None})
                put("step/start", {"turn": turn, "step": 2})
                put("assistant/message", {"turn": turn, "step": 2, "content": "ok", "reasoning_content": None,
                                          "tool_calls": [], "finish_reason": "stop", "interrupted": False,
                                          "usage": None})
                put("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            else:
                put("turn/start", {"turn": turn, "prompt": payload})
                put("turn/end", {"turn": turn, "reason": {"kind": "rejected", "reason": "no"}})
    return turn


async def resume_1gb(settings: Settings, server: BenchServer) -> list[Figure]:
    total = settings.size(1000, 250) * _MB
    with temp_root("resume1g") as root:
        path = root / "20260101-000000-big.jsonl"
        turns = _write_big_log(path, total)
        size_mb = path.stat().st_size / 1e6

        results: list[dict[str, float]] = []

        def once() -> float:
            done = subprocess.run([sys.executable, "-m", "bench.sessions", str(path)], cwd=REPO_ROOT,
                                  env=child_env(), capture_output=True, text=True, timeout=300, check=True)
            results.append(json.loads(done.stdout))
            return results[-1]["seconds"]

        samples = repeat_sync(settings, once, settings.size(3, 1))
        peaks = [r["peak_mb"] for r in results]
    return [
        Figure("resume_1gb", "s", target=("<", 5.0),
               parts={"seconds": Stats.of(samples)},
               details={"log_mb": round(size_mb), "turns": turns, "peak_rss_mb": round(max(peaks)),
                        "peak_rss_target_mb": 1000, "peak_rss_ok": max(peaks) < 1000}),
    ]


def _child(path: str) -> None:
    from bench.rss import _status_mb
    from dsh.agent_loop.agent import open_session

    start = time.perf_counter()
    session, conversation = open_session(path)
    seconds = time.perf_counter() - start
    session.close()
    if not conversation.messages:
        raise SystemExit("the bench log did not resume")
    print(json.dumps({"seconds": seconds, "peak_mb": _status_mb("VmHWM"), "messages": len(conversation.messages)}))
    os._exit(0)  # do not pay for freeing the conversation


if __name__ == "__main__":
    _child(sys.argv[1])
