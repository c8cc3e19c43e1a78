"""Child processes for tools: :func:`run_command`, and the ``run_shell`` tool built on it.

``run_shell`` asks the approver first (``yes`` / ``no`` / ``always`` for this session) and is denied when
there is no approver. Commands run as real child processes in their own process group
(:class:`~dsh.agent_loop.process.ManagedProcess`), with a timeout and bounded output, and are killed and
reaped when the turn is cancelled. The prompt hook (``dsh.agent_loop.guard``) and the project context's
``git`` calls use :func:`run_command` too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from dsh.agent_loop.permissions import Action
from dsh.agent_loop.process import ManagedProcess, ProcessStartError
from dsh.agent_loop.sandbox import Sandbox, wait_status
from dsh.agent_loop.tools.registry import (
    Approver,
    SandboxedCommand,
    Tool,
    ToolContext,
    ToolOutput,
    arguments_schema,
    ask_approval,
    int_arg,
    param,
)

__all__ = [
    "SHELL_DENIED",
    "SHELL_NO_APPROVER",
    "CommandResult",
    "run_command",
    "run_sandboxed",
    "run_shell_tool",
]

SHELL_TIMEOUT = 120.0
SHELL_MAX_TIMEOUT = 600.0
SHELL_OUTPUT_LIMIT = 32 * 1024
SHELL_DENIED = "Error: the user denied this shell command"
SHELL_NO_APPROVER = "Error: shell commands need approval and no one is available to approve them here"
_ALWAYS_KEY = "run_shell.always"
_READ_CHUNK = 64 * 1024


class _HeadTail:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts what it dropped."""

    def __init__(self, limit: int) -> None:
        self._half = max(1, limit // 2)
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self._tail += chunk
        excess = len(self._tail) - self._half
        if excess > 0:
            del self._tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        head = self._head.decode("utf-8", "replace")
        tail = self._tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[… {self.dropped} bytes of output omitted …]\n{tail}"
        return head + tail


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int | None  # None when killed by a signal or never observed
    signal: str | None  # e.g. "SIGKILL"
    output: str  # stdout (and stderr, when merged), bounded, decoded with replacement
    dropped_bytes: int
    timed_out: bool


async def run_command(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    timeout: float = 120.0,
    output_limit: int = 64 * 1024,
    merge_stderr: bool = True,
    env: Mapping[str, str] | None = None,
    exit_grace: float = 0.5,
    kill_grace: float = 0.5,
    pass_fds: Sequence[int] = (),
) -> CommandResult:
    """Run a :class:`~dsh.agent_loop.process.ManagedProcess` and collect its bounded output.

    The environment is the one child policy (:func:`~dsh.agent_loop.process.child_env`: the
    allowlist) plus ``env``. On timeout or cancellation the whole group gets SIGTERM, then SIGKILL
    after ``kill_grace``, and the child is reaped before this returns (or re-raises the cancellation).
    When the child exits but something it left in its group still holds the pipe, output is collected
    for ``exit_grace`` more and the group is then killed, so a stray background job cannot hang the
    call. ``pass_fds`` stay open in the child. Raises ``OSError`` when the command cannot be started.
    """
    process = ManagedProcess(
        argv, env=env, cwd=cwd, merge_stderr=merge_stderr, stdin=input is not None, eof_grace=0, term_grace=kill_grace,
        pass_fds=pass_fds,
    )
    await _start(process)
    buffer = _HeadTail(output_limit)
    timed_out = False
    try:
        timed_out = await _collect(process, buffer, input, timeout=timeout, exit_grace=exit_grace)
    finally:
        # Even after a clean exit, a background job the command left behind shares the group: the
        # ladder's sweep kills it.
        teardown = await process.terminate()
    status = teardown.exit_status or process.exit_status
    exit_code = status.exit_code if status is not None else None
    signal_name = status.signal if status is not None else None
    return CommandResult(exit_code, signal_name, buffer.text(), buffer.dropped, timed_out)


async def run_sandboxed(
    sandbox: Sandbox, argv: Sequence[str], *, cwd: str | os.PathLike[str], timeout: float, output_limit: int
) -> CommandResult:
    """:func:`run_command` of ``argv`` under ``sandbox``, with the command's own exit code or signal (bwrap
    alone reports a signal as 128+N; ``dsh.agent_loop.sandbox`` says how the status pipe works). Raises
    ``SandboxRefused`` (a ``ValueError``, one line) when a pointer changed since the sandbox's plan was made."""
    read_end, write_end = os.pipe()
    try:
        # In a thread: the first command of a session makes the plan (a ``git config``), each one re-checks it.
        wrapped = await anyio.to_thread.run_sync(functools.partial(sandbox.wrap, argv, cwd=cwd, status_fd=write_end))
        result = await run_command(wrapped, cwd=cwd, timeout=timeout, output_limit=output_limit, pass_fds=(write_end,))
        os.close(write_end)
        write_end = -1
        os.set_blocking(read_end, False)  # every writer is gone (the group is reaped): never waits
        try:
            data = os.read(read_end, 64)
        except BlockingIOError:
            data = b""
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    status = wait_status(data)
    if status is None or result.timed_out:
        return result
    return dataclasses.replace(result, exit_code=status.exit_code, signal=status.signal)


async def _start(process: ManagedProcess) -> None:
    """Start the child; ``OSError`` when it cannot be started."""
    # Shielded: a cancel that lands while asyncio is still wiring up the pipes would otherwise leave a
    # started child that nobody owns. Once the caller holds the handle, its finally owns the cleanup.
    with anyio.CancelScope(shield=True):
        try:
            await process.start()
        except ProcessStartError as exc:
            raise exc.__cause__ or OSError("could not start the command") from None


async def _collect(
    process: ManagedProcess, buffer: _HeadTail, input: bytes | None, *, timeout: float, exit_grace: float
) -> bool:
    """Feed ``input``, read the output into ``buffer`` until the child exits (and ``exit_grace`` more for
    the pipe to drain); whether ``timeout`` struck first."""
    reader_done = anyio.Event()
    with anyio.move_on_after(timeout) as deadline:
        async with anyio.create_task_group() as group:
            group.start_soon(_read_output, process, buffer, reader_done)
            if input is not None:
                group.start_soon(_feed_input, process, input)
            await process.wait_exit()
            with anyio.move_on_after(exit_grace):
                await reader_done.wait()
            group.cancel_scope.cancel()
    return deadline.cancelled_caught


async def _read_output(process: ManagedProcess, buffer: _HeadTail, done: anyio.Event) -> None:
    assert process.stdout is not None
    try:
        while chunk := await process.stdout.read(_READ_CHUNK):
            buffer.add(chunk)
    except OSError:
        pass
    finally:
        done.set()


async def _feed_input(process: ManagedProcess, data: bytes) -> None:
    assert process.stdin is not None
    with contextlib.suppress(OSError, RuntimeError):
        process.stdin.write(data)
        await process.stdin.drain()
    with contextlib.suppress(OSError, RuntimeError):
        process.stdin.close()


# --- run_shell ------------------------------------------------------------------------------------

SANDBOXED = " (sandboxed)"  # ends a sandboxed command's status line (docs/safety.md)


def _format_command(result: CommandResult, timeout: float, *, sandboxed: bool = False) -> ToolOutput:
    text = result.output if result.output else "(no output)"
    if not text.endswith("\n"):
        text += "\n"
    mark = SANDBOXED if sandboxed else ""
    if result.timed_out:
        return ToolOutput(text + f"[timed out after {timeout:g}s; the command was killed]{mark}", is_error=True)
    if result.signal is not None:
        return ToolOutput(text + f"[killed by {result.signal}]{mark}", is_error=True)
    return ToolOutput(text + f"[exit code: {result.exit_code}]{mark}", is_error=result.exit_code != 0)


_SANDBOX_NOTE = (
    " It runs sandboxed: the project tree is writable, the rest of the file system read-only, /tmp private"
)


def run_shell_tool(
    approver: Approver | None = None, *, shell: str = "/bin/sh", sandbox: Sandbox | None = None
) -> Tool:
    """``run_shell``: asks ``approver`` (else the context's approver) before every command.

    ``always`` approves shell commands for the rest of the session. No approver, a failing approver, or
    any answer but ``yes``/``always`` denies the command. With ``sandbox`` each command runs under
    bubblewrap (``dsh.agent_loop.sandbox``; docs/safety.md).
    """

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("command must be a non-empty string")
        timeout = float(int_arg(args, "timeout_s", int(SHELL_TIMEOUT), 1, int(SHELL_MAX_TIMEOUT)))
        request = SandboxedCommand(command) if sandbox is not None else command
        denial = await ask_approval(ctx, approver or ctx.approver, request, always_key=_ALWAYS_KEY,
                                    denied=SHELL_DENIED, no_approver=SHELL_NO_APPROVER, action=Action.SHELL)
        if denial is not None:
            return denial
        argv = [shell, "-c", command]
        if sandbox is not None:
            result = await run_sandboxed(sandbox, argv, cwd=ctx.cwd, timeout=timeout, output_limit=SHELL_OUTPUT_LIMIT)
        else:
            result = await run_command(argv, cwd=ctx.cwd, timeout=timeout, output_limit=SHELL_OUTPUT_LIMIT)
        return _format_command(result, timeout, sandboxed=sandbox is not None)

    description = (
        "Run a shell command (/bin/sh -c) in the working directory. The user approves each command. "
        "stdout and stderr are merged; long output keeps its start and end. Default timeout 120 s."
    )
    if sandbox is not None:
        description += _SANDBOX_NOTE + ("." if sandbox.network else ", and there is no network.")
    return Tool(
        "run_shell",
        description,
        arguments_schema(
            {
                "command": param("string", "the command line"),
                "timeout_s": param("integer", "seconds before it is killed (max 600)"),
            },
            "command",
        ),
        run,
        concurrency_safe=False,
    )
