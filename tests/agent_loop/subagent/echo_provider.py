"""A fifth provider, as small as one gets: a child process that echoes the task back.

It is the worked example of ``docs/adding-a-provider.md``; ``test_adding_a_provider.py`` registers it
with one line and drives it through the ``subagent`` tool.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.agent_loop.process import ManagedProcess, ProcessStartError, read_line
from dsh.agent_loop.subagent import ConfigTable, ParentContext, diagnostics
from dsh.agent_loop.subagent.diagnostics import Failure
from dsh.agent_loop.subagent.run import Outcome, Provider, Run, configured

# The child: answer the first line of stdin, or exit 3 when asked to.
_CHILD = "import sys; task = sys.stdin.readline().strip(); sys.exit(3) if task == 'exit' else print(task)"


class Stage(diagnostics.Stage):
    START = "start"
    REPLY = "reply"


class Category(diagnostics.Category):
    CONFIGURATION = "configuration"
    PROCESS_START = "process-start"
    PROCESS_EXIT = "process-exit"


@dataclass(frozen=True, slots=True)
class EchoSettings:
    prefix: str = ""
    env: Mapping[str, str] = field(default_factory=dict)  # every provider's settings have it: it is masked


def from_config(name: str, table: Mapping[str, Any], parent: ParentContext | None = None) -> Provider[EchoSettings]:
    def parse() -> EchoSettings:
        read = ConfigTable.checked(name, table, frozenset({"provider", "prefix", "env"}))
        return EchoSettings(prefix=read.string("prefix") or "", env=read.env())

    return configured(name, EchoRun, parse)


class EchoRun(Run[EchoSettings]):
    configuration = Failure(Stage.START, Category.CONFIGURATION)

    async def execute(self) -> Outcome:
        argv, env = [sys.executable, "-c", _CHILD], {**self.settings.env, **self.request.env}
        try:
            async with ManagedProcess(argv, env=env, cwd=self.request.cwd) as child:
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write(self.request.prompt.encode() + b"\n")
                await child.stdin.drain()
                answer = await read_line(child.stdout)
                exit_status = await child.wait_exit(timeout=2.0)
        except ProcessStartError as exc:
            return Outcome("error", failure=Failure(Stage.START, Category.PROCESS_START, cause=exc))
        if answer is None:
            return Outcome("error", failure=Failure(Stage.REPLY, Category.PROCESS_EXIT, exit_status=exit_status))
        return Outcome("completed", self.settings.prefix + answer.decode())
