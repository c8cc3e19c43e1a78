"""The tool registry, how one model tool call is executed, and the built-in developer tools.

A :class:`Tool` is a name, a description, JSON-schema parameters, an async callable
``run(args, ctx) -> ToolOutput | str`` and a ``concurrency_safe`` flag. The agent runs the calls of
one assistant message in model order; consecutive concurrency-safe calls form a batch that runs in
parallel (see :func:`plan_batches`). Whatever goes wrong with one call -- arguments that are not a JSON
object, an unknown tool, an exception -- becomes an error result the model sees; the turn goes on.

Built-ins (:func:`default_tools`): ``read_file``, ``list_dir``, ``search_text`` (concurrency-safe),
``write_file`` and ``edit_file`` (``dsh.agent_loop.tools.edits``: a diff to approve) and ``run_shell``, which
asks the approver first (``yes`` / ``no`` / ``always`` for this session) and is denied when there is no
approver. Shell commands run as real child processes in their own process
group, with a timeout and bounded output, and are killed and reaped when the turn is cancelled.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import anyio
import anyio.abc
import anyio.to_thread

from dsh.agent_loop.events import Event
from dsh.agent_loop.process import ManagedProcess, ProcessStartError
from dsh.llm import ToolCall, ToolSpec, error_chain
from dsh.llm import text as json_text
from dsh.llm.redact import Redactor

__all__ = [
    "DEFAULT_MAX_PARALLEL",
    "Approval",
    "Approver",
    "CommandResult",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "default_tools",
    "list_dir_tool",
    "plan_batches",
    "read_file_tool",
    "run_command",
    "run_shell_tool",
    "run_tool_call",
    "search_text_tool",
]

DEFAULT_MAX_PARALLEL = 10
MAX_RESULT_CHARS = 100_000  # a last bound on any tool's text, whoever wrote the tool

Approval = Literal["yes", "no", "always"]
# Called with what is to be approved: run_shell's command (a str), or an edit tool's
# ``dsh.agent_loop.tools.edits.EditRequest`` (its diff).
Approver = Callable[[Any], Awaitable["Approval | None"]]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool call produced. ``diagnostic`` is fixed safe text the REPL shows on its own line."""

    text: str
    is_error: bool = False
    diagnostic: str | None = None
    # Host-side only (the user's /why): never sent, never logged, not part of what the output is.
    cause: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass
class ToolContext:
    """What a running tool may use: where it runs, which turn, and how to talk to the owner.

    ``notify(event)`` publishes an extra event through the agent (a durable one is also logged), e.g.
    ``job/notice`` from a background job. ``session_state`` lives as long as the session (``/new``
    clears it); ``run_shell`` keeps its "always" approval there.
    """

    cwd: Path
    turn: int
    notify: Callable[[Event], None]
    approver: Approver | None = None
    session_state: dict[str, Any] = field(default_factory=dict)
    label: str = "main"
    call_id: str = ""
    post_notice: Callable[[str, str], None] | None = None  # (text, job_id) -> None; the agent's
    # The agent's redactor: what the model saw of a file is masked, so an edit checks it, and an edit's
    # approval masks only its known values (agent_loop/tools/edits.py).
    redact: Redactor = field(default_factory=Redactor)


ToolFunction = Callable[[dict[str, Any], ToolContext], Awaitable["ToolOutput | str"]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFunction
    concurrency_safe: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


class ToolRegistry:
    """Tools by name, in registration order (which is the order the model is told about them)."""

    def __init__(self, tools: Sequence[Tool] = (), *, max_parallel: int = DEFAULT_MAX_PARALLEL) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.max_parallel = max_parallel
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool, *, replace: bool = False) -> None:
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec() for tool in self._tools.values())

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools


# --- executing one call ------------------------------------------------------------------------


def _parse_arguments(call: ToolCall) -> dict[str, Any] | ToolOutput:
    text = call.arguments
    if not text.strip():
        return {}  # models send "" for a tool without parameters
    try:
        value = json_text.loads(text)
    except ValueError as exc:
        return ToolOutput(f'Error: invalid JSON arguments for tool "{call.name}": {exc}', is_error=True)
    if not isinstance(value, dict):
        return ToolOutput(f'Error: arguments for tool "{call.name}" must be a JSON object', is_error=True)
    return value


def _missing_required(tool: Tool, args: Mapping[str, Any]) -> ToolOutput | None:
    required = tool.parameters.get("required") if isinstance(tool.parameters, dict) else None
    for name in required or ():
        if name not in args:
            return ToolOutput(f'Error: missing required argument "{name}" for tool "{tool.name}"', is_error=True)
    return None


def _bounded(output: ToolOutput) -> ToolOutput:
    if len(output.text) <= MAX_RESULT_CHARS:
        return output
    omitted = len(output.text) - MAX_RESULT_CHARS
    text = output.text[:MAX_RESULT_CHARS] + f"\n[tool output truncated: {omitted} characters omitted]"
    return ToolOutput(text, output.is_error, output.diagnostic)


async def run_tool_call(registry: ToolRegistry, call: ToolCall, ctx: ToolContext) -> ToolOutput:
    """Run one call; every failure except cancellation comes back as an error ``ToolOutput``."""
    tool = registry.get(call.name)
    if tool is None:
        return ToolOutput(f'Error: unknown tool "{call.name}"', is_error=True)
    args = _parse_arguments(call)
    if isinstance(args, ToolOutput):
        return args
    missing = _missing_required(tool, args)
    if missing is not None:
        return missing
    try:
        value = await tool.run(args, ctx)
    except Exception as exc:
        return ToolOutput(f"Error: {error_chain(exc)}", is_error=True)
    if isinstance(value, ToolOutput):
        return _bounded(value)
    return _bounded(ToolOutput(value if isinstance(value, str) else str(value)))


def plan_batches(registry: ToolRegistry, calls: Sequence[ToolCall]) -> list[list[ToolCall]]:
    """Split calls, in model order, into batches: a run of concurrency-safe calls, or one other call."""
    batches: list[list[ToolCall]] = []
    for call in calls:
        tool = registry.get(call.name)
        safe = tool is not None and tool.concurrency_safe
        if safe and batches and batches[-1] and _is_safe(registry, batches[-1][-1]):
            batches[-1].append(call)
        else:
            batches.append([call])
    return batches


def _is_safe(registry: ToolRegistry, call: ToolCall) -> bool:
    tool = registry.get(call.name)
    return tool is not None and tool.concurrency_safe


# --- child processes ---------------------------------------------------------------------------

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
) -> CommandResult:
    """Run a :class:`~dsh.agent_loop.process.ManagedProcess` and collect its bounded output.

    The environment is the one child policy (:func:`~dsh.agent_loop.process.child_env`: the
    allowlist) plus ``env``. On timeout or cancellation the whole group gets SIGTERM, then SIGKILL
    after ``kill_grace``, and the child is reaped before this returns (or re-raises the cancellation).
    When the child exits but something it left in its group still holds the pipe, output is collected
    for ``exit_grace`` more and the group is then killed, so a stray background job cannot hang the
    call. Raises ``OSError`` when the command cannot be started.
    """
    process = ManagedProcess(
        argv, env=env, cwd=cwd, merge_stderr=merge_stderr, stdin=input is not None, eof_grace=0, term_grace=kill_grace
    )
    # Shielded: a cancel that lands while asyncio is still wiring up the pipes would otherwise leave a
    # started child that nobody owns. Once we hold the handle, the finally below owns the cleanup.
    with anyio.CancelScope(shield=True):
        try:
            await process.start()
        except ProcessStartError as exc:
            raise exc.__cause__ or OSError("could not start the command") from None
    buffer = _HeadTail(output_limit)
    reader_done = anyio.Event()

    async def read_output() -> None:
        assert process.stdout is not None
        try:
            while chunk := await process.stdout.read(_READ_CHUNK):
                buffer.add(chunk)
        except OSError:
            pass
        finally:
            reader_done.set()

    async def feed_input() -> None:
        assert process.stdin is not None and input is not None
        with contextlib.suppress(OSError, RuntimeError):
            process.stdin.write(input)
            await process.stdin.drain()
        with contextlib.suppress(OSError, RuntimeError):
            process.stdin.close()

    timed_out = False
    try:
        with anyio.move_on_after(timeout) as deadline:
            async with anyio.create_task_group() as group:
                group.start_soon(read_output)
                if input is not None:
                    group.start_soon(feed_input)
                await process.wait_exit()
                with anyio.move_on_after(exit_grace):
                    await reader_done.wait()
                group.cancel_scope.cancel()
        timed_out = deadline.cancelled_caught
    finally:
        # Even after a clean exit, a background job the command left behind shares the group: the
        # ladder's sweep kills it.
        teardown = await process.terminate()
    status = teardown.exit_status or process.exit_status
    exit_code = status.exit_code if status is not None else None
    signal_name = status.signal if status is not None else None
    return CommandResult(exit_code, signal_name, buffer.text(), buffer.dropped, timed_out)


_READ_CHUNK = 64 * 1024


# --- built-in tools ----------------------------------------------------------------------------

READ_LIMIT_LINES = 2000
READ_LIMIT_BYTES = 64 * 1024
LIST_LIMIT = 500
SEARCH_LIMIT = 100
SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024
SEARCH_LINE_CHARS = 240
SHELL_TIMEOUT = 120.0
SHELL_MAX_TIMEOUT = 600.0
SHELL_OUTPUT_LIMIT = 32 * 1024
_SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox", ".hypothesis"}
)  # fmt: skip

_PATH_MAX = 4096  # Linux's PATH_MAX: no longer path can be opened anyway

SHELL_DENIED = "Error: the user denied this shell command"
SHELL_NO_APPROVER = "Error: shell commands need approval and no one is available to approve them here"
_ALWAYS_KEY = "run_shell.always"


def _resolve(ctx: ToolContext, raw: object, default: str | None = None) -> Path:
    if raw is None and default is not None:
        raw = default
    if not isinstance(raw, str) or not raw:
        raise ValueError("path must be a non-empty string")
    if len(raw) > _PATH_MAX:
        # Before any Path or OSError copies it: a hostile 100 MB path would be copied several times.
        raise ValueError(f"path is longer than {_PATH_MAX} characters")
    path = Path(raw).expanduser()
    return path if path.is_absolute() else ctx.cwd / path


def _int_arg(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"{name} must be an integer")
    return max(low, min(high, int(value)))


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
)  # fmt: skip


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message: ``a FIFO``, ``a directory`` ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegularFile(OSError):
    """A path a file tool will not read: opening or reading it could block forever (a FIFO, a device)."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(f"{path} is {file_kind(mode)}, not a regular file")


def open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file, never blocking on the open.

    Symlinks are followed (a link to a regular file reads that file); the check is ``fstat`` of what
    was opened, so a path swapped for a FIFO between a check and the open is still refused.
    ``O_NONBLOCK`` makes the open of a FIFO with no writer return at once instead of waiting for one
    (docs/reliability.md, "Nothing wedges dsh").
    """
    mode = os.stat(path).st_mode  # a stat never blocks, and names the kind (a socket cannot be opened)
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


READ_STAMPS_KEY = "read_file.stamps"  # session_state: {real path: (mtime_ns, size)} when the model read it


def file_stamp(info: os.stat_result) -> tuple[int, int]:
    """What says a file changed since it was read: its modification time (ns) and size."""
    return (info.st_mtime_ns, info.st_size)


def read_stamps(ctx: ToolContext) -> dict[str, tuple[int, int]]:
    """The files the model has read this session, as they were then (the edit tools refuse stale ones)."""
    stamps = ctx.session_state.get(READ_STAMPS_KEY)
    if not isinstance(stamps, dict):
        stamps = ctx.session_state[READ_STAMPS_KEY] = {}
    return stamps


def _read_file_sync(
    path: Path, offset: int, limit: int, stop: threading.Event
) -> tuple[ToolOutput, tuple[str, tuple[int, int]] | None]:
    try:
        file = open_regular(path)
    except NotRegularFile as exc:
        return ToolOutput(f"Error: {exc}", is_error=True), None
    with file:
        stamp = (os.path.realpath(path), file_stamp(os.fstat(file.fileno())))
        return _read_lines(file, path, offset, limit, stop), stamp


def _read_lines(file: BinaryIO, path: Path, offset: int, limit: int, stop: threading.Event) -> ToolOutput:
    if b"\0" in file.read(8192):
        return ToolOutput(f"Error: {path} looks like a binary file", is_error=True)
    file.seek(0)
    lines: list[str] = []
    size = 0
    number = 0
    more = False
    for number, raw in enumerate(file, start=1):
        if number % 4096 == 0 and stop.is_set():
            break  # the turn was cancelled: an abandoned read stops at its next check
        if number < offset:
            continue
        if len(lines) >= limit or size >= READ_LIMIT_BYTES:
            more = True
            break
        line = raw.decode("utf-8", "replace")
        lines.append(line)
        size += len(raw)
    text = "".join(lines)
    if not lines and offset > 1:
        return ToolOutput(f"(no lines at offset {offset}; the file has {number} lines)")
    if more:
        text += f"\n[file continues; read more with offset={offset + len(lines)}]"
    return ToolOutput(text if text else "(empty file)")


async def _read_file(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = _resolve(ctx, args.get("path"))
    offset = _int_arg(args, "offset", 1, 1, 1 << 40)
    limit = _int_arg(args, "limit", READ_LIMIT_LINES, 1, READ_LIMIT_LINES)
    stop = threading.Event()
    try:
        # Abandoned on cancel so Ctrl-C ends the turn at once; the thread sees ``stop`` and ends.
        output, stamp = await anyio.to_thread.run_sync(
            _read_file_sync, path, offset, limit, stop, abandon_on_cancel=True
        )
    finally:
        stop.set()
    if stamp is not None and not output.is_error:
        read_stamps(ctx)[stamp[0]] = stamp[1]
    return output


def read_file_tool() -> Tool:
    return Tool(
        "read_file",
        "Read a text file. Relative paths are resolved against the session's working directory. "
        f"Returns up to {READ_LIMIT_LINES} lines starting at `offset` (1-based).",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file to read"},
                "offset": {"type": "integer", "description": "first line to read, 1-based", "minimum": 1},
                "limit": {"type": "integer", "description": "maximum number of lines", "minimum": 1},
            },
            "required": ["path"],
        },
        _read_file,
        concurrency_safe=True,
    )


def _list_dir_sync(path: Path) -> ToolOutput:
    with os.scandir(path) as entries:
        names = sorted(
            (entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name) for entry in entries
        )
    if not names:
        return ToolOutput("(empty directory)")
    shown = names[:LIST_LIMIT]
    text = "\n".join(shown)
    if len(names) > LIST_LIMIT:
        text += f"\n[… {len(names) - LIST_LIMIT} more entries]"
    return ToolOutput(text)


async def _list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    path = _resolve(ctx, args.get("path"), default=".")
    return await anyio.to_thread.run_sync(_list_dir_sync, path)


def list_dir_tool() -> Tool:
    return Tool(
        "list_dir",
        "List a directory (directories end with /). Defaults to the working directory.",
        {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "directory to list (default .)"}},
        },
        _list_dir,
        concurrency_safe=True,
    )


def _search_sync(
    pattern: re.Pattern[str], root: Path, glob: str | None, limit: int, stop: threading.Event
) -> ToolOutput:
    matches: list[str] = []
    base = root if root.is_dir() else root.parent
    files = [root] if root.is_file() else None
    truncated = False

    def candidates() -> Iterator[Path]:
        if files is not None:
            yield from files
            return
        for directory, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in sorted(filenames):
                yield Path(directory, name)

    for path in candidates():
        if stop.is_set():
            break
        if glob and not path.match(glob):
            continue
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode) or info.st_size > SEARCH_MAX_FILE_BYTES:
                continue  # a FIFO or device is never opened: its open or read could block forever
            with open_regular(path) as file:
                data = file.read(SEARCH_MAX_FILE_BYTES + 1)
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if pattern.search(line):
                shown = line if len(line) <= SEARCH_LINE_CHARS else line[:SEARCH_LINE_CHARS] + "…"
                try:
                    name = str(path.relative_to(base))
                except ValueError:
                    name = str(path)
                matches.append(f"{name}:{number}: {shown}")
                if len(matches) >= limit:
                    truncated = True
                    break
        if truncated:
            break
    if not matches:
        return ToolOutput("no matches")
    text = "\n".join(matches)
    if truncated:
        text += f"\n[stopped after {limit} matches]"
    return ToolOutput(text)


async def _search_text(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raw = args.get("pattern")
    if not isinstance(raw, str) or not raw:
        raise ValueError("pattern must be a non-empty string")
    flags = re.IGNORECASE if args.get("ignore_case") else 0
    try:
        pattern = re.compile(raw, flags)
    except re.error as exc:
        return ToolOutput(f"Error: invalid regular expression: {exc}", is_error=True)
    root = _resolve(ctx, args.get("path"), default=".")
    glob = args.get("glob") if isinstance(args.get("glob"), str) and args.get("glob") else None
    limit = _int_arg(args, "max_results", SEARCH_LIMIT, 1, 1000)
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(
            _search_sync, pattern, root, glob, limit, stop, abandon_on_cancel=True
        )
    finally:
        stop.set()  # an abandoned walk stops at its next file


def search_text_tool() -> Tool:
    return Tool(
        "search_text",
        "Search files under a directory for a regular expression (Python syntax). Output lines are "
        "`path:line: text`. Skips .git, virtualenvs, node_modules, binary and very large files.",
        {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "regular expression"},
                "path": {"type": "string", "description": "directory or file to search (default .)"},
                "glob": {"type": "string", "description": "only files whose path matches, e.g. *.py"},
                "ignore_case": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1},
            },
            "required": ["pattern"],
        },
        _search_text,
        concurrency_safe=True,
    )


def _format_command(result: CommandResult, timeout: float) -> ToolOutput:
    text = result.output if result.output else "(no output)"
    if not text.endswith("\n"):
        text += "\n"
    if result.timed_out:
        return ToolOutput(text + f"[timed out after {timeout:g}s; the command was killed]", is_error=True)
    if result.signal is not None:
        return ToolOutput(text + f"[killed by {result.signal}]", is_error=True)
    return ToolOutput(text + f"[exit code: {result.exit_code}]", is_error=result.exit_code != 0)


def run_shell_tool(approver: Approver | None = None, *, shell: str = "/bin/sh") -> Tool:
    """``run_shell``: asks ``approver`` (else the context's approver) before every command.

    ``always`` approves shell commands for the rest of the session. No approver, a failing approver, or
    any answer but ``yes``/``always`` denies the command.
    """

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("command must be a non-empty string")
        timeout = float(_int_arg(args, "timeout_s", int(SHELL_TIMEOUT), 1, int(SHELL_MAX_TIMEOUT)))
        if not ctx.session_state.get(_ALWAYS_KEY):
            ask = approver or ctx.approver
            if ask is None:
                return ToolOutput(SHELL_NO_APPROVER, is_error=True)
            try:
                answer = await ask(command)
            except Exception as exc:
                return ToolOutput(f"{SHELL_DENIED} (approval failed: {error_chain(exc)})", is_error=True)
            if answer == "always":
                ctx.session_state[_ALWAYS_KEY] = True
            elif answer != "yes":
                return ToolOutput(SHELL_DENIED, is_error=True)
        result = await run_command(
            [shell, "-c", command],
            cwd=ctx.cwd,
            timeout=timeout,
            output_limit=SHELL_OUTPUT_LIMIT,
        )
        return _format_command(result, timeout)

    return Tool(
        "run_shell",
        "Run a shell command (/bin/sh -c) in the working directory. The user approves each command. "
        "stdout and stderr are merged; long output keeps its start and end. Default timeout 120 s.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command line"},
                "timeout_s": {"type": "integer", "description": "seconds before it is killed (max 600)"},
            },
            "required": ["command"],
        },
        run,
        concurrency_safe=False,
    )


def default_tools(approver: Approver | None = None, *, allow_edits: bool = False) -> ToolRegistry:
    """The developer tools: read_file, list_dir, search_text, write_file, edit_file, run_shell.

    ``approver`` answers for run_shell and the edit tools; ``allow_edits`` lets the edit tools write
    inside the working tree when there is no approver (piped and ``-p`` runs).
    """
    from dsh.agent_loop.tools.edits import edit_file_tool, write_file_tool  # it builds on this module

    return ToolRegistry([
        read_file_tool(), list_dir_tool(), search_text_tool(),
        write_file_tool(approver, allow_unattended=allow_edits), edit_file_tool(approver, allow_unattended=allow_edits),
        run_shell_tool(approver),
    ])
