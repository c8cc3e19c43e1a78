"""Piped mode: each line of stdin is a turn (or a command); end of input waits for the running turn and
for background jobs' notices, then exits 0. SIGINT/SIGTERM cancel the running turn, else stop reading.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import AsyncGenerator

import anyio
import anyio.abc

from dsh.repl.config import Config
from dsh.repl.frontend import PlainFrontEnd, StreamSink
from dsh.repl.options import LaunchOptions
from dsh.repl.shell import Shell, color, open_shell
from dsh.repl.signals import Signals

__all__ = ["run_piped"]


async def run_piped(options: LaunchOptions, config: Config, env: dict[str, str]) -> int:
    out = StreamSink(sys.stdout)
    try:
        async with contextlib.AsyncExitStack() as stack:
            shell = await open_shell(stack, options, config, env, PlainFrontEnd(out, flush=out.flush),
                                     color=color(env, sys.stdout))
            if options.resume is not None:
                shell.report_resumed()
            return await _read_turns(shell)
    finally:
        out.flush()  # nothing written, even while closing down, is left behind


async def _stdin_lines() -> AsyncGenerator[str, None]:
    """Lines of stdin, read without blocking the event loop (regular files are read directly)."""
    fd = sys.stdin.fileno()
    pollable = not stat.S_ISREG(os.fstat(fd).st_mode)
    pending = b""
    while True:
        if pollable:
            try:
                await anyio.wait_readable(fd)
            except PermissionError:  # /dev/null and the like: epoll cannot watch them, and reads never block
                pollable = False
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace").rstrip("\r")


async def _read_turns(shell: Shell) -> int:
    status = 0
    stopped = False

    def stop() -> None:
        nonlocal stopped
        stopped = True
        reading.cancel()

    signals = Signals(shell.session, stop)
    async with anyio.create_task_group() as tasks:
        await tasks.start(signals.watch)
        with anyio.CancelScope() as reading:
            async with contextlib.aclosing(_stdin_lines()) as lines:
                async for line in lines:
                    with anyio.CancelScope(shield=True):  # a signal cancels the turn, not the loop
                        await shell.handle_line(line)
                        await shell.deliver_notices()
                    shell.frontend.flush()  # the turn's end line, before reading the next one
                    if shell.exit_code is not None:
                        status = shell.exit_code
                        break
                    if stopped:
                        break
                else:
                    await _after_input(shell)
        tasks.cancel_scope.cancel()
    if stopped and shell.exit_code is None:
        status = signals.exit_status(130)
    return status


async def _after_input(shell: Shell) -> None:
    """EOF: background jobs still owe their completion notice; wait for them (a signal still stops this),
    then let the owner read the notices in one more turn."""
    toolkit = shell.session.toolkit
    if toolkit is not None:
        await toolkit.jobs.wait_all()
        with anyio.CancelScope(shield=True):
            await shell.deliver_notices()
