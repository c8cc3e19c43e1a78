"""What a child dsh is handed of its parent's endpoint (``initialize``'s ``dialect``, ``max_parallel`` and
``request_gate``), and ``max_parallel`` bounding a parent and its real child dsh subagents together at the server
(dsh.llm.request_gate; issue 37 part 4).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult
from dsh.llm.client_settings import ClientSettings
from dsh.llm.deepseek import DeepSeekClient, open_client
from dsh.llm.events import ChatRequest, Message
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.request_gate import shared_gate
from tests import canaries

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

REPO = str(Path(__file__).resolve().parents[3])
ECHO = [sys.executable, str(Path(__file__).with_name("initialize_echo_child.py"))]
FAST = {"exit_wait": 1.0, "eof_grace": 1.0, "term_grace": 1.0}
PARENT_URL = "http://127.0.0.1:9"


async def _run(table: dict[str, Any], parent: ParentContext) -> SubagentResult:
    provider = build_provider("probe", {"provider": "dsh", **FAST, **table}, parent)
    async with provider.run(SubagentRequest("d", "p", REPO)) as run:
        with anyio.fail_after(60):
            return await run.result()


async def test_initialize_hands_the_child_the_parents_dialect_bound_and_gate() -> None:
    asked: list[str] = []

    def gate() -> str:
        asked.append("gate")
        return "/the/parents/gate"

    parent = ParentContext(model="m", base_url=PARENT_URL, dialect="deepseek", max_parallel=3, request_gate=gate)
    result = await _run({"command": ECHO}, parent)
    assert result.stop_reason == "completed"
    assert json.loads(result.output) == {"base_url": PARENT_URL, "dialect": "deepseek", "max_parallel": 3,
                                         "model": "m", "permission": "reject", "request_gate": "/the/parents/gate"}
    assert asked == ["gate"]  # asked for at the run, not when the table was read


async def test_a_child_on_another_endpoint_keeps_the_bound_but_not_the_dialect_or_gate() -> None:
    asked: list[str] = []

    def gate() -> str:
        asked.append("gate")
        return "/the/parents/gate"

    parent = ParentContext(model="m", base_url=PARENT_URL, dialect="deepseek", max_parallel=3, request_gate=gate)
    result = await _run({"command": ECHO, "base_url": "http://127.0.0.1:8"}, parent)
    assert json.loads(result.output) == {"base_url": "http://127.0.0.1:8", "max_parallel": 3, "model": "m",
                                         "permission": "reject"}
    assert asked == []


async def test_no_bound_and_no_gate_send_neither() -> None:
    parent = ParentContext(model="m", base_url=PARENT_URL, request_gate=lambda: None)
    result = await _run({"command": ECHO}, parent)
    assert json.loads(result.output) == {"base_url": PARENT_URL, "model": "m", "permission": "reject"}


async def _ask(client: DeepSeekClient) -> None:
    request = ChatRequest(model="parent-model", messages=(Message(role="user", content="hi"),))
    async with contextlib.aclosing(client.stream(request)) as events:
        async for _ in events:
            pass


async def test_max_parallel_bounds_a_parent_and_its_child_dsh_subagents_together() -> None:
    # The server answers DeepSeek's 429 to a third request in flight: with a bound of 2 for the family it never
    # has to. Parent requests run all along, so the children's requests meet them at the gate.
    async with FaultServer(default="slow_text", concurrency_cap=2) as server:
        client = open_client(ClientSettings(base_url=server.url, api_key=canaries.API_KEY, dialect="deepseek",
                                            max_parallel=2, trust_env=False, env={}))
        parent = ParentContext(model="child-model", base_url=server.url, api_key=canaries.API_KEY,
                               dialect="deepseek", max_parallel=2, request_gate=lambda: shared_gate(client))
        results: list[SubagentResult] = []
        children_done = anyio.Event()
        async with client, anyio.create_task_group() as group:

            async def parent_requests() -> None:
                while not children_done.is_set():
                    await _ask(client)
                    await anyio.sleep(0.02)  # the reply read, the tools run: a parent's step between requests

            async def children() -> None:
                async with anyio.create_task_group() as runs:
                    for _ in range(2):
                        runs.start_soon(lambda: _collect(results, parent))
                children_done.set()

            for _ in range(3):
                group.start_soon(parent_requests)
            group.start_soon(children)
        gate = shared_gate(client)
    assert [result.stop_reason for result in results] == ["completed", "completed"]
    models = collections.Counter(request.json["model"] for request in server.requests)
    assert models["child-model"] == 2 and models["parent-model"] >= 3
    assert server.peak_in_flight == 2
    assert "http_429_concurrency" not in {request.behaviour for request in server.requests}
    assert gate is not None and not Path(gate).exists()  # removed when the parent's client closed


async def _collect(results: list[SubagentResult], parent: ParentContext) -> None:
    results.append(await _run({}, parent))


def test_dsh_p_hands_its_child_its_gate_and_removes_it_when_it_exits(tmp_path: Path) -> None:
    """A real ``dsh -p`` whose model delegates to a ``[subagents.helper]`` child dsh (the echo child): the child
    is handed the parent's dialect, bound and gate; the gate is a private directory the parent removes at exit."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    (home / "config" / "dsh").mkdir(parents=True)
    tmp.mkdir()
    (home / "config" / "dsh" / "config.toml").write_text(
        f'max_retries = 0\nmax_parallel = 2\ndialect = "deepseek"\n[subagents.helper]\nprovider = "dsh"\n'
        f"command = {json.dumps(ECHO)}\n", encoding="utf-8")
    delegate = {"description": "d", "prompt": "look around"}
    script = [Behaviour("tool_call", id="call_1", name="subagent", arguments=delegate)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"), "TMPDIR": str(tmp),
           "DEEPSEEK_API_KEY": canaries.API_KEY}
    with FaultServer(script=script, default=Behaviour("text", text="done")) as server:
        result = subprocess.run([sys.executable, "-m", "dsh.repl", "-p", "go", "--base-url", server.url],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=100)
        assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr
        follow_up = server.requests[1].json["messages"]
    (answer,) = [message["content"] for message in follow_up if message["role"] == "tool"]
    sent = json.loads(answer)
    gate = Path(sent.pop("request_gate"))
    assert (gate.parent, gate.name.startswith("dsh-gate-")) == (tmp, True)
    assert sent == {"base_url": server.url, "dialect": "deepseek", "max_parallel": 2, "model": sent["model"],
                    "permission": "reject"}
    assert list(tmp.iterdir()) == []  # the gate went with the parent's client
