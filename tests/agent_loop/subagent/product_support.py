"""What the Claude Code and Codex provider tests share.

The task request and one run to its result, each product's failure line, the canaries a diagnostic must
never carry, and each product's scripted fake with the table of its scenarios (the fakes live in
``repl/demo/`` and run as processes, never imported: tests of agent_loop load no front end).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dsh.agent_loop.subagent import Provider, claude_code, codex
from dsh.agent_loop.subagent.result import SubagentRequest, SubagentResult

ROOT = Path(__file__).resolve().parents[3]
FAKE_CLAUDE_CLI = str(ROOT / "repl" / "demo" / "fake_claude_cli.py")
FAKE_CODEX_SERVER = str(ROOT / "repl" / "demo" / "fake_codex_app_server.py")

PROMPT_CANARY = "PROMPT-CANARY-7f3a"
STDERR_CANARY = "STDERR-CANARY-91bc"
UPSTREAM_CANARY = "UPSTREAM-CANARY-c0de"
PARENT_CANARY = "PARENT-SECRET-CANARY-5e5e"
CANARIES = (PROMPT_CANARY, STDERR_CANARY, UPSTREAM_CANARY, PARENT_CANARY)

# The fakes' teardown graces: short, so a ladder that must run to SIGKILL ends in about a second.
FAST_GRACES = {"eof_grace": 0.5, "term_grace": 0.5}


def request(cwd: Path, prompt: str = f"do the task {PROMPT_CANARY}") -> SubagentRequest:
    return SubagentRequest(description="task", prompt=prompt, cwd=str(cwd))


async def run_once(provider: Provider, req: SubagentRequest) -> SubagentResult:
    async with provider.run(req) as run:
        return await run.result()


def assert_no_canary(result: SubagentResult) -> None:
    for canary in CANARIES:
        assert canary not in (result.diagnostic or "")


def _failure(product: str, stage: str, category: str, tail: str) -> str:
    return f"Product subagent failure (product: {product}; stage: {stage}; category: {category}{tail})"


def claude_failure(stage: str, category: str, tail: str = "") -> str:
    return _failure("Claude Code", stage, category, tail)


def codex_failure(stage: str, category: str, tail: str = "") -> str:
    return _failure("Codex", stage, category, tail)


def fake_claude(scenario: str, **config: Any) -> Provider:
    """The Claude Code provider over the scripted CLI playing ``scenario``."""
    env = {"FAKE_CLAUDE_SCENARIO": scenario, "FAKE_CLAUDE_STDERR": STDERR_CANARY, **config.pop("env", {})}
    settings: dict[str, Any] = {"command": [sys.executable, FAKE_CLAUDE_CLI], "env": env, **FAST_GRACES}
    settings.update(config)
    return claude_code.from_config("probe", settings)


def fake_codex(scenario: str, error_info: Any = None, **config: Any) -> Provider:
    """The Codex provider over the scripted app-server playing ``scenario`` (failing with ``error_info``)."""
    env = {"FAKE_CODEX_SCENARIO": scenario, "FAKE_CODEX_STDERR": STDERR_CANARY, **config.pop("env", {})}
    if error_info is not None:
        env["FAKE_CODEX_ERROR_INFO"] = json.dumps(error_info)
    settings: dict[str, Any] = {
        "command": [sys.executable, FAKE_CODEX_SERVER],
        "env": env,
        **FAST_GRACES,
        "interrupt_grace": 0.5,
    }
    settings.update(config)
    return codex.from_config("codex", settings)


# (scenario, stop reason, diagnostic, output): every category and stage the scripted CLI can play.
CLAUDE_SCENARIOS = [
    ("success", "completed", None, "fake answer"),
    ("setsid_helper", "completed", None, "fake answer"),  # and the helper is gone (no_leftover_processes)
    ("blank_success", "error", claude_failure("query-run", "invalid-success", "; exit code: 0"), ""),
    ("is_error_success", "error", claude_failure("query-run", "invalid-success", "; exit code: 1"), "partial work"),
    (
        "error_during_execution",
        "error",
        claude_failure("query-run", "error_during_execution", "; exit code: 1"),
        "partial work",
    ),
    ("error_max_turns", "error", claude_failure("query-run", "error_max_turns", "; exit code: 1"), "partial work"),
    (
        "error_max_budget_usd",
        "error",
        claude_failure("query-run", "error_max_budget_usd", "; exit code: 1"),
        "partial work",
    ),
    (
        "error_max_structured_output_retries",
        "error",
        claude_failure("query-run", "error_max_structured_output_retries", "; exit code: 1"),
        "partial work",
    ),
    ("unknown_subtype", "error", claude_failure("query-run", "unknown", "; exit code: 1"), ""),
    ("no_result", "error", claude_failure("query-run", "missing-result", "; exit code: 0"), "partial work"),
    ("malformed_frame", "error", claude_failure("query-run", "unknown"), "partial work"),
    ("exit_mid_run", "error", claude_failure("process", "process-exit", "; exit code: 3"), "partial work"),
    ("kill_mid_run", "error", claude_failure("process", "process-exit", "; signal: SIGKILL"), "partial work"),
    ("success_then_exit_1", "error", claude_failure("process", "process-exit", "; exit code: 1"), ""),
    ("orphan_holds_stdout", "error", claude_failure("process", "process-exit", "; exit code: 5"), "partial work"),
    ("exit_at_start", "error", claude_failure("query-start", "process-exit", "; exit code: 7"), ""),
    ("garbage_at_start", "error", claude_failure("query-start", "unknown"), ""),
]  # fmt: skip

# The same for the scripted app-server: every stage, and the outcomes of a turn.
CODEX_SCENARIOS = [
    ("success", "completed", None, "fake answer"),
    ("setsid_helper", "completed", None, "fake answer"),  # and the helper is gone (no_leftover_processes)
    ("commentary_then_final", "completed", None, "the final answer"),
    ("legacy_no_phase", "completed", None, "legacy answer"),
    ("early_completed", "completed", None, "early answer"),
    ("completed_no_answer", "error", codex_failure("turn", "unknown"), "only commentary"),
    ("interrupted_remote", "error", codex_failure("turn", "unknown"), ""),
    ("unknown_status", "error", codex_failure("turn", "unknown"), ""),
    ("malformed_frame_mid_turn", "error", codex_failure("turn", "unknown"), ""),
    ("exit_at_initialize", "error", codex_failure("initialize", "process-exit", "; exit code: 9"), ""),
    ("init_error", "error", codex_failure("initialize", "unknown"), ""),
    ("garbage_at_initialize", "error", codex_failure("initialize", "unknown"), ""),
    ("exit_at_thread_start", "error", codex_failure("thread-start", "process-exit", "; exit code: 6"), ""),
    ("thread_start_error", "error", codex_failure("thread-start", "unknown"), ""),
    ("thread_start_malformed", "error", codex_failure("thread-start", "unknown"), ""),
    ("turn_start_malformed", "error", codex_failure("turn-start", "unknown"), ""),
    ("exit_mid_turn", "error", codex_failure("process", "process-exit", "; exit code: 4"), ""),
    ("kill_mid_turn", "error", codex_failure("process", "process-exit", "; signal: SIGKILL"), ""),
    ("orphan_holds_stdout", "error", codex_failure("process", "process-exit", "; exit code: 5"), ""),
    ("stubborn_after_success", "error", codex_failure("teardown", "unknown", "; signal: SIGKILL"), "fake answer"),
]  # fmt: skip
