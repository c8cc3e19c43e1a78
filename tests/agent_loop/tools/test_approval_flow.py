"""The one approval flow (registry.ask_approval) and the tools that share it: run_shell, write_file/edit_file,
MCP tools. Same answers, same texts: no approver, a denial, "always" kept per tool, an approver that raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.mcp.tools import MCP_DENIED, MCP_NO_APPROVER, McpToolSpec, build_tool
from dsh.agent_loop.tools import default_tools, run_tool_call
from dsh.agent_loop.tools.edits import EDIT_DENIED, EDIT_NO_APPROVER
from dsh.agent_loop.tools.registry import McpCallRequest, Tool, ToolContext, ToolOutput, ToolRegistry, ask_approval
from dsh.agent_loop.tools.shell import SHELL_DENIED, SHELL_NO_APPROVER
from dsh.llm import ToolCall

pytestmark = pytest.mark.anyio

DENIED = "Error: denied"
NOBODY = "Error: nobody to ask"


class Answers:
    """Answers from a list, in turn (an exception in it is raised), and keeps what it was asked."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.asked: list[object] = []

    async def __call__(self, request: object) -> Any:
        self.asked.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _ctx(cwd: Path = Path(".")) -> ToolContext:
    return ToolContext(cwd=cwd, turn=1, notify=lambda event: None)


def _failed_prompt() -> RuntimeError:
    try:
        raise OSError(5, "tty gone")
    except OSError as exc:
        try:
            raise RuntimeError("prompt failed") from exc
        except RuntimeError as outer:
            return outer


async def _ask(ctx: ToolContext, ask: Any, **options: Any) -> ToolOutput | None:
    arguments: dict[str, Any] = {"always_key": "t.always", "denied": DENIED, "no_approver": NOBODY, **options}
    return await ask_approval(ctx, ask, "the request", **arguments)


# --- the helper -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "result"),
    [("yes", None), ("no", ToolOutput(DENIED, is_error=True)), (None, ToolOutput(DENIED, is_error=True)),
     ("YES", ToolOutput(DENIED, is_error=True)), (_failed_prompt(),
      ToolOutput(f"{DENIED} (approval failed: prompt failed: [Errno 5] tty gone)", is_error=True))],
    ids=["yes", "no", "none", "not-exactly-yes", "raises"],
)
async def test_one_answer_gives_one_result_and_keeps_nothing(answer: object, result: ToolOutput | None) -> None:
    ctx, ask = _ctx(), Answers(answer)
    assert await _ask(ctx, ask) == result
    assert ask.asked == ["the request"] and ctx.session_state == {}


async def test_no_approver_is_the_no_approver_denial_or_goes_ahead_when_there_is_none() -> None:
    assert await _ask(_ctx(), None) == ToolOutput(NOBODY, is_error=True)
    assert await _ask(_ctx(), None, no_approver=None) is None


async def test_always_is_kept_under_its_key_and_covers_later_requests() -> None:
    ctx, ask = _ctx(), Answers("always")
    assert await _ask(ctx, ask) is None
    assert ctx.session_state == {"t.always": True}
    assert await _ask(ctx, ask) is None and await _ask(ctx, None) is None  # not asked again, even with nobody
    assert ask.asked == ["the request"]
    assert await _ask(ctx, Answers("no"), always_key="other.always") == ToolOutput(DENIED, is_error=True)


async def test_without_a_key_always_is_a_yes_that_is_not_kept() -> None:
    ctx, ask = _ctx(), Answers("always", "no")
    assert await _ask(ctx, ask, always_key=None) is None
    assert ctx.session_state == {}
    assert await _ask(ctx, ask, always_key=None) == ToolOutput(DENIED, is_error=True)


async def test_a_request_always_does_not_cover_is_asked_but_its_always_is_kept() -> None:
    ctx = _ctx()
    ctx.session_state["t.always"] = True
    ask = Answers("no", "always")
    assert await _ask(ctx, ask, always_covers=False) == ToolOutput(DENIED, is_error=True)
    assert await _ask(ctx, ask, always_covers=False) is None
    assert len(ask.asked) == 2 and ctx.session_state == {"t.always": True}


# --- every tool uses it: the same flow, each tool's texts -------------------------------------------


async def _called(spec: McpToolSpec, arguments: dict[str, Any]) -> ToolOutput:
    return ToolOutput(f"called {spec.tool} with {arguments}")


def _mcp_tool() -> Tool:
    spec = McpToolSpec("srv", "write", "mcp__srv__write", "Writes.", {"type": "object", "properties": {}}, False)
    return build_tool(spec, _called, auto=lambda: False)


def _tool(name: str, approver: Any) -> Tool:
    if name == "mcp":
        return _mcp_tool()
    tool = default_tools(approver).get(name)
    assert tool is not None
    return tool


_CASES = {
    "run_shell": ({"command": "echo hi"}, SHELL_DENIED, SHELL_NO_APPROVER),
    "write_file": ({"path": "f.txt", "content": "x\n"}, EDIT_DENIED, EDIT_NO_APPROVER),
    "mcp": ({"text": "x"}, MCP_DENIED, MCP_NO_APPROVER),
}


async def _run(name: str, tmp_path: Path, ask: Any, ctx: ToolContext | None = None) -> ToolOutput:
    """One call through the registry, as the agent makes it; the MCP tool asks the context's approver."""
    ctx = ctx or _ctx(tmp_path)
    if name == "mcp":
        ctx.approver = ask
    tool = _tool(name, ask)
    arguments, _, _ = _CASES[name]
    return await run_tool_call(ToolRegistry([tool]), ToolCall("c1", tool.name, json.dumps(arguments)), ctx)


@pytest.mark.parametrize("name", list(_CASES))
async def test_each_tool_denies_alike_in_its_own_words(name: str, tmp_path: Path) -> None:
    _, denied, nobody = _CASES[name]
    assert await _run(name, tmp_path, None) == ToolOutput(nobody, is_error=True)
    assert await _run(name, tmp_path, Answers("no")) == ToolOutput(denied, is_error=True)
    raised = await _run(name, tmp_path, Answers(_failed_prompt()))
    assert raised == ToolOutput(f"{denied} (approval failed: prompt failed: [Errno 5] tty gone)", is_error=True)
    assert not (tmp_path / "f.txt").exists()


@pytest.mark.parametrize(("name", "key"), [("run_shell", "run_shell.always"), ("write_file", "write_file.always"),
                                           ("mcp", 'mcp.always.["srv", "write"]')])
async def test_each_tool_keeps_always_under_its_own_key(name: str, key: str, tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ask = Answers("always")
    first = await _run(name, tmp_path, ask, ctx)
    assert not first.is_error, first.text
    assert ctx.session_state.get(key) is True
    if name == "mcp":
        assert ask.asked == [McpCallRequest("srv", "write", {"text": "x"})]
        assert (await _run(name, tmp_path, None, ctx)).text == "called write with {'text': 'x'}"
