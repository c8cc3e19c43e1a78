"""PreToolUse and PostToolUse (docs/hooks.md): what the tool runner (agent_loop/tool_calls.py) asks the session's
:class:`~dsh.agent_loop.hook_run.Hooks` before and after each call. Apart from agent_loop/hook_run.py because it
speaks the tools' language (their results, their approval), which loads only with the agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.agent_loop.hook_run import Hooks
from dsh.agent_loop.tools.registry import ToolContext, ToolOutput, ask_approval
from dsh.llm import ToolCall

__all__ = ["ToolHooks"]


class ToolHooks:
    """The :class:`~dsh.agent_loop.tools.registry.CallHooks` of a session's hooks."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks

    def __bool__(self) -> bool:
        return bool(self._hooks)

    async def before_tool(self, call: ToolCall, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput | None:
        """PreToolUse: ``None`` lets the call run; else the failed result the model gets instead."""
        outcome = await self._hooks.fire("PreToolUse", {"tool_use_id": call.id}, tool=call.name, arguments=arguments,
                                  target=call.name)
        if outcome.ask is not None and outcome.refusal is None:
            denial = await ask_approval(ctx, ctx.approver, f"{call.name}: {outcome.ask}", always_key=None,
                                        denied=f"Error: the user denied this {call.name} call",
                                        no_approver=f"Error: a hook asks before {call.name} and no one can answer")
            return denial
        if outcome.refusal is None:
            return None
        diagnostic = outcome.shown[-1] if outcome.shown else f"{call.name} blocked by a PreToolUse hook"
        return ToolOutput(outcome.refusal, is_error=True, diagnostic=diagnostic, cause=outcome.cause)

    async def after_tool(self, call: ToolCall, arguments: Mapping[str, Any], output: ToolOutput) -> ToolOutput:
        """PostToolUse: a hook that blocks adds its reason to what the model is told (the call has run)."""
        response = {"output": output.text, "is_error": output.is_error}
        outcome = await self._hooks.fire("PostToolUse", {"tool_use_id": call.id, "tool_response": response},
                                  tool=call.name, arguments=arguments, target=call.name)
        text = output.text
        if outcome.refusal is not None:
            text += f"\n[PostToolUse hook: {outcome.refusal}]"
        diagnostic = output.diagnostic or (outcome.shown[-1] if outcome.shown else None)
        if text == output.text and diagnostic == output.diagnostic:
            return output
        return ToolOutput(text, output.is_error, diagnostic, output.images, output.cause or outcome.cause)
