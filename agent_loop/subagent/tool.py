"""The ``subagent`` tool: delegate a task to a configured subagent, in the foreground or as a job.

Arguments ``{description, prompt, provider?, run_in_background?}``. ``provider`` is a configured
subagent name (``[subagents.NAME]``); without it the first configured one is used.

Foreground results (exact):

* completed: the subagent's output;
* otherwise an error result whose text is one of ``subagent run failed`` / ``subagent run was
  cancelled`` / ``subagent run hit its token limit before finishing`` / ``subagent declined the task``,
  then ``\\nDiagnostic: <diagnostic>`` when there is one, then
  ``\\nPartial output before the run ended:\\n<text>`` when there is any. The same diagnostic is also
  the tool result's ``diagnostic`` field, which the REPL draws on its own highlighted line.

Background: ``started background subagent job subagent-1``; see :mod:`dsh.agent_loop.subagent.jobs`.

:class:`SubagentToolkit` bundles the configured providers, one :class:`~dsh.agent_loop.subagent.jobs.JobManager`
and the four tools (``subagent``, ``job_output``, ``job_list``, ``job_kill``) for a front end; ``async
with`` it for the session (background jobs live in that block), and show its :attr:`~SubagentToolkit.hints`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dsh.agent_loop.permissions import Action
from dsh.agent_loop.subagent import ParentContext, build_providers
from dsh.agent_loop.subagent.jobs import JobManager, job_tools, run_subagent
from dsh.agent_loop.subagent.result import FAILURE_HEADLINES, SubagentRequest, SubagentResult
from dsh.agent_loop.subagent.run import AnyProvider
from dsh.agent_loop.tools import Tool, ToolContext, ToolOutput
from dsh.agent_loop.tools.registry import mode_refusal

__all__ = [
    "FAILURE_HEADLINES",
    "SubagentToolkit",
    "foreground_output",
    "subagent_tool",
]

log = logging.getLogger(__name__)

NO_OUTPUT = "(the subagent returned no output)"


def foreground_output(result: SubagentResult) -> ToolOutput:
    """The tool result for a finished foreground run (unknown stop reasons count as failure)."""
    if result.stop_reason == "completed":
        # A host-side warning rides in the display-only diagnostic field: the model never sees it.
        return ToolOutput(result.output or NO_OUTPUT, diagnostic=result.warning)
    text = FAILURE_HEADLINES.get(result.stop_reason, FAILURE_HEADLINES["error"])
    if result.diagnostic:
        text += f"\nDiagnostic: {result.diagnostic}"
    if result.output:
        text += f"\nPartial output before the run ended:\n{result.output}"
    shown = "\n".join(line for line in (result.diagnostic, result.warning) if line) or None
    return ToolOutput(text, is_error=True, diagnostic=shown, cause=result.cause)


def _error(text: str) -> ToolOutput:
    return ToolOutput(text, is_error=True)


def subagent_tool(providers: Mapping[str, AnyProvider], jobs: JobManager | None = None) -> Tool:
    """The ``subagent`` tool over ``providers`` (by configured name); background runs need ``jobs``."""
    names = list(providers)

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        description, prompt = args.get("description"), args.get("prompt")
        if not isinstance(description, str) or not description.strip():
            return _error("subagent: description must be a non-empty string")
        if not isinstance(prompt, str) or not prompt.strip():
            return _error("subagent: prompt must be a non-empty string")
        if not names:
            return _error("subagent: no subagents are configured (add a [subagents.NAME] table)")
        # A subagent edits and runs commands outside the sandbox: plan mode refuses it (docs/safety.md).
        refusal = mode_refusal(ctx, Action.SUBAGENT)
        if refusal is not None:
            return refusal
        choice = args.get("provider") or names[0]
        provider = providers.get(choice) if isinstance(choice, str) else None
        if provider is None:
            # The requested name is tool input: it is not echoed back.
            return _error(f"subagent: unknown provider (configured: {', '.join(names)})")
        background = args.get("run_in_background", False)
        if not isinstance(background, bool):
            return _error("subagent: run_in_background must be true or false")
        request = SubagentRequest(description=description, prompt=prompt, cwd=str(ctx.cwd))
        if background:
            if jobs is None or not jobs.available:
                return _error("subagent: background jobs are not available here")
            job = await jobs.spawn(provider, request, post_notice=ctx.post_notice)
            return ToolOutput(f"started background subagent job {job.id}")
        return foreground_output(await run_subagent(provider, request))

    return Tool(
        "subagent",
        _description(providers),
        {
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) label for the task"},
                "prompt": {"type": "string", "description": "The complete task for the subagent"},
                "provider": {
                    "type": "string",
                    "description": "Which configured subagent to use (default: the first)",
                    **({"enum": names} if names else {}),
                },
                "run_in_background": {
                    "type": "boolean",
                    "description": "Start it as a background job and return at once",
                },
            },
            "required": ["description", "prompt"],
        },
        run,
        concurrency_safe=True,  # each run is its own process; parallel delegation is the point
    )


def _description(providers: Mapping[str, AnyProvider]) -> str:
    """The tool's description: what a subagent is, then each one's name, and what it is for when its table or
    agent file says (the model picks by it)."""
    listed = ", ".join(providers) if providers else "none configured"
    described = "".join(f"\n- {name}: {provider.description}" for name, provider in providers.items()
                        if provider.description)
    return ("Delegate a self-contained task to a subagent running in its own process. It starts with no "
            "memory of this conversation: put everything it needs in `prompt`. Returns its final answer; "
            "a failed run returns a short diagnostic and any partial output. With run_in_background=true "
            "it returns a job id at once (read it with job_output; you are told when it finishes). "
            f"Subagents: {listed}." + (f" What each is for:{described}" if described else ""))


class SubagentToolkit:
    """Configured providers + a job manager + the tools, for one front end. ``async with`` it."""

    def __init__(self, providers: Mapping[str, AnyProvider], jobs: JobManager | None = None) -> None:
        self.providers = dict(providers)
        self.jobs = jobs if jobs is not None else JobManager()

    @classmethod
    def from_config(
        cls, tables: Mapping[str, Mapping[str, Any]], parent: ParentContext | None = None
    ) -> SubagentToolkit:
        """Build every ``[subagents.NAME]`` table. Raises :class:`SubagentConfigError` (a usage error:
        the message names the table) for a bad name or unknown ``provider``."""
        return cls(build_providers(tables, parent))

    @property
    def hints(self) -> list[str]:
        """One line per configured provider whose optional SDK is missing (the REPL shows them)."""
        return [provider.hint for provider in self.providers.values() if provider.hint]

    def tools(self) -> list[Tool]:
        """``subagent`` plus the job tools; empty when no subagent is configured."""
        if not self.providers:
            return []
        return [subagent_tool(self.providers, self.jobs), *job_tools(self.jobs)]

    def jobs_summary(self) -> list[str]:
        return self.jobs.jobs_summary()

    async def __aenter__(self) -> SubagentToolkit:
        await self.jobs.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.jobs.__aexit__(*exc_info)
