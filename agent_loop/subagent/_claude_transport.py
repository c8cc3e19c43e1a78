"""The claude-agent-sdk ``Transport`` on our :class:`ManagedProcess` (imported only when Claude Code runs).

Why not the SDK's own subprocess transport: it merges ``options.env`` over the whole parent environment
(every API key and token of the host would reach the CLI), leaves the CLI in our process group, and
hides its exit status inside exception text. Here the CLI gets exactly the managed-process allowlist
plus explicit entries, leads its own process group, has its stderr drained into the bounded host-side
ring (never onto the REPL), and is torn down by the shared ladder. The SDK still does everything above
the byte stream: the control protocol, the permission callback, message parsing and ``ResultError``.

The failure types raised here are the SDK's own, with the same meaning its transport gives them, so
the provider classifies by type alone: ``CLINotFoundError`` (the CLI cannot be spawned),
``CLIConnectionError`` (start or write failed), ``CLIJSONDecodeError`` (a corrupt stdout frame),
``ProcessError`` (the CLI ended its output with a non-zero exit; the SDK turns it into ``ResultError``
after an error result).
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, CLINotFoundError, ProcessError, Transport

from dsh.agent_loop.process import ExitStatus, LineTooLong, ManagedProcess, ProcessStartError, read_line
from dsh.agent_loop.subagent._product import descendants, kill_survivors
from dsh.agent_loop.subagent.run import ChildExited, before_exit
from dsh.llm import text as json_text

__all__ = ["ManagedCLITransport"]

_EXIT_AFTER_EOF = 10.0  # the CLI closed stdout: how long its exit may lag behind
_DRAIN_AFTER_EXIT = 0.5  # the CLI exited: how long buffered output may still trickle in (a grandchild
#                          holding the pipe open must not keep the run alive)


def _returncode(status: ExitStatus) -> int | None:
    """The SDK's ``exit_code`` convention: the exit code, or minus the signal number."""
    if status.exit_code is not None:
        return status.exit_code
    if status.signal is not None:
        try:
            return -signal.Signals[status.signal].value
        except KeyError:
            return None
    return None


class ManagedCLITransport(Transport):
    """The CLI as a managed child speaking stream-json over stdin/stdout."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        eof_grace: float,
        term_grace: float,
    ) -> None:
        self.process = ManagedProcess(argv, env=env, cwd=cwd)
        self._cwd = cwd
        self._eof_grace = eof_grace
        self._term_grace = term_grace
        self._ready = False
        self._write_lock = anyio.Lock()
        # The CLI's own exit as it stood when close() began: the SDK rolls back a failed connect() by
        # closing, and our teardown's effect (EOF, signals) must not pass for the CLI's own failure.
        self.closing = False
        self.exit_before_close: ExitStatus | None = None
        self._noted: dict[int, bytes] = {}  # descendants seen while the CLI lived (see _note_descendants)

    async def connect(self) -> None:
        if self.process.started:
            return
        if not os.path.isdir(self._cwd):
            raise CLIConnectionError("the working directory does not exist")
        try:
            await self.process.start()
        except ProcessStartError as exc:
            if isinstance(exc.__cause__, FileNotFoundError | NotADirectoryError | PermissionError):
                raise CLINotFoundError("Claude Code not found") from exc
            raise CLIConnectionError("could not start Claude Code") from exc
        self._ready = True

    async def write(self, data: str) -> None:
        async with self._write_lock:
            stdin = self.process.stdin
            if not self._ready or stdin is None or stdin.is_closing():
                raise CLIConnectionError("the Claude Code transport is not ready for writing")
            if self.process.exited:
                raise CLIConnectionError("Claude Code has exited")
            try:
                stdin.write(data.encode("utf-8"))
                await stdin.drain()
            except (OSError, RuntimeError) as exc:
                self._ready = False
                raise CLIConnectionError("could not write to Claude Code") from exc

    def _note_descendants(self) -> None:
        """Remember the CLI's descendants while it lives: one in a session of its own escapes the group
        kill, and once the CLI has exited nobody can tell it was ours."""
        if self.process.pid is not None and not self.process.exited:
            self._noted.update(descendants(self.process.pid))

    async def end_input(self) -> None:
        # The SDK ends input after the result; the CLI exits on its own right after, so look now.
        self._note_descendants()
        async with self._write_lock:
            stdin = self.process.stdin
            if stdin is not None and not stdin.is_closing():
                try:
                    stdin.close()
                except (OSError, RuntimeError):
                    pass

    def is_ready(self) -> bool:
        return self._ready

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._read_messages()

    async def _read_messages(self) -> AsyncIterator[dict[str, Any]]:
        if not self.process.started:
            raise CLIConnectionError("not connected")
        while (line := await self._next_line()) is not None:
            text = line.decode("utf-8", "replace").strip()
            if not text.startswith("{"):
                continue  # blank lines and non-JSON chatter carry no message (as in the SDK's transport)
            try:
                data = json_text.loads(text)
            except ValueError as exc:
                raise CLIJSONDecodeError(text, exc) from exc
            if isinstance(data, dict):
                yield data
        status = await self.process.wait_exit(_EXIT_AFTER_EOF)
        if status is None:
            raise ProcessError("Claude Code closed its output but kept running")
        if status.exit_code != 0:
            raise ProcessError("Claude Code exited abnormally", exit_code=_returncode(status))

    async def _next_line(self) -> bytes | None:
        """The next stdout line, or ``None`` at EOF or shortly after the CLI exited."""
        reader = self.process.stdout
        assert reader is not None
        if self.process.exited:
            with anyio.move_on_after(_DRAIN_AFTER_EXIT):
                return await self._read_line(reader)
            return None
        try:
            return await before_exit(self.process, lambda: self._read_line(reader), _DRAIN_AFTER_EXIT)
        except ChildExited:
            return None

    @staticmethod
    async def _read_line(reader: Any) -> bytes | None:
        try:
            return await read_line(reader)
        except LineTooLong as exc:
            raise CLIJSONDecodeError("(a line longer than the stream limit)", exc) from exc

    async def close(self) -> None:
        """Bounded by the ladder's graces; shielded there, so cancellation never leaves the CLI behind."""
        self._ready = False
        if not self.closing:
            self.closing = True
            self.exit_before_close = self.process.exit_status
        if self.process.started:
            self._note_descendants()
            await self.process.terminate(eof_grace=self._eof_grace, term_grace=self._term_grace)
            kill_survivors(self._noted)  # helpers that left the CLI's process group
