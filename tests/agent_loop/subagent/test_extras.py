"""A configured provider whose optional SDK is missing: one install hint on screen, a configuration failure.

The REPL tests run the real ``python -m dsh.repl`` in piped mode, in a child Python that has the SDK
hidden (``sys.modules[NAME] = None`` makes ``import NAME`` fail, as in an install without the extra).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsh.agent_loop.subagent import build_provider
from dsh.agent_loop.subagent.extras import missing_extra, missing_extra_hint
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.tool import SubagentToolkit
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.reliability.dsh_harness import make_home, run_dsh

ACP_HINT = "subagent probe (acp) needs the acp extra: pip install 'dsh-agent[acp]'"
CLAUDE_HINT = "subagent helper (claude-code) needs the claude extra: pip install 'dsh-agent[claude]'"
CONFIG = f"""
[subagents.probe]
provider = "acp"
command = ["{sys.executable}", "-c", "pass"]

[subagents.helper]
provider = "claude-code"
"""


def _without(*modules: str) -> tuple[str, ...]:
    """A launcher: ``python -c`` that hides ``modules`` and then runs ``python -m dsh.repl``."""
    hide = "; ".join(f"sys.modules[{module!r}] = None" for module in modules)
    return ("-c", f"import runpy, sys; {hide}; runpy.run_module('dsh.repl', run_name='__main__', alter_sys=True)")


def _delegate(provider: str) -> Behaviour:
    arguments = json.dumps({"description": "d", "prompt": "p", "provider": provider})
    return Behaviour("tool_call", id=f"call_{provider}", name="subagent", arguments=arguments)


@pytest.mark.usefixtures("no_leftover_processes")
def test_the_repl_shows_the_hint_and_the_run_fails_with_configuration(tmp_path: Path) -> None:
    home = make_home(tmp_path, CONFIG)
    script: list[Behaviour | str] = [_delegate("probe"), "text", _delegate("helper"), "text"]
    with FaultServer(script=script) as server:
        run = run_dsh(
            home,
            ["--base-url", server.url],
            ["delegate to probe", "delegate to helper"],
            launcher=_without("acp", "claude_agent_sdk"),
            label="missing-extras",
        )
    assert run.returncode == 0, run.stderr[-600:]
    lines = run.stdout.splitlines()
    assert lines[:2] == [ACP_HINT, CLAUDE_HINT]  # on screen as the subagents are built, before any turn
    assert "    Subagent failure (provider: probe; stage: initialize; category: configuration)" in lines
    assert "    Product subagent failure (product: Claude Code; stage: query-start; category: configuration)" in lines


def test_no_hint_when_the_sdks_are_installed(tmp_path: Path) -> None:
    home = make_home(tmp_path, CONFIG)
    with FaultServer(script=[]) as server:
        run = run_dsh(home, ["--base-url", server.url], [], label="extras-present")
    assert run.returncode == 0, run.stderr[-600:]
    assert "needs the" not in run.stdout + run.stderr


@pytest.mark.anyio
async def test_the_run_itself_fails_with_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "acp", None)
    # Without the SDK its side of the provider never imported either (an earlier test here imported it).
    monkeypatch.delitem(sys.modules, "dsh.agent_loop.subagent._acp_sdk", raising=False)
    provider = build_provider("probe", {"provider": "acp", "command": "agent"})
    assert provider.hint == ACP_HINT
    async with provider.run(SubagentRequest("d", "p", str(tmp_path))) as run:
        result = await run.result()
    assert (result.stop_reason, result.diagnostic) == (
        "error",
        "Subagent failure (provider: probe; stage: initialize; category: configuration)",
    )


def test_codex_needs_its_extra_only_without_a_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "codex_cli_bin", None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no codex on PATH
    assert missing_extra("codex") == "codex"
    hint = "subagent c (codex) needs the codex extra: pip install 'dsh-agent[codex]'"
    assert missing_extra_hint("c", "codex") == hint
    assert missing_extra("codex", {"command": ["/opt/codex/bin/codex"]}) is None
    (tmp_path / "codex").write_text("#!/bin/sh\n")
    (tmp_path / "codex").chmod(0o755)
    assert missing_extra("codex") is None


def test_the_toolkit_collects_one_hint_per_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "acp", None)
    kit = SubagentToolkit.from_config({"probe": {"provider": "acp", "command": "agent"}, "child": {"provider": "dsh"}})
    assert kit.hints == [ACP_HINT]


def test_the_demo_marks_the_scenarios_whose_extra_is_missing(tmp_path: Path) -> None:
    """``pip install dsh-agent`` alone (no acp, no claude extra): ``/scenario`` says what each of those needs,
    and picking one fails the turn with the same install line (issue 27 item 3)."""
    home = make_home(tmp_path, "")
    run = run_dsh(home, ["--demo"], ["/scenario", "/scenario delegate-acp", "go"],
                  launcher=_without("acp", "claude_agent_sdk"), label="demo-missing-extras")
    assert run.returncode == 0, run.stderr[-600:]
    listing = {line.split()[0]: line for line in run.stdout.splitlines() if line.startswith("  ")}
    marked = {name: line.rsplit(" (needs ", 1)[1] for name, line in listing.items() if " (needs " in line}
    assert marked["delegate-acp"] == "the acp extra: pip install 'dsh-agent[acp]')"
    assert marked["delegate-claude-code"] == "the claude extra: pip install 'dsh-agent[claude]')"
    assert set(marked.values()) == {"the acp extra: pip install 'dsh-agent[acp]')",
                                    "the claude extra: pip install 'dsh-agent[claude]')"}
    assert len(marked) == 24  # 8 ACP and 16 Claude Code scenarios; the child dsh and Codex ones need nothing
    assert "delegate-dsh" in listing and "delegate-dsh" not in marked and "delegate-codex" not in marked
    assert ("[main turn 1] [turn failed CONFIG] subagent acp (acp) needs the acp extra: pip install 'dsh-agent[acp]'"
            in run.stdout)  # a failed turn, not an answer

