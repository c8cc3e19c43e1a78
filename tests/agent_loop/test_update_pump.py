"""The one ordered pump of ``dsh acp`` and ``dsh serve --stdio`` (agent_loop/update_pump.py): items sent from
synchronous callbacks go out in order, what queued while a delivery was under way goes out as one batch, and
``flushed()`` returns only once everything sent before it is out."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from dsh.agent_loop.update_pump import UpdatePump

pytestmark = pytest.mark.anyio


async def test_items_go_out_in_order_and_flushed_waits_for_them() -> None:
    pump: UpdatePump[int] = UpdatePump()
    batches: list[list[int]] = []
    gate = anyio.Event()

    async def deliver(batch: Sequence[int]) -> None:
        batches.append(list(batch))
        await gate.wait()  # the wire is slow: what is sent meanwhile queues

    async with anyio.create_task_group() as group:
        group.start_soon(pump.run, deliver)
        pump.send(1)
        await anyio.wait_all_tasks_blocked()
        pump.send(2)
        pump.send(3)
        flushed = anyio.Event()

        async def wait_flushed() -> None:
            await pump.flushed()
            flushed.set()

        group.start_soon(wait_flushed)
        await anyio.wait_all_tasks_blocked()
        assert batches == [[1]] and not flushed.is_set()
        gate.set()
        with anyio.fail_after(10):
            await flushed.wait()
        assert batches == [[1], [2, 3]]
        group.cancel_scope.cancel()
    pump.close()


async def test_a_closed_pump_drops_what_is_sent_and_releases_a_waiting_flush() -> None:
    pump: UpdatePump[str] = UpdatePump()
    pump.send("queued, never delivered")
    async with anyio.create_task_group() as group:
        group.start_soon(pump.flushed)
        await anyio.wait_all_tasks_blocked()
        pump.close()
    pump.send("after close")
    await pump.flushed()  # nothing pending: returns at once


async def test_closing_the_pump_ends_its_run() -> None:
    pump: UpdatePump[int] = UpdatePump()
    delivered: list[int] = []

    async def deliver(batch: Sequence[int]) -> None:
        delivered.extend(batch)
        pump.close()  # the session closed while a frame went out

    pump.send(1)
    with anyio.fail_after(10):
        await pump.run(deliver)  # returns: nothing more to deliver, ever
    pump.send(2)
    assert delivered == [1]
