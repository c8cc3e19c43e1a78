"""A managed child process: own process group, drained stderr, allowlisted env, a teardown ladder.

Every child dsh starts goes through :class:`ManagedProcess`: the subagents, the shell tool
(:func:`dsh.agent_loop.tools.shell.run_command`) and the prompt hook. What it guarantees:

* the child leads its own session/process group, so teardown reaches its grandchildren too;
* stdin/stdout are asyncio streams (the ACP SDK and our JSON-RPC client speak over them);
* stderr is drained continuously into a bounded host-side ring (the last 64 KiB, and the first 4 KiB
  beside it) by the pipe protocol itself (no task to own) — the pipe never fills and the text never reaches
  the screen; :meth:`ManagedProcess.stderr_lines` is for the host side only (a failed subagent run's first
  and last lines go to dsh.log and ``/why``, masked), never for a model-visible diagnostic.
  ``merge_stderr=True`` sends it to stdout instead (the shell tool shows both);
* the environment is :func:`child_env`: an allowlist of the parent's variables plus explicit entries;
* :meth:`ManagedProcess.terminate` runs close-stdin -> grace -> SIGTERM group -> grace -> SIGKILL
  group -> reap, shielded from cancellation so a cancelled caller never leaves a child behind.

Nothing here starts a task: the caller's task runs the ladder, and ``async with`` bounds the child's life.

The leader's exit is observed as soon as the kernel reports it, not when its pipes close: a grandchild
holding stdout open must not hide the exit (asyncio's ``Process.wait()`` waits for the pipes too).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import weakref
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.lowlevel

from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError

__all__ = [
    "DEFAULT_EOF_GRACE",
    "DEFAULT_STDERR_LIMIT",
    "DEFAULT_STDOUT_LIMIT",
    "DEFAULT_TERM_GRACE",
    "ENV_ALLOWLIST",
    "ExitStatus",
    "LineTooLong",
    "ManagedProcess",
    "ProcessStartError",
    "Teardown",
    "TeardownTier",
    "child_env",
    "iter_lines",
    "live_group_members",
    "proc_stat_fields",
    "read_line",
    "signal_group",
]

ENV_ALLOWLIST: tuple[str, ...] = ("PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER", "SHELL")
_ENV_ALLOWED_PREFIX = "LC_"

DEFAULT_STDERR_LIMIT = 64 * 1024
STDERR_HEAD_LIMIT = 4 * 1024  # the first bytes of a child's stderr, kept beside the ring
DEFAULT_STDOUT_LIMIT = 8 * 1024 * 1024  # one NDJSON frame may carry a whole file
DEFAULT_EOF_GRACE = 2.0
DEFAULT_TERM_GRACE = 2.0
_KILL_REAP_TIMEOUT = 5.0  # SIGKILL cannot be ignored; this only bounds a stuck kernel
_STDERR_DRAIN_AFTER_EXIT = 1.0

TeardownTier = Literal["exited", "eof", "sigterm", "sigkill", "unreaped"]


def child_env(extra: Mapping[str, str] | None = None, *, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: allowlisted variables of ``base`` (default ``os.environ``) plus ``extra``.

    The one policy for every child: nothing else of the parent leaks (API keys, tokens, proxies,
    whatever a user exported). Explicit entries come from configuration (``[subagents.NAME] env``).
    Raises ``ValueError`` for an entry that cannot be an environment variable.
    """
    source = os.environ if base is None else base
    env = {key: value for key, value in source.items() if key in ENV_ALLOWLIST or key.startswith(_ENV_ALLOWED_PREFIX)}
    for key, value in (extra or {}).items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ValueError("environment variable names must be non-empty strings without '=' or NUL")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError("environment variable values must be strings without NUL")
        env[key] = value
    return env


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How the child ended: an exit code or a signal name, observed independently (never both)."""

    exit_code: int | None
    signal: str | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        if returncode < 0:
            return cls(exit_code=None, signal=_signal_name(-returncode))
        return cls(exit_code=returncode, signal=None)


@dataclass(frozen=True, slots=True)
class Teardown:
    """What the ladder had to do. ``tier`` is the rung that ended the leader."""

    tier: TeardownTier
    exit_status: ExitStatus | None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


class ProcessStartError(HarnessError):
    """The child could not be spawned; the ``OSError`` is the cause (host-side only)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("could not start the child process", ErrorCode.PROCESS_START, cause=cause)


class LineTooLong(HarnessError):
    def __init__(self) -> None:
        super().__init__("a line from the child exceeded the stream limit", ErrorCode.LINE_TOO_LONG)


class _StderrRing:
    """The last ``limit`` bytes of the child's stderr, and its first :data:`STDERR_HEAD_LIMIT` bytes: an agent
    often says why it failed first, then prints a usage text or a trace that pushes that line out."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._head = bytearray()
        self.total_bytes = 0

    def append(self, data: bytes) -> None:
        if len(self._head) < STDERR_HEAD_LIMIT:
            self._head += data[: STDERR_HEAD_LIMIT - len(self._head)]
        self.total_bytes += len(data)
        if len(data) >= self._limit:
            self._chunks.clear()
            data = data[-self._limit :]
            self._size = 0
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self._limit:
            head = self._chunks.popleft()
            excess = self._size - self._limit
            if len(head) > excess:
                self._chunks.appendleft(head[excess:])
                self._size -= excess
            else:
                self._size -= len(head)

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    @property
    def cut(self) -> bool:
        """Whether older bytes were dropped (the ring's first line may then be a fragment)."""
        return self.total_bytes > self._size

    def lost_head(self) -> str:
        """The whole lines of the kept head that the ring no longer holds (a line cut at either end is dropped:
        it may begin or end inside a secret)."""
        lost = bytes(self._head[: self.total_bytes - self._size])
        return lost[: lost.rfind(b"\n") + 1].decode("utf-8", "replace")


class _ChildProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that drains stderr into the ring as it arrives and signals the leader's exit.

    Draining in the protocol callback (not in a reader task) means nothing has to own a task: the
    bytes are consumed by the event loop the moment the pipe has them.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop, ring: _StderrRing) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()
        self.stderr_closed = asyncio.Event()
        self._ring = ring

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:  # type: ignore[override]
        if fd == 2:
            self._ring.append(bytes(data))
            return
        super().pipe_data_received(fd, bytes(data))  # the same object when it already is bytes

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2:
            self.stderr_closed.set()
        super().pipe_connection_lost(fd, exc)

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


def _kill_group_quietly(pgid: int) -> None:
    # Last-resort finalizer (garbage collection or interpreter exit without terminate()).
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


class ManagedProcess:
    """One child process in its own group. Use ``async with`` or ``start()`` + ``terminate()``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr_limit: int = DEFAULT_STDERR_LIMIT,
        stdout_limit: int = DEFAULT_STDOUT_LIMIT,
        base_env: Mapping[str, str] | None = None,
        eof_grace: float = DEFAULT_EOF_GRACE,
        term_grace: float = DEFAULT_TERM_GRACE,
        merge_stderr: bool = False,
        stdin: bool = True,
        pass_fds: Sequence[int] = (),
    ) -> None:
        if not argv or not all(isinstance(part, str) for part in argv):
            raise ValueError("argv must be a non-empty sequence of strings")
        self._argv = list(argv)
        self._env = child_env(env, base=base_env)
        self._cwd = os.fspath(cwd) if cwd is not None else None
        self._stderr = _StderrRing(stderr_limit)
        self._stdout_limit = stdout_limit
        self._eof_grace = eof_grace
        self._term_grace = term_grace
        self._merge_stderr = merge_stderr
        self._pipe_stdin = stdin
        self._pass_fds = tuple(pass_fds)  # kept open in the child, e.g. the sandbox's status pipe
        self._transport: asyncio.SubprocessTransport | None = None
        self._protocol: _ChildProtocol | None = None
        self._ladder_lock = anyio.Lock()
        self._teardown: Teardown | None = None
        self._finalizer: weakref.finalize[[int], ManagedProcess] | None = None
        self.pid: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> ManagedProcess:
        """Spawn the child. Raises :class:`ProcessStartError` (cause: the ``OSError``)."""
        if self._transport is not None:
            raise RuntimeError("ManagedProcess already started")
        loop = asyncio.get_running_loop()
        limit, ring = self._stdout_limit, self._stderr
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ChildProtocol(limit, loop, ring),
                *self._argv,
                stdin=asyncio.subprocess.PIPE if self._pipe_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT if self._merge_stderr else asyncio.subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,  # own session => own process group, pgid == pid
                close_fds=True,
                pass_fds=self._pass_fds,
            )
        except OSError as exc:  # missing binary, not executable, bad cwd, fd exhaustion
            raise ProcessStartError(exc) from exc
        self._transport = transport
        self._protocol = protocol
        self.pid = transport.get_pid()
        self.stdin = protocol.stdin
        self.stdout = protocol.stdout
        self._finalizer = weakref.finalize(self, _kill_group_quietly, self.pid)
        return self

    async def __aenter__(self) -> ManagedProcess:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.terminate()

    # -- observation -----------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._transport is not None

    @property
    def exit_status(self) -> ExitStatus | None:
        """The leader's exit, once the kernel reported it; ``None`` while it runs."""
        if self._transport is None:
            return None
        returncode = self._transport.get_returncode()
        return None if returncode is None else ExitStatus.from_returncode(returncode)

    @property
    def exited(self) -> bool:
        return self.exit_status is not None

    async def wait_exit(self, timeout: float | None = None) -> ExitStatus | None:
        """Wait (bounded by ``timeout`` seconds) for the leader's exit; ``None`` if it is still running."""
        if self._protocol is None:
            raise RuntimeError("ManagedProcess not started")
        if timeout is None:
            await self._protocol.exited.wait()
        else:
            with anyio.move_on_after(timeout):
                await self._protocol.exited.wait()
        return self.exit_status

    def stderr_tail(self) -> str:
        """The last bytes of the child's stderr, decoded leniently. Host logs only — never a diagnostic."""
        return self._stderr.text()

    def stderr_lines(self) -> str:
        """The child's stderr in whole lines: all of it while the ring holds it; else the first lines the ring lost
        (the reason a child gave before a long trace) and then the ring's, without a line either cut short (it
        may begin or end inside a secret). Host logs only, as :meth:`stderr_tail`."""
        text = self._stderr.text()
        return self._stderr.lost_head() + text.partition("\n")[2] if self._stderr.cut else text

    @property
    def stderr_bytes_seen(self) -> int:
        return self._stderr.total_bytes

    def group_members(self) -> list[int]:
        """Live (non-zombie) processes still in the child's process group (Linux ``/proc``)."""
        if self.pid is None:
            return []
        return live_group_members(self.pid)

    # -- teardown --------------------------------------------------------------------------------

    async def terminate(self, eof_grace: float | None = None, term_grace: float | None = None) -> Teardown:
        """close stdin -> ``eof_grace`` -> SIGTERM group -> ``term_grace`` -> SIGKILL group -> reap.

        The graces default to the ones given to the constructor (2 s each unless set there).

        Idempotent: later (or concurrent) calls return the first outcome. The ladder runs shielded in
        a child task of a task group held right here, so a cancelled caller (an anyio cancel, or a
        native asyncio one, which ignores shields) still waits for it; the cancellation comes after.
        """
        if self._transport is None:
            return Teardown(tier="exited", exit_status=None)
        graces = (
            self._eof_grace if eof_grace is None else eof_grace,
            self._term_grace if term_grace is None else term_grace,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run_ladder, *graces)
        assert self._teardown is not None
        return self._teardown

    async def _run_ladder(self, eof_grace: float, term_grace: float) -> None:
        with anyio.CancelScope(shield=True):
            async with self._ladder_lock:
                if self._teardown is None:
                    self._teardown = await self._ladder(eof_grace, term_grace)

    async def _ladder(self, eof_grace: float, term_grace: float) -> Teardown:
        assert self._transport is not None and self._protocol is not None and self.pid is not None
        pgid = self.pid
        tier: TeardownTier
        await self._close_stdin()
        if self.exited:
            tier = "exited"
        else:
            if await self.wait_exit(eof_grace) is not None:
                tier = "eof"
            else:
                signal_group(pgid, signal.SIGTERM)
                signal_group(pgid, signal.SIGCONT)  # a stopped child acts on SIGTERM only once it runs again
                if await self.wait_exit(term_grace) is not None:
                    tier = "sigterm"
                else:
                    signal_group(pgid, signal.SIGKILL)
                    reaped = await self.wait_exit(_KILL_REAP_TIMEOUT) is not None
                    tier = "sigkill" if reaped else "unreaped"
        await _sweep_group(pgid)
        await self._finish_stderr()
        if tier != "unreaped":
            self._transport.close()
            if self._finalizer is not None:
                self._finalizer.detach()
        return Teardown(tier=tier, exit_status=self.exit_status)

    async def _close_stdin(self) -> None:
        writer = self.stdin
        if writer is None or writer.is_closing():
            return
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()
        with contextlib.suppress(OSError, RuntimeError), anyio.move_on_after(0.5):
            await writer.wait_closed()

    async def _finish_stderr(self) -> None:
        # After the group is gone the pipe reaches EOF quickly; don't wait forever on an escapee.
        if self._protocol is None or self._merge_stderr:
            return
        with anyio.move_on_after(_STDERR_DRAIN_AFTER_EXIT):
            await self._protocol.stderr_closed.wait()


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _sweep_group(pgid: int) -> None:
    """The leader is gone; anything left in its group is an orphan of ours: no survivor allowed."""
    if not live_group_members(pgid):
        return
    signal_group(pgid, signal.SIGKILL)
    with anyio.move_on_after(_KILL_REAP_TIMEOUT):
        while live_group_members(pgid):  # SIGKILL is delivered asynchronously
            await anyio.sleep(0.02)


def proc_stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the parenthesised command: state ppid pgrp ... (field 3
    onwards); ``None`` when the process is gone (or there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def live_group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid`` (Linux ``/proc``; empty elsewhere)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = proc_stat_fields(int(entry))
        if fields is None:
            continue
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry))
    return members


# -- line reading ---------------------------------------------------------------------------------


async def read_line(reader: asyncio.StreamReader) -> bytes | None:
    """One ``\\n``-terminated line without its terminator; ``None`` at EOF.

    A final unterminated fragment is returned as a line. Raises :class:`LineTooLong` when a line
    exceeds the reader's limit (the stream is then unusable: treat it as a protocol failure).
    """
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial or None
    except asyncio.LimitOverrunError:
        raise LineTooLong() from None
    return line[:-1]


async def iter_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Async iterator over :func:`read_line` until EOF."""
    while (line := await read_line(reader)) is not None:
        yield line
