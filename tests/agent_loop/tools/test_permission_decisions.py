"""The permission mode inside the one approval flow (docs/safety.md, "Permission modes"): real tools on real
files, a scripted approver. The mode is read at each call; nothing outranks plan's refusal; accept-edits and
auto keep asking where the edit resolves outside the tree (a symlink) or lands in a git directory."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.permissions import PLAN_REFUSAL, Mode, Permissions
from dsh.agent_loop.tools import default_tools, run_tool_call
from dsh.agent_loop.tools.edits import EDIT_NO_APPROVER
from dsh.agent_loop.tools.registry import ToolContext
from dsh.llm import ToolCall

pytestmark = pytest.mark.anyio


class Yes:
    def __init__(self) -> None:
        self.asked: list[object] = []

    async def __call__(self, request: object) -> Any:
        self.asked.append(request)
        return "always"


def _call(name: str, arguments: str) -> ToolCall:
    return ToolCall("c1", name, arguments)


async def test_the_mode_is_read_at_each_call_and_plan_outranks_an_earlier_always(tmp_path: Path) -> None:
    permissions = Permissions()
    approver = Yes()
    ctx = ToolContext(cwd=tmp_path, turn=1, notify=lambda event: None, approver=approver, permissions=permissions)
    tools = default_tools(allow_edits=True)
    first = await run_tool_call(tools, _call("run_shell", '{"command": "echo one > one.txt"}'), ctx)
    assert not first.is_error and len(approver.asked) == 1  # asked, answered "always"
    permissions.cycle()
    permissions.cycle()  # default -> accept-edits -> plan
    assert permissions.mode is Mode.PLAN
    refused = await run_tool_call(tools, _call("run_shell", '{"command": "echo two > two.txt"}'), ctx)
    assert (refused.text, refused.is_error) == (PLAN_REFUSAL, True)
    write = await run_tool_call(tools, _call("write_file", '{"path": "w.txt", "content": "x"}'), ctx)
    assert write.text == PLAN_REFUSAL  # --allow-edits does not override it either
    assert not (tmp_path / "two.txt").exists() and not (tmp_path / "w.txt").exists()
    assert len(approver.asked) == 1


@pytest.mark.parametrize("mode", [Mode.ACCEPT_EDITS, Mode.AUTO])
async def test_unasked_edits_stay_inside_the_tree_and_out_of_git_directories(tmp_path: Path, mode: Mode) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside.txt"
    subprocess.run(["git", "init", "-q", str(tree)], check=True, timeout=60)
    (tree / "link.txt").symlink_to(outside)  # inside by name, outside once resolved
    ctx = ToolContext(cwd=tree, turn=1, notify=lambda event: None,
                      permissions=Permissions(mode, auto_allowed=True))
    tools = default_tools()  # no approver, no --allow-edits: a -p run
    inside = await run_tool_call(tools, _call("write_file", '{"path": "new.txt", "content": "in\\n"}'), ctx)
    through_link = await run_tool_call(tools, _call("write_file", '{"path": "link.txt", "content": "out\\n"}'), ctx)
    hook = await run_tool_call(tools, _call("write_file", '{"path": ".git/hooks/pre-commit", "content": "x"}'), ctx)
    assert inside.text == "created new.txt (1 line)"
    assert through_link.text == EDIT_NO_APPROVER  # outside the tree: asks, and no one can answer
    assert hook.text == ("Error: .git/hooks/pre-commit is a git hook, which runs on git commands; unattended edits "
                         "stay out of git directories")
    assert not outside.exists() and not (tree / ".git" / "hooks" / "pre-commit").exists()
