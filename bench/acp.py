"""dsh as an ACP agent: a turn through ``dsh acp`` against ``dsh -p`` on the same stream, in the same run.

``acp_vs_print``       a turn through ``dsh acp`` over the same turn through ``dsh -p``, on the same stream from the
                       bench server, paired run by run. The ACP turn: ``session/prompt`` sent to its answer, the
                       ACP SDK's own Python client (``acp.spawn_agent_process``) decoding every update, in a
                       ``dsh acp`` that is already running (an editor starts it once), the prompt sent as soon as
                       the session is answered: the turn waits for the agent's modules (repl/acp_session.py,
                       ``_warm``); the ``-p`` turn: the ``duration_s`` its ``--output-format json`` result reports,
                       from after its agent was built (before the turn) to the turn's end. Two parts, the headline the
                       worse: ``short`` (the ``text`` answer) and ``long`` (a ``tiny-N`` stream of 1-3 character
                       deltas: the updates that queue while a frame goes out are merged into one).
                       Details: each side's whole process, spawn to exit.
``acp_first_chunk_ms`` from sending ``initialize`` to the first ``agent_message_chunk`` (the ``ttft`` stream):
                       what an editor waits between starting dsh and seeing its first word, the prompt sent as
                       soon as the session is answered. Details: that wait's two parts, and
                       ``paused_prompt_to_first_chunk_ms``: the prompt sent after a pause (an editor's user types
                       it), when the new session's agent is built (repl/acp_session.py, ``_warm``).
``acp_peak_rss_mb``    the ``dsh acp`` process's peak resident set (``VmHWM``) after the long turn.

Details, per part: ``sdk_client_cpu_ms`` (the bench's own SDK client decoding the frames: on the ACP side's clock,
as an editor's decoding would be). ``dsh acp`` speaks ACP itself (repl/acp_wire.py): it never imports the SDK
whose client the bench drives it with.

Both front ends run over the same Session (docs/architecture.md, "Front ends"); docs/performance.md has figures.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench import subjects
from bench.harness import BenchServer, Figure, Settings, Stats, child_env, paired_async, ratios
from bench.loop import PROMPT, temp_root

__all__ = ["acp_first_chunk", "acp_vs_print"]

RATIO_TARGET = ("<=", 1.1)
TYPING = 0.5  # s between a new session and its prompt: an editor's user typing it
Run = Callable[[], Awaitable[float]]


def _env(server: BenchServer, stream: str, root: Path) -> dict[str, str]:
    return child_env(
        DEEPSEEK_API_KEY=subjects.BENCH_KEY,
        DEEPSEEK_BASE_URL=server.base_url(stream),
        XDG_STATE_HOME=str(root / "state"),
        XDG_CONFIG_HOME=str(root / "config"),
    )


def _print_mode(env: dict[str, str], root: Path, processes: list[float] | None = None) -> Run:
    """The turn of ``dsh -p --output-format json`` (its own ``duration_s``); ``processes`` gets spawn -> exit."""

    async def run() -> float:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "dsh.repl", "-p", PROMPT, "--output-format", "json"], env=env,
                              cwd=root, capture_output=True, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0 or not done.stdout.strip():
            raise RuntimeError(f"dsh -p exited {done.returncode}: {done.stderr.decode()[-300:]}")
        if processes is not None:
            processes.append(elapsed)
        return float(json.loads(done.stdout)["duration_s"])

    return run


class _Client:
    """The SDK client side: counts answer chunks, notes when the first one arrived; refuses permissions."""

    def __init__(self) -> None:
        self.chunks = 0
        self.first_chunk_at: float | None = None

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            if self.first_chunk_at is None:
                self.first_chunk_at = time.perf_counter()
            self.chunks += 1

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **_: Any) -> Any:
        from acp.schema import DeniedOutcome, RequestPermissionResponse

        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _vm_hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no VmHWM for pid {pid}")


def _acp_turn(env: dict[str, str], root: Path, *, first_chunks: list[float] | None = None,
              peaks: list[float] | None = None, client_cpu: list[float] | None = None,
              processes: list[float] | None = None, answered: list[float] | None = None,
              pause: float = 0.0, after_prompt: list[float] | None = None) -> Run:
    """One whole ``dsh acp`` session for one prompt, returning the turn (``session/prompt`` -> its answer);
    ``first_chunks`` gets initialize -> first chunk (s), ``peaks`` the child's peak RSS (MB) read after the
    answer, before it is closed, ``client_cpu`` the CPU seconds this process (the SDK client decoding every
    frame) spent in the session, ``processes`` spawn -> reaped, ``answered`` initialize -> session/new answered;
    the prompt goes ``pause`` s after session/new's answer, ``after_prompt`` gets prompt -> first chunk."""
    import acp
    from acp.schema import ClientCapabilities, Implementation

    async def run() -> float:
        client = _Client()
        cpu = time.process_time()
        start = time.perf_counter()
        async with acp.spawn_agent_process(client, sys.executable, "-m", "dsh.repl", "acp",
                                           env=env, cwd=str(root)) as (conn, proc):
            initialize_at = time.perf_counter()
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=ClientCapabilities(),
                                  client_info=Implementation(name="bench", version="0.1.0"))
            session = await conn.new_session(cwd=str(root), mcp_servers=[])
            session_made = time.perf_counter()
            if pause:
                await anyio.sleep(pause)
            prompted = time.perf_counter()
            response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(PROMPT)])
            turn = time.perf_counter() - prompted
            if answered is not None:
                answered.append(session_made - initialize_at)
            if peaks is not None:
                peaks.append(_vm_hwm_mb(proc.pid))
        elapsed = time.perf_counter() - start
        if client_cpu is not None:
            client_cpu.append(time.process_time() - cpu)
        if response.stop_reason != "end_turn" or not client.chunks or client.first_chunk_at is None:
            raise RuntimeError(f"the dsh acp turn ended {response.stop_reason} after {client.chunks} chunk(s)")
        if first_chunks is not None:
            first_chunks.append(client.first_chunk_at - initialize_at)
        if after_prompt is not None:
            after_prompt.append(client.first_chunk_at - prompted)
        if processes is not None:
            processes.append(elapsed)
        return turn

    return run


def _long_stream(settings: Settings) -> str:
    return f"tiny-{settings.size(20_000, 5_000)}"


async def acp_vs_print(settings: Settings, server: BenchServer) -> list[Figure]:
    parts: dict[str, Stats] = {}
    details: dict[str, Any] = {}
    peaks: list[float] = []
    client_cpu: list[float] = []
    repeat = settings.size(6, 2)
    with temp_root("acp-front") as root:
        for label, stream in (("short", "text"), ("long", _long_stream(settings))):
            env = _env(server, stream, root)
            process: dict[str, list[float]] = {"acp": [], "print": []}
            samples = await paired_async(settings, {
                "acp": _acp_turn(env, root, peaks=peaks if label == "long" else None, client_cpu=client_cpu,
                                 processes=process["acp"]),
                "print": _print_mode(env, root, processes=process["print"]),
            }, repeat=repeat)
            parts[label] = Stats.of(ratios(samples["acp"], samples["print"]))
            details[label] = {
                "stream": stream,
                "acp_turn_ms": round(statistics.median(samples["acp"]) * 1000, 1),
                "print_turn_ms": round(statistics.median(samples["print"]) * 1000, 1),
                "acp_process_ms": round(statistics.median(process["acp"]) * 1000, 1),
                "print_process_ms": round(statistics.median(process["print"]) * 1000, 1),
                "sdk_client_cpu_ms": round(statistics.median(client_cpu[-repeat:]) * 1000, 1),
            }
    peak = Figure("acp_peak_rss_mb", "MB", Stats.of(peaks), details={"stream": details["long"]["stream"]})
    return [Figure("acp_vs_print", "x", parts=parts, target=RATIO_TARGET, details=details), peak]


async def acp_first_chunk(settings: Settings, server: BenchServer) -> list[Figure]:
    first_chunks: list[float] = []
    answered: list[float] = []
    with temp_root("acp-first-chunk") as root:
        run = _acp_turn(_env(server, "ttft", root), root, first_chunks=first_chunks, answered=answered)
        turns = await paired_async(settings, {"acp": run}, repeat=settings.size(8, 3))
        paused: list[float] = []
        for _ in range(settings.size(3, 2)):
            await _acp_turn(_env(server, "ttft", root), root, pause=TYPING, after_prompt=paused)()
    count = len(turns["acp"])  # the warm-up's samples dropped
    measured = [s * 1000 for s in first_chunks[-count:]]
    # An editor sends initialize as soon as it has spawned dsh: until dsh answers, it is starting. After that,
    # the session and the turn up to its first word: the modules that build the agent, unless the user's typing
    # gave dsh the time to import them (paused).
    details = {"initialize_to_session_ms": round(statistics.median(answered[-count:]) * 1000, 1),
               "prompt_to_first_chunk_ms": round(statistics.median(
                   f * 1000 - a * 1000 for f, a in zip(first_chunks[-count:], answered[-count:], strict=True)), 1),
               "paused_prompt_to_first_chunk_ms": round(statistics.median(paused) * 1000, 1)}
    return [Figure("acp_first_chunk_ms", "ms", Stats.of(measured), details=details)]

