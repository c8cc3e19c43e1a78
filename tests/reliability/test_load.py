"""Load: 50 concurrent subagent runs, and a 1 000-turn soak of one Agent against the fault server.

* 50 runs in flight at once, mixed providers and outcomes: the SDK-free ACP agent (raw_acp_agent.py),
  the SDK ACP agent (repl/demo/acp_agent.py), the real child ``dsh serve --stdio`` (each against its own
  fault server) and the scripted dsh child. Every run carries its own marker in its task and answer and
  its own provider name, so each result can be checked against exactly its own facts (isolation). No run
  is disposed until all 50 have settled, so all of them are alive together. Afterwards no process is left
  (the subagent suite's leak check) and the parent's open file descriptors are back to their count.
* The soak: one Agent, 1 000 turns (a fresh conversation every 100, as a long working day would have)
  over a mix of text, tool calls, retried 500s, resets, token limits, malformed payloads, keep-alives and
  cancellations. RSS is sampled after every 100 turns; it must stay flat (the figure is reported).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_harness import COUNTS, FIGURES, REPO, fd_count, leak_check, live_descendants

from dsh.agent_loop import Agent, SessionLog
from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.agent_loop.tools import default_tools
from dsh.llm import DeepSeekClient
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl import demo
from tests import canaries
from tests.waiting import PROMPTLY, async_wait_until

RAW_AGENT = str(Path(__file__).with_name("raw_acp_agent.py"))
SDK_AGENT = str(Path(demo.__file__).with_name("acp_agent.py"))
FAST = {"eof_grace": 1.0, "term_grace": 1.0}


def _fail(name: str, rest: str) -> str:
    return f"Subagent failure (provider: {name}; {rest})"


@dataclass
class Case:
    name: str
    table: dict[str, Any]
    stop_reason: str
    diagnostic: str | None
    output: str
    upstream: list[Behaviour | str] | None = None  # a fault server of its own (real dsh child)


def _raw(name: str, expect: str, diagnostic: str | None, output: str, **script: Any) -> Case:
    table = {"provider": "acp", "command": sys.executable, "args": [RAW_AGENT], "env": {"RAW_ACP": json.dumps(script)},
             "startup_timeout": 120, **FAST}
    return Case(name, table, expect, diagnostic, output)


def _cases() -> list[Case]:
    cases: list[Case] = []
    for n in range(18):
        text = f"raw answer {n:02d} marker-{n * 7919:06d}"
        cases.append(_raw(f"raw-ok-{n:02d}", "completed", None, text, text=text))
    for n in range(6):
        code = 10 + n
        cases.append(_raw(f"raw-exit-{n}", "error", _fail(f"raw-exit-{n}", f"stage: process; category: process-exit; "
                          f"exit code: {code}"), "", answer=2, exit_code=code))
    for n in range(2):
        cases.append(_raw(f"raw-kill-{n}", "error", _fail(f"raw-kill-{n}", "stage: new-session; category: "
                          "process-exit; signal: SIGKILL"), "", answer=1, signal="SIGKILL"))
    for n in range(2):
        text = f"limited {n} marker-{n * 31:04d}"
        cases.append(_raw(f"raw-limit-{n}", "error", _fail(f"raw-limit-{n}", "stage: prompt; category: remote-limit; "
                          "stop reason: max_turn_requests"), text, text=text, stop="max_turn_requests"))
    for n in range(4):
        env: dict[str, str] = {"ACP_FAKE_TEXT": f"sdk answer {n} marker-{n:03d}"}
        expect: tuple[str, str | None, str] = ("completed", None, env["ACP_FAKE_TEXT"])
        if n >= 2:
            env["ACP_FAKE_ERROR_AT"] = "prompt"
            failed = "stage: prompt; category: agent-error; error code: -32603 (internal error)"
            expect = ("error", _fail(f"sdk-{n}", failed), "")
        cases.append(Case(f"sdk-{n}", {"provider": "acp", "command": sys.executable, "args": [SDK_AGENT], "env": env,
                                       "startup_timeout": 120, **FAST}, *expect))
    for n in range(10):
        name = f"dsh-{n}"
        table = {"provider": "dsh", "startup_timeout": 120, "exit_wait": 2.0, **FAST}
        if n < 6:
            text = f"child answer {n} marker-{n * 13:03d}"
            cases.append(Case(name, table, "completed", None, text, [Behaviour("text", text=text)]))
        elif n < 8:
            cases.append(Case(name, table, "error", _fail(name, "stage: session-run; category: child-error; stop "
                              "reason: error"), "", [Behaviour("http_401", message=canaries.UPSTREAM_KEY)]))
        else:
            cases.append(Case(name, table, "error", _fail(name, "stage: session-run; category: child-error; stop "
                              "reason: error"), "Half an answer", ["reset_mid_stream"]))
    for n in range(8):
        name = f"scripted-{n}"
        script: dict[str, Any] = {"prompt": "exit", "exit_code": 20 + n, "text": f"scripted {n}"}
        expect = ("error", _fail(name, f"stage: session-run; category: transport; exit code: {20 + n}"),
                  script["text"])  # the text it streamed before dying is the partial output
        if n >= 5:
            script = {"reason": {"kind": "completed"}, "text": f"scripted ok {n} marker-{n}"}
            expect = ("completed", None, script["text"])
        table = {"provider": "dsh", "command": [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"],
                 "env": {"PYTHONPATH": str(REPO), "DSH_SCRIPTED_CHILD": json.dumps(script)}, "startup_timeout": 120,
                 **FAST}
        cases.append(Case(name, table, *expect))
    assert len(cases) == 50
    return cases


CASES = _cases()


async def _run_all(workspace: str) -> tuple[dict[str, SubagentResult], int, int]:
    results: dict[str, SubagentResult] = {}
    settled = anyio.Event()
    in_flight = [0, 0]  # current, peak
    # The child processes alive at the moment the 50th run has started: every run's process has been spawned
    # and none disposed. (Counted once all results are in, it was 0: by then each child had ended its run.)
    alive_at_peak = [0]

    async def one(case: Case) -> None:
        async with contextlib.AsyncExitStack() as stack:
            parent = ParentContext(model="load-model", api_key=canaries.API_KEY)
            if case.upstream is not None:
                server = await stack.enter_async_context(FaultServer(script=case.upstream))
                parent = ParentContext(model="load-model", base_url=server.url, api_key=canaries.API_KEY)
            provider = build_provider(case.name, case.table, parent)
            prompt = f"task for {case.name} {canaries.TASK_TEXT}"
            run = await stack.enter_async_context(
                provider.run(SubagentRequest(description=case.name, prompt=prompt, cwd=workspace))
            )
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            if in_flight[0] == len(CASES):
                alive_at_peak[0] = len(live_descendants())
            try:
                results[case.name] = await run.result()
                if len(results) == len(CASES):
                    settled.set()
                await settled.wait()  # nobody is disposed before all 50 settled: they all live at once
            finally:
                await run.dispose()
                in_flight[0] -= 1

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for case in CASES:
                tg.start_soon(one, case)
    return results, in_flight[1], alive_at_peak[0]


@pytest.mark.timeout(300)
def test_fifty_concurrent_subagent_runs_stay_isolated_and_leave_nothing_behind(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # Import the SDK before counting descriptors: a lazy import must not look like a leak (or hide one).
    import acp  # noqa: F401

    fds_before = fd_count()
    started = time.monotonic()
    with leak_check():
        results, peak, alive = anyio.run(_run_all, str(workspace))
    seconds = time.monotonic() - started
    fds_after = fd_count()
    failures = []
    for case in CASES:
        result = results[case.name]
        got = (result.stop_reason, result.diagnostic, result.output)
        if got != (case.stop_reason, case.diagnostic, case.output):
            failures.append(f"{case.name}: {got!r}")
        for canary in (canaries.TASK_TEXT, canaries.API_KEY, canaries.UPSTREAM_KEY):
            assert canary not in (result.diagnostic or "")
    assert failures == []
    assert peak == len(CASES)
    assert alive > 0  # counted while the runs live (it once read 0, counted after every child had ended)
    assert fds_after == fds_before, (fds_before, fds_after)
    outcomes = [results[c.name].stop_reason for c in CASES]
    COUNTS["concurrent subagent runs (all in flight at once)"] += len(CASES)
    FIGURES["50 concurrent runs"] = (
        f"{outcomes.count('completed')} completed / {len(CASES) - outcomes.count('completed')} failed as scripted, "
        f"{alive} child processes alive once all 50 had started, {seconds:.1f}s, fds {fds_before} -> {fds_after}, "
        "0 processes left"
    )


# --- the soak -------------------------------------------------------------------------------------------------

SOAK_TURNS = 1000
BLOCK = 100


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def _soak_turn(n: int) -> tuple[list[Behaviour | str], str]:
    """The fault-server script for turn ``n`` and the turn-end kind it must produce."""
    kind = n % 10
    if kind in (0, 5):
        return [Behaviour("tool_call", name="list_dir", arguments="{}", reasoning="look"), "text"], "completed"
    if kind == 1:
        return ["http_500", "text"], "completed"  # retried once, then answered
    if kind == 2:
        return ["reset_mid_stream"], "error"
    if kind == 3:
        return ["length"], "max-tokens"
    if kind == 4:
        return ["malformed_json"], "error"
    if kind == 6:
        return [Behaviour("keepalive_then_text", count=2, interval=0.001)], "completed"
    if kind == 7 and n % 20 == 7:
        return [Behaviour("stall_after_headers")], "aborted"  # cancelled by the test
    return ["text"], "completed"


async def _soak(root: Path) -> dict[str, Any]:
    workspace = root / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    samples: list[float] = []
    kinds: dict[str, int] = {}
    holder: list[FaultServer] = []
    # The server would otherwise keep every request body it saw: it shares this process's RSS.
    server = FaultServer(on_request=lambda request: holder[0].requests.clear())
    holder.append(server)
    async with server, DeepSeekClient(base_url=server.url, api_key="sk-soak-key-000000000000") as client:
        agent = Agent(client, session=SessionLog.create(root / "sessions", cwd=workspace), tools=default_tools(),
                      retry=RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.001), cwd=workspace)
        fds_start = fd_count()
        for n in range(SOAK_TURNS):
            if n and n % BLOCK == 0:
                agent.new_session()
                gc.collect()
                samples.append(_rss_mb())
            script, expected = _soak_turn(n)
            server.push(*script)
            if expected == "aborted":
                async with anyio.create_task_group() as tg:
                    async def cancel_once_stalled() -> None:
                        # Not a fixed delay: cancelled before the server took the stall, the next turn would get it.
                        await async_wait_until(lambda: not server.pending, PROMPTLY, "the server to take the stall")
                        agent.cancel("soak cancel")

                    tg.start_soon(cancel_once_stalled)
                    reason = await agent.run_turn(f"soak turn {n}")
            else:
                reason = await agent.run_turn(f"soak turn {n}")
            assert reason.kind == expected, (n, reason.to_dict())
            kinds[reason.kind] = kinds.get(reason.kind, 0) + 1
        gc.collect()
        samples.append(_rss_mb())
        fds_end = fd_count()
        await agent.aclose()
        open_connections = server.connections_open
    return {"samples": samples, "kinds": kinds, "fds": (fds_start, fds_end), "connections": open_connections}


@pytest.mark.timeout(300)
def test_a_thousand_turn_soak_keeps_rss_flat(tmp_path: Path) -> None:
    started = time.monotonic()
    report = anyio.run(_soak, tmp_path)
    seconds = time.monotonic() - started
    samples = report["samples"]
    assert len(samples) == SOAK_TURNS // BLOCK
    growth = max(samples[1:]) - samples[1]  # after the first block has warmed every code path
    FIGURES["soak RSS"] = (
        f"{SOAK_TURNS} turns in {seconds:.0f}s: RSS {samples[0]:.1f} MB after turn {BLOCK}, "
        f"{samples[-1]:.1f} MB after turn {SOAK_TURNS} (max growth after warm-up {growth:+.1f} MB); "
        f"ends {report['kinds']}"
    )
    COUNTS["soak turns"] += SOAK_TURNS
    assert growth < 8.0, samples
    assert report["fds"][1] <= report["fds"][0] + 2, report["fds"]  # at most the pooled keep-alive connection
    assert report["kinds"]["aborted"] == SOAK_TURNS // 20
