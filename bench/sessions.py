"""Session files at scale: listing 1 000 logs holding 2 GB, resuming a 1 GB log and a 200 MB one of 82 000 turns.

``sessions_list_ms``: ``list_sessions`` over 1 000 logs of 2 MB each. Each log has real records at its
start and end and a sparse hole between them (so the bench writes little); listing reads only a
log's head and tail, so what lies between cannot matter -- and a whole-file read would show up as
time at once. ``resume_1gb``: a fresh process opens (locks, streams, repairs) a 1 GB log and rebuilds
its conversation; half its turns keep a 1 MB tool result, half are rejected 1 MB prompts the
conversation drops. Time and peak RSS (``VmHWM``) of that process.
``resume_200mb_82k``: a fresh process resumes a realistic 200 MB log of 82 000 turns the way ``--resume``
does (``build.open_log``: the model's window, the recap) up to the messages of the next request; a tiny
log of the same shape, resumed the same way in the same run, is the baseline (imports, interpreter).
``python -m bench.sessions PATH`` is the child (``--window`` passes the model's context window).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env, repeat_sync
from bench.loop import temp_root

__all__ = ["resume_1gb", "resume_200mb_82k", "sessions_list"]

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

def _corpus() -> str:
    """Real text to slice tool output, prompts and answers from: the Python standard library's own modules
    (code and docstrings: newlines, quotes, backslashes, a little non-ASCII), the same for every run of
    one Python version, whatever this repository holds."""
    parts = [path.read_text(encoding="utf-8", errors="replace")
             for path in sorted(Path(os.__file__).parent.glob("*.py"))]
    text = "\n".join(parts)
    return text * max(1, (4 * _MB) // max(len(text), 1) + 1)  # at least 4 MB to slice from


class _Slicer:
    """Deterministic, varied slices of the corpus (no two neighbouring turns share a text)."""

    def __init__(self, corpus: str) -> None:
        self._corpus = corpus
        self._at = 0

    def take(self, size: int) -> str:
        if self._at + size > len(self._corpus):
            self._at = (self._at * 7 + 1013) % max(len(self._corpus) - size, 1)
        text = self._corpus[self._at : self._at + size]
        self._at += size + 17
        return text


# Bytes of tool output per turn, cycling: mostly reads and command output of 0.3-3 KB, now and then a
# whole file (12-40 KB); the mean (with prompts, answers, reasoning, records) lands near 2.5 KB a turn.
_OUTPUT_SIZES = (400, 900, 1500, 300, 2200, 700, 1100, 500, 1800, 600, 950, 1300, 450, 2600, 800, 1200, 350,
                 1700, 650, 1000, 14000, 750, 1400, 550, 2000, 850, 1150, 420, 38000, 900)


def _write_realistic_log(path: Path, turns: int, total: int) -> int:
    """``turns`` turns of the shape a coding session leaves, scaled so the log is about ``total`` bytes.

    Each turn: a prompt (30-280 characters), a step whose reply reasons (160 characters) and calls
    one tool (``read_file``/``run_command``/``grep`` with real-looking arguments), its ``tool/call`` and
    ``tool/result`` (sizes from :data:`_OUTPUT_SIZES`, scaled), then a second step answering in 80-480
    characters, server usage on both replies, and ``turn/end``. Every 50th turn calls two tools. The
    text is the standard library's source (:func:`_corpus`).
    Returns the bytes written.
    """
    slicer = _Slicer(_corpus())
    mean_output = sum(_OUTPUT_SIZES) / len(_OUTPUT_SIZES)
    overhead = 0.0  # bytes of a turn besides its tool output, measured as the log is written
    output_bytes = 0
    header = {"type": "session", "version": 1, "id": path.stem, "createdAt": "2026-01-01T00:00:00.000Z",
              "cwd": "/home/user/project", "project": "/home/user/project"}
    seq = 0
    written = 0
    tools = ("read_file", "run_command", "grep")
    with open(path, "wb", buffering=8 * _MB) as file:
        written += file.write((json.dumps(header) + "\n").encode())

        def put(kind: str, data: dict[str, object]) -> None:
            nonlocal seq, written
            seq += 1
            record = {"type": kind, "seq": seq, "time": "2026-01-01T00:00:00.000Z", "data": data}
            written += file.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")

        for turn in range(1, turns + 1):
            # Scaled so that the turns left fill the bytes left (the output sizes keep their mix).
            left = (total - written) / (turns - turn + 1)
            scale = max(0.05, (left - overhead) / mean_output) if turn > 1 else 1.0
            turn_output = 0
            usage = {"prompt_tokens": 40_000 + turn % 9000, "completion_tokens": 350, "total_tokens": 40_350,
                     "prompt_cache_hit_tokens": 38_000, "prompt_cache_miss_tokens": 2000 + turn % 9000,
                     "reasoning_tokens": 120}
            put("turn/start", {"turn": turn, "prompt": slicer.take(30 + turn * 37 % 250)})
            put("step/start", {"turn": turn, "step": 1})
            calls = []
            for index in range(2 if turn % 50 == 0 else 1):
                name = tools[(turn + index) % 3]
                arguments = json.dumps({"path": f"src/module_{turn % 997}.py"} if name == "read_file"
                                       else {"command": f"pytest -q tests/test_{turn % 311}.py"}
                                       if name == "run_command"
                                       else {"pattern": f"def handler_{turn % 53}", "path": "src"})
                calls.append({"id": f"call_{turn}_{index}", "name": name, "arguments": arguments})
            put("assistant/message", {"turn": turn, "step": 1, "content": "", "reasoning_content": slicer.take(160),
                                      "tool_calls": calls, "finish_reason": "tool_calls", "interrupted": False,
                                      "usage": usage})
            for call in calls:
                put("tool/call", {"turn": turn, "id": call["id"], "name": call["name"], "arguments": call["arguments"]})
                size = int(_OUTPUT_SIZES[turn % len(_OUTPUT_SIZES)] * scale)
                turn_output += size
                put("tool/result", {"turn": turn, "id": call["id"], "name": call["name"], "output": slicer.take(size),
                                    "is_error": turn % 23 == 0, "diagnostic": None})
            put("step/start", {"turn": turn, "step": 2})
            put("assistant/message", {"turn": turn, "step": 2, "content": slicer.take(80 + turn * 53 % 400),
                                      "reasoning_content": None, "tool_calls": [], "finish_reason": "stop",
                                      "interrupted": False, "usage": usage})
            put("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            output_bytes += turn_output
            overhead = (written - output_bytes) / turn
    return written


def _resume_child(path: Path, *, window: bool) -> dict[str, float]:
    args = [sys.executable, "-m", "bench.sessions", str(path), *(["--window"] if window else [])]
    done = subprocess.run(args, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench.sessions exited {done.returncode}: {done.stderr.strip()[-300:]}")
    result: dict[str, float] = json.loads(done.stdout)
    return result


async def resume_200mb_82k(settings: Settings, server: BenchServer) -> list[Figure]:
    turns = settings.size(82_000, 20_500)
    total = settings.size(200, 50) * _MB
    with temp_root("resume200m") as root:
        big = root / "20260101-000000-big.jsonl"
        big_bytes = _write_realistic_log(big, turns, total)
        tiny = root / "20260101-000000-tiny.jsonl"
        _write_realistic_log(tiny, 3, 3 * 2600)
        runs: list[dict[str, float]] = []
        bases: list[dict[str, float]] = []

        def once() -> float:
            bases.append(_resume_child(tiny, window=True))  # the baseline, back to back with each sample
            runs.append(_resume_child(big, window=True))
            return runs[-1]["seconds"]

        samples = repeat_sync(settings, once, settings.size(3, 1))
        runs, bases = runs[-len(samples):], bases[-len(samples):]
    peak = max(run["peak_mb"] for run in runs)
    return [
        Figure("resume_200mb_82k", "s", target=("<", 3.0),
               parts={"seconds": Stats.of(samples), "tiny_seconds": Stats.of([b["seconds"] for b in bases])},
               details={"log_mb": round(big_bytes / 1e6), "turns": turns, "peak_rss_mb": round(peak),
                        "cpu_seconds": round(statistics.median(run["cpu_seconds"] for run in runs), 2),
                        "messages": int(runs[-1]["messages"]), "load_average": [round(x, 2) for x in os.getloadavg()]}),
        Figure("resume_200mb_82k_peak_mb", "MB", Stats.of([run["peak_mb"] for run in runs]), target=("<", 200.0),
               details={"tiny_peak_rss_mb": round(max(b["peak_mb"] for b in bases))}),
    ]


def _child(path: str) -> None:
    from bench.rss import _status_mb
    from dsh.agent_loop.resume import open_session

    start = time.perf_counter()
    session, conversation = open_session(path)
    seconds = time.perf_counter() - start
    session.close()
    if not conversation.messages:
        raise SystemExit("the bench log did not resume")
    print(json.dumps({"seconds": seconds, "peak_mb": _status_mb("VmHWM"), "messages": len(conversation.messages)}))
    os._exit(0)  # do not pay for freeing the conversation


def _resume_like_dsh(path: str) -> None:
    """What ``dsh --resume PATH`` does before it can send: open the log (window-bound, with the recap pricing
    every logged request for the budget), build the client and the agent, and hold the next request's messages."""
    from bench.rss import _status_mb

    start = time.perf_counter()
    from dsh.agent_loop import build
    from dsh.agent_loop.agent import Agent
    from dsh.llm import ChatRequest, DeepSeekClient
    from dsh.llm.defaults import DEFAULT_MODEL
    from dsh.llm.models import model_info

    file = Path(path)
    info = model_info(DEFAULT_MODEL)
    window = (info.context_window or 0) if info is not None else 0  # as SessionLifecycle.open passes them
    log, conversation, recap = build.open_log(str(file), file.parent, project=str(file.parent), current=None,
                                              window=window, info=info)
    client = DeepSeekClient(base_url="http://127.0.0.1:9", api_key="bench-key")
    agent = Agent(client, model=DEFAULT_MODEL, session=log, conversation=conversation)
    request = ChatRequest(model=agent.model, messages=tuple(agent.messages), tools=agent.tools.specs())
    seconds = time.perf_counter() - start
    if len(request.messages) < 2 or not recap.turns:
        raise SystemExit("the bench log did not resume")
    log.close()
    # CPU time too: on a shared machine it says what the wall time cannot (the process's own work).
    print(json.dumps({"seconds": seconds, "cpu_seconds": time.process_time(), "peak_mb": _status_mb("VmHWM"),
                      "messages": len(request.messages)}))
    os._exit(0)  # do not pay for freeing the conversation


if __name__ == "__main__":
    if sys.argv[2:] == ["--window"]:
        _resume_like_dsh(sys.argv[1])
    else:
        _child(sys.argv[1])
