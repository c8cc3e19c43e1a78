"""``dsh serve --stdio``'s ``initialize`` ``dialect``, ``max_parallel`` and ``request_gate``, as a real child process
against the real fault server: the child's client reads answers in the dialect it was given, and its requests take
the parent's gate's slots (dsh.llm.request_gate; issue 37 part 4).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.agent_loop.jsonrpc import ProtocolError
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.request_gate import RequestGate
from tests.repl.test_serve import _Child, _serve
from tests.waiting import PROMPTLY, async_wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

CAP_LINE = ("Rate Limit Reached: the account's cap on concurrent requests to probe-model was reached; "
            "{who} had 1 request in flight")


def _retries(child: _Child) -> list[dict[str, Any]]:
    return [note["event"]["data"] for note in child.events
            if note["method"] == "session/event" and note["event"]["type"] == "llm/retry"]


async def _prompt(child: _Child) -> Any:
    with anyio.fail_after(60):
        return await child.conn.request("session/prompt", {"prompt": "hi"})


@pytest.mark.parametrize(("dialect", "line"), [
    ("deepseek", CAP_LINE.format(who="this dsh")),
    ("openai", "Rate Limit Reached"),
])
async def test_the_childs_client_reads_a_429_in_the_dialect_it_was_given(dialect: str, line: str) -> None:
    async with FaultServer(script=["http_429_concurrency", Behaviour("text", text="ok")]) as server, _serve() as child:
        await child.initialize(server.url, dialect=dialect)
        assert await _prompt(child) == {"reason": {"kind": "completed"}}
        (retry,) = _retries(child)
        assert (retry["code"], retry["message"].splitlines()[0]) == ("RATE_LIMIT", line)
        await child.conn.request("shutdown")


async def test_the_childs_requests_take_the_parents_gate() -> None:
    parent = RequestGate(1)
    gate = parent.share()
    assert gate is not None
    async with (FaultServer(script=["http_429_concurrency", Behaviour("text", text="ok")]) as server,
                _serve() as child):
        await child.initialize(server.url, dialect="deepseek", max_parallel=1, request_gate=gate)
        answers: list[Any] = []
        async with anyio.create_task_group() as group, contextlib.AsyncExitStack() as held:
            await held.enter_async_context(parent.admitted())  # the family's one slot is the parent's

            async def prompt() -> None:
                answers.append(await _prompt(child))

            group.start_soon(prompt)
            await async_wait_until(lambda: any(n["method"] == "session/event" for n in child.events), PROMPTLY,
                                   "the child's turn started")
            await anyio.sleep(0.5)
            assert server.requests == []  # its request waits at the gate
            await held.aclose()
        assert answers == [{"reason": {"kind": "completed"}}]
        (retry,) = _retries(child)  # a 429 counts the family: the child's request, the parent's gave back
        assert retry["message"].splitlines()[0] == CAP_LINE.format(who="this dsh and its subagents")
        await child.conn.request("shutdown")
    assert parent.counted() == 0 and Path(gate).is_dir()  # the child's close leaves its parent's gate
    parent.close()


@pytest.mark.parametrize(("value", "problem"), [
    ("relative/gate", "must be an absolute path"),
    (7, "must be an absolute path"),
    ("/nonexistent/gate", "must be an existing directory"),
    ("/tmp/a\x00b", "must be an existing directory"),
    ("/", "must have mode 0700"),
])
async def test_a_bad_request_gate_is_invalid_params_and_the_path_is_not_repeated(value: object, problem: str) -> None:
    async with FaultServer() as server, _serve() as child:
        with pytest.raises(ProtocolError) as bad:
            await child.initialize(server.url, request_gate=value)
        assert bad.value.rpc_code == -32602
        assert str(bad.value) == f"JSON-RPC error -32602 from peer: initialize: request_gate {problem}"
        await child.initialize(server.url)  # the server carries on
        await child.conn.request("shutdown")
