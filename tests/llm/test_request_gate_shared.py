"""The request gate a dsh shares with its child dsh subagents (dsh.llm.request_gate; issue 37 part 4).

Real parts: the gate's directory and flock'd slot files, a real child process that joins it and is killed while it
holds slots, two real clients against the loopback fault server. What a user relies on: ``max_parallel`` bounds the
family, the concurrency-cap line counts the family, a crash frees what it held, nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from dsh.llm import LlmError
from dsh.llm.client_settings import ClientSettings
from dsh.llm.deepseek import DeepSeekClient, open_client
from dsh.llm.events import ChatRequest, Message
from dsh.llm.loopback.fault_server import FaultServer
from dsh.llm.request_gate import RequestGate, concurrency_cap_message, gate_directory_problem, shared_gate
from tests.waiting import PROMPTLY, async_wait_until

pytestmark = pytest.mark.anyio

REPO = str(Path(__file__).resolve().parents[2])
REQUEST = ChatRequest(model="deepseek-flash", messages=(Message(role="user", content="hi"),))

# A child process that joins the gate, holds ``n`` requests in flight, says so, and waits to be killed.
HOLDER = """
import sys, anyio
from contextlib import AsyncExitStack
from dsh.llm.request_gate import RequestGate

async def main(path, limit, n):
    gate = RequestGate(limit, path)
    async with AsyncExitStack() as stack:
        for _ in range(n):
            await stack.enter_async_context(gate.admitted())
        print("held", gate.counted(), flush=True)
        await anyio.sleep(600)

anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
"""


class Holder:
    """Requests admitted in this process until ``release`` (each in a task of its own, as a turn's are)."""

    def __init__(self, gate: RequestGate, group: anyio.abc.TaskGroup) -> None:
        self.gate, self.group = gate, group
        self.admitted = 0
        self._release = anyio.Event()

    def start(self, n: int = 1) -> None:
        for _ in range(n):
            self.group.start_soon(self._hold)

    async def _hold(self) -> None:
        async with self.gate.admitted():
            self.admitted += 1
            await self._release.wait()

    def release(self) -> None:
        self._release.set()
        self._release = anyio.Event()


@contextlib.asynccontextmanager
async def holders(*gates: RequestGate) -> AsyncIterator[list[Holder]]:
    async with anyio.create_task_group() as group:
        made = [Holder(gate, group) for gate in gates]
        yield made
        for holder in made:
            holder.release()


def slot_files(path: str) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith("slot-"))


async def test_parent_and_child_gates_admit_max_parallel_between_them() -> None:
    parent = RequestGate(2)
    path = parent.share()
    assert path is not None and stat.S_IMODE(os.stat(path).st_mode) == 0o700
    child = RequestGate(2, path)
    async with holders(parent, child) as (mine, theirs):
        mine.start(1)
        theirs.start(2)  # one of the two waits: the family's bound is 2
        await async_wait_until(lambda: mine.admitted + theirs.admitted == 2, PROMPTLY, "two admitted")
        await anyio.sleep(0.2)  # the waiting one tries again meanwhile (a backoff of at most 50 ms)
        assert (mine.admitted, theirs.admitted) == (1, 1)
        assert (parent.counted(), child.counted(), parent.in_flight, child.in_flight) == (2, 2, 1, 1)
        mine.release()  # the child's waiting request goes as soon as the parent's ends
        await async_wait_until(lambda: theirs.admitted == 2, PROMPTLY, "the child's second request admitted")
        assert (parent.counted(), child.counted(), parent.in_flight) == (2, 2, 0)
    assert (parent.counted(), child.counted()) == (0, 0)
    child.close()
    assert os.path.isdir(path)  # a child's close leaves its parent's gate
    parent.close()
    assert not os.path.exists(path)


async def test_a_child_process_killed_while_holding_slots_frees_them() -> None:
    parent = RequestGate(2)
    path = parent.share()
    assert path is not None
    process = await anyio.open_process([sys.executable, "-c", HOLDER, path, "2", "2"], cwd=REPO,
                                       env={**os.environ, "PYTHONPATH": REPO})
    try:
        assert process.stdout is not None
        with anyio.fail_after(PROMPTLY * 3):  # a Python child's start-up on a loaded machine
            line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
        assert line == b"held 2"
        assert parent.counted() == 2
        async with holders(parent) as (mine,):
            mine.start()
            await anyio.sleep(0.2)
            assert mine.admitted == 0  # the family's two slots are the child's
            process.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel drops its locks
            await async_wait_until(lambda: mine.admitted == 1, PROMPTLY, "admitted once the holder died")
            assert parent.counted() == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        parent.close()


async def test_requests_in_flight_when_the_gate_is_shared_keep_their_place() -> None:
    parent = RequestGate(1)
    async with holders(parent) as (mine,):
        mine.start()
        await async_wait_until(lambda: mine.admitted == 1, PROMPTLY, "the parent's request in flight")
        path = parent.share()  # the first child starts while the parent's request is out
        assert path is not None
        child = RequestGate(1, path)
        assert (parent.counted(), child.counted()) == (1, 1)
        async with holders(child) as (theirs,):
            theirs.start()
            await anyio.sleep(0.2)
            assert theirs.admitted == 0
            mine.release()
            await async_wait_until(lambda: theirs.admitted == 1, PROMPTLY, "the child's request admitted")
            mine.start()  # the parent's next request now waits for the child's
            await anyio.sleep(0.2)
            assert (mine.admitted, parent.counted()) == (1, 1)
            theirs.release()
            await async_wait_until(lambda: mine.admitted == 2, PROMPTLY, "the parent's next request admitted")
        child.close()
    parent.close()


async def test_without_a_bound_the_family_is_counted_and_the_slots_are_reused() -> None:
    parent = RequestGate(0)
    path = parent.share()
    assert path is not None
    child = RequestGate(0, path)
    async with holders(parent, child) as (mine, theirs):
        mine.start(2)
        theirs.start(3)
        await async_wait_until(lambda: mine.admitted + theirs.admitted == 5, PROMPTLY, "five in flight")
        assert (parent.counted(), child.counted(), parent.peak, child.peak) == (5, 5, 2, 3)
        assert len(slot_files(path)) == 5
    for _ in range(50):  # one after another: the slot a request gave back is the next one's
        async with parent.admitted():
            assert parent.counted() == 1
    assert (len(slot_files(path)), parent.counted()) == (5, 0)
    child.close()
    parent.close()


async def test_a_cancelled_wait_holds_no_slot() -> None:
    parent = RequestGate(1)
    path = parent.share()
    assert path is not None
    async with holders(parent) as (mine,):
        mine.start()
        await async_wait_until(lambda: mine.admitted == 1, PROMPTLY, "one in flight")
        with anyio.move_on_after(0.2) as scope:
            async with parent.admitted():
                pytest.fail("admitted past the bound")
        assert scope.cancelled_caught and parent.counted() == 1
    assert parent.counted() == 0
    with anyio.fail_after(PROMPTLY):
        async with parent.admitted():
            assert parent.counted() == 1
    parent.close()


async def test_a_gate_whose_directory_went_lets_requests_through_counted_here() -> None:
    parent = RequestGate(1)
    path = parent.share()
    assert path is not None
    child = RequestGate(1, path)
    parent.close()  # the parent is gone first (a child that outlives it)
    with anyio.fail_after(PROMPTLY):
        async with child.admitted():
            assert child.counted() == 1
    child.close()


async def test_shared_gate_of_a_client_is_made_once_and_removed_at_close() -> None:
    client = open_client(ClientSettings(base_url="http://127.0.0.1:9", max_parallel=3, trust_env=False, env={}))
    path = shared_gate(client)
    assert path is not None and shared_gate(client) == path and client.requests.shared
    assert shared_gate(object()) is None  # a client without a gate (the demo's)
    await client.aclose()
    assert not os.path.exists(path)


def _gate_in(tmp: Path, mode: int = 0o700) -> str:
    path = tmp / "gate"
    path.mkdir()
    path.chmod(mode)
    return str(path)


def _a_file(tmp: Path) -> str:
    (tmp / "file").write_text("")
    return str(tmp / "file")


def _a_link(tmp: Path) -> str:
    (tmp / "link").symlink_to(_gate_in(tmp))
    return str(tmp / "link")


def _not_ours(tmp: Path) -> str:
    if os.getuid() != 0:
        pytest.skip("needs root to make a directory another user owns")
    path = _gate_in(tmp)
    os.chown(path, 65534, 65534)
    return path


PROBLEMS: dict[str, tuple[Callable[[Path], object], str | None]] = {
    "relative": (lambda tmp: "gate", "must be an absolute path"),
    "not a string": (lambda tmp: 7, "must be an absolute path"),
    "missing": (lambda tmp: str(tmp / "nowhere"), "must be an existing directory"),
    "a file": (_a_file, "must be an existing directory"),
    "NUL": (lambda tmp: f"{tmp}/a\x00b", "must be an existing directory"),
    "lone surrogate": (lambda tmp: f"{tmp}/\ud800", "must be an existing directory"),
    "group-readable": (lambda tmp: _gate_in(tmp, 0o750), "must have mode 0700"),
    "a link to a gate": (_a_link, "must be an existing directory"),
    "another user's": (_not_ours, "must be owned by this user"),
    "a gate": (_gate_in, None),
}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_what_a_child_accepts_as_a_gate(name: str, tmp_path: Path) -> None:
    make, problem = PROBLEMS[name]
    assert gate_directory_problem(make(tmp_path)) == problem


def test_the_cap_line_names_the_subagents_when_they_share_the_gate() -> None:
    assert concurrency_cap_message("deepseek-flash", 1) == (
        "Rate Limit Reached: the account's cap on concurrent requests to deepseek-flash was reached; "
        "this dsh had 1 request in flight")
    assert concurrency_cap_message("deepseek-flash", 4, subagents=True) == (
        "Rate Limit Reached: the account's cap on concurrent requests to deepseek-flash was reached; "
        "this dsh and its subagents had 4 requests in flight")


async def _drain(client: DeepSeekClient) -> None:
    async with contextlib.aclosing(client.stream(REQUEST)) as events:
        async for _ in events:
            pass


async def test_a_child_clients_429_counts_its_parents_requests_too() -> None:
    async with FaultServer(concurrency_cap=1) as server:
        server.push("stall_after_headers")
        parent = open_client(ClientSettings(base_url=server.url, dialect="deepseek", trust_env=False, env={}))
        path = shared_gate(parent)
        child = open_client(ClientSettings(base_url=server.url, dialect="deepseek", trust_env=False, env={},
                                           request_gate=path))
        failure: list[LlmError] = []
        async with parent, child, anyio.create_task_group() as group:

            async def held() -> None:
                with contextlib.suppress(LlmError):
                    await _drain(parent)

            group.start_soon(held)
            await async_wait_until(lambda: server.in_flight == 1, PROMPTLY, "the parent's request in flight")
            with pytest.raises(LlmError) as caught:
                await _drain(child)
            failure.append(caught.value)
            group.cancel_scope.cancel()
    assert str(failure[0]).splitlines()[0] == (
        "Rate Limit Reached: the account's cap on concurrent requests to deepseek-flash was reached; "
        "this dsh and its subagents had 2 requests in flight")
    assert path is not None and not os.path.exists(path)


def test_slot_files_are_not_inherited_by_a_child_process() -> None:
    gate = RequestGate(1)
    path = gate.share()
    assert path is not None

    async def main() -> None:
        async with gate.admitted():
            # a shell tool's child, started while a request is in flight, must not keep its slot when it ends
            result = subprocess.run(["ls", "-l", "/proc/self/fd"], capture_output=True, text=True, check=True)
            assert path not in result.stdout

    anyio.run(main)
    gate.close()
