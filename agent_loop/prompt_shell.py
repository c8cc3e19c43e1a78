"""``!command`` at the prompt line (docs/prompt.md, "Running a command: !"): :class:`PromptShell`.

The user typed the command, so nobody is asked (under ``--permission-mode plan`` too), but it runs as ``run_shell``
runs one (agent_loop/tools/shell.py): ``/bin/sh -c`` in the session's cwd, the child environment's allowlist, its own
process group, a timeout, output bounded to its first and last 16 KiB, and under bubblewrap when ``sandbox =
"bwrap"`` is configured (docs/safety.md). The output is kept, not sent: a prompt that holds the marker ``@!`` (as a
word of its own) gets it as a fenced block after its text and its mentions' blocks, in the format of an ``@path``
mention's (agent_loop/mentions.py). Each run is a ``shell/run`` record in the session log: the command masked and
cut, how it ended, how long it took and how many bytes it wrote; never the output, which the model sees only in a
user message that attached it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from dsh.agent_loop.events import ShellRun
from dsh.agent_loop.mentions import fenced
from dsh.agent_loop.sandbox import SandboxRefused, sandbox_of
from dsh.agent_loop.tools.shell import (
    SANDBOXED,
    SHELL_OUTPUT_LIMIT,
    SHELL_TIMEOUT,
    CommandResult,
    run_command,
    run_sandboxed,
)
from dsh.llm.redact import Redactor

__all__ = [
    "ATTACH_HINT",
    "MARKER",
    "NOTHING_KEPT",
    "NO_LAST_COMMAND",
    "PromptShell",
    "Ran",
    "has_marker",
    "unmarked",
]

MARKER = "@!"  # a prompt holding it as a word gets the last ! command's output
ATTACH_HINT = "@! in your next prompt sends this output with it"
NOTHING_KEPT = "@!: no ! command has run yet: nothing to send"
NO_LAST_COMMAND = "!!: no ! command has run yet"
COMMAND_CHARS = 200  # of a command, in a block's header and the log
_MARKER = re.compile(r"(?<!\S)@!(?!\S)")
# The prefilled marker before a command typed after it: the command runs (or is sent) without it.
_MARKED_COMMAND = re.compile(r"^\s*@!\s+(?=[!/\\])")


def has_marker(prompt: str) -> bool:
    return _MARKER.search(prompt) is not None


def unmarked(line: str) -> str:
    """``line`` without the prefilled ``@!`` when a ``!``, ``/`` or ``\\!`` line follows it (they are no prompt)."""
    return _MARKED_COMMAND.sub("", line, count=1)


@dataclass(frozen=True, slots=True)
class Ran:
    """One ``!`` run: the command as shown (masked, one line, cut), its masked output and status line."""

    shown: str
    output: str
    status: str
    failed: bool


def _status(event: ShellRun, timeout: float) -> str:
    """run_shell's status line (agent_loop/tools/shell.py); the renderer words a logged run alike."""
    mark = SANDBOXED if event.sandboxed else ""
    if event.timed_out:
        return f"[timed out after {timeout:g}s; the command was killed]{mark}"
    if event.signal is not None:
        return f"[killed by {event.signal}]{mark}"
    return f"[exit code: {event.exit_code}]{mark}"


class PromptShell:
    """The ``!`` commands of one shell: the last one (for ``!!``) and the last output (for ``@!``)."""

    def __init__(self, *, sandbox: str | None, network: bool, timeout: float = SHELL_TIMEOUT,
                 shell: str = "/bin/sh") -> None:
        self.sandbox = sandbox_of(sandbox, network)  # the run_shell tool's own (one per process and setting)
        self.timeout = timeout
        self.shell = shell
        self.last_command: str | None = None
        self.kept: Ran | None = None

    async def run(self, command: str, *, cwd: str, redactor: Redactor) -> tuple[Ran, ShellRun | None]:
        """Run ``command``; what to show (kept for ``@!``) and the record to log (None: the command did not start,
        and its status line says why). Cancellation kills the child's group and is re-raised."""
        self.last_command = command
        shown = _one_line(redactor(command))
        if len(shown) > COMMAND_CHARS:
            shown = shown[:COMMAND_CHARS] + "…"
        argv = [self.shell, "-c", command]
        started = time.monotonic()
        try:
            if self.sandbox is not None:
                result = await run_sandboxed(self.sandbox, argv, cwd=cwd, timeout=self.timeout,
                                             output_limit=SHELL_OUTPUT_LIMIT)
            else:
                result = await run_command(argv, cwd=cwd, timeout=self.timeout, output_limit=SHELL_OUTPUT_LIMIT)
        except (OSError, SandboxRefused) as exc:  # not started: no record but this line
            ran = Ran(shown, "", f"[not run: {redactor(_one_line(str(exc)))}]", True)
            self.kept = ran
            return ran, None
        event = ShellRun(shown, result.exit_code, result.signal, result.timed_out,
                         round(time.monotonic() - started, 3), _written(result), self.sandbox is not None)
        ran = Ran(shown, redactor(result.output), _status(event, self.timeout),
                  result.timed_out or result.signal is not None or result.exit_code != 0)
        self.kept = ran
        return ran, event

    def attachment(self) -> str:
        """The kept run as a block for the user message (after the prompt's own text), or ``""``."""
        ran = self.kept
        if ran is None:
            return ""
        lines = ran.output.count("\n") + (0 if not ran.output or ran.output.endswith("\n") else 1)
        counted = f"{lines} line" + ("" if lines == 1 else "s")
        status = ran.status.replace("[", "").replace("]", "")
        return f"\n\n!{ran.shown} ({counted} of output, {status}):\n{fenced(ran.output)}"


def _written(result: CommandResult) -> int:
    """The bytes the command wrote: all of them when none were dropped (the text decoded with replacement)."""
    if result.dropped_bytes:
        return SHELL_OUTPUT_LIMIT // 2 * 2 + result.dropped_bytes
    return len(result.output.encode("utf-8", "surrogatepass"))


def _one_line(text: str) -> str:
    return " ".join(text.split())

