"""Demo data for the product subagents: one scenario per Claude Code and Codex failure category.

Plain data, in the shape of :mod:`dsh.repl.demo.delegation`: ``[subagents.NAME]`` tables
(:func:`product_demo_tables`) and :class:`DelegationScenario` entries (:data:`PRODUCT_SCENARIOS`).
Every table runs a scripted fake — ``repl/demo/fake_claude_cli.py`` through the real
``claude-agent-sdk``, or ``repl/demo/fake_codex_app_server.py`` through our app-server client — so the
demo stays offline, keyless and quick while the provider code on the path is the real one. ``expect``
is the exact diagnostic line the REPL prints (indented like the other delegation scenarios).

The front end adds :func:`product_demo_tables` to the demo's subagent tables and calls
:func:`register_product_demo_scenarios` with ``dsh.repl.demo.catalogue.register_scenario`` and
``dsh.llm.loopback.fault_server.Behaviour``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsh.repl.demo.delegation import DelegationScenario, runnable_tables, scenario_extra, scenario_setup

__all__ = ["PRODUCT_SCENARIOS", "all_product_tables", "product_demo_tables", "register_product_demo_scenarios"]

_FAKE_CLAUDE = str(Path(__file__).with_name("fake_claude_cli.py"))
_FAKE_CODEX = str(Path(__file__).with_name("fake_codex_app_server.py"))
_INDENT = "    "


def _claude(scenario: str, **config: Any) -> dict[str, Any]:
    return _fake_table("claude-code", _FAKE_CLAUDE, {"FAKE_CLAUDE_SCENARIO": scenario}, config)


def _codex(scenario: str, error_info: Any = None, **config: Any) -> dict[str, Any]:
    env = {"FAKE_CODEX_SCENARIO": scenario}
    if error_info is not None:
        env["FAKE_CODEX_ERROR_INFO"] = json.dumps(error_info)
    return _fake_table("codex", _FAKE_CODEX, env, {"interrupt_grace": 1.0} | config)


def _fake_table(provider: str, script: str, env: dict[str, str], config: dict[str, Any]) -> dict[str, Any]:
    """A ``[subagents.NAME]`` table that runs ``script`` (a scripted fake) with ``env`` added to ``config``'s.

    The graces are short: a fake ends at once when asked."""
    return {
        "provider": provider,
        "command": [sys.executable, script],
        "env": env | config.pop("env", {}),
        "eof_grace": 0.5,
        "term_grace": 0.5,
        **config,
    }


def _claude_line(rest: str) -> str:
    return f"{_INDENT}Product subagent failure (product: Claude Code; {rest}"


def _codex_line(rest: str) -> str:
    return f"{_INDENT}Product subagent failure (product: Codex; {rest}"


# name -> (table, summary, expected line)
_CLAUDE: dict[str, tuple[dict[str, Any], str, str]] = {
    "claude-code": (_claude("success"), "delegate to Claude Code (scripted CLI, real SDK)",
                    "  [tool result] fake answer"),
    "claude-error-during-execution": (
        _claude("error_during_execution"), "Claude Code reports error_during_execution",
        _claude_line("stage: query-run; category: error_during_execution; exit code: 1)")),
    "claude-max-turns": (
        _claude("error_max_turns"), "Claude Code stops at its turn limit: error_max_turns",
        _claude_line("stage: query-run; category: error_max_turns; exit code: 1)")),
    "claude-max-budget": (
        _claude("error_max_budget_usd"), "Claude Code stops at its budget: error_max_budget_usd",
        _claude_line("stage: query-run; category: error_max_budget_usd; exit code: 1)")),
    "claude-structured-output": (
        _claude("error_max_structured_output_retries"), "Claude Code gives up on structured output",
        _claude_line("stage: query-run; category: error_max_structured_output_retries; exit code: 1)")),
    "claude-invalid-success": (
        _claude("is_error_success"), "a 'success' result marked is_error (an API failure): invalid-success",
        _claude_line("stage: query-run; category: invalid-success; exit code: 1)")),
    "claude-blank-success": (
        _claude("blank_success"), "a success result with a blank answer: invalid-success",
        _claude_line("stage: query-run; category: invalid-success; exit code: 0)")),
    "claude-missing-result": (
        _claude("no_result"), "the stream ends without a result: missing-result",
        _claude_line("stage: query-run; category: missing-result; exit code: 0)")),
    "claude-unknown-subtype": (
        _claude("unknown_subtype"), "a result subtype this SDK does not declare: unknown",
        _claude_line("stage: query-run; category: unknown; exit code: 1)")),
    "claude-malformed": (
        _claude("malformed_frame"), "a corrupt stream-json frame mid-run: unknown",
        _claude_line("stage: query-run; category: unknown)")),
    "claude-process-exit": (
        _claude("exit_mid_run"), "the CLI exits with code 3 before its result: process-exit",
        _claude_line("stage: process; category: process-exit; exit code: 3)")),
    "claude-killed": (
        _claude("kill_mid_run"), "the CLI dies of SIGKILL before its result: process-exit + signal",
        _claude_line("stage: process; category: process-exit; signal: SIGKILL)")),
    "claude-start-exit": (
        _claude("exit_at_start"), "the CLI exits during the SDK handshake: query-start",
        _claude_line("stage: query-start; category: process-exit; exit code: 7)")),
    "claude-missing-cli": (
        {"provider": "claude-code", "cli_path": "/nonexistent/claude"},
        "the configured CLI does not exist: query-start",
        _claude_line("stage: query-start; category: configuration)")),
    "claude-teardown": (
        _claude("linger_after_success", env={"FAKE_CLAUDE_STUBBORN": "1"}),
        "the CLI answers, then ignores EOF and SIGTERM: the run fails at teardown (SIGKILL)",
        _claude_line("stage: teardown; category: unknown; signal: SIGKILL)")),
    "claude-permission": (
        _claude("permission_then_error"),
        "the CLI asks for a tool permission; the unattended run denies it and the CLI fails with "
        "error_during_execution",
        f"{_INDENT}Claude Code unattended decision (mode: dontAsk; request: tool permission; decision: denied): "
        "the provider does not request human approval"),
}  # fmt: skip

# Every codexErrorInfo string variant, then the object variants.
_CODEX_STRINGS = (
    "contextWindowExceeded", "sessionBudgetExceeded", "usageLimitExceeded", "rateLimitExceeded",
    "flexUnavailable", "serverOverloaded", "cyberPolicy", "misalignmentPolicyViolation", "tooManyDenials",
    "internalServerError", "unauthorized", "badRequest", "threadRollbackFailed", "sandboxError", "other",
)  # fmt: skip
_CODEX_OBJECTS: tuple[tuple[str, Any, str], ...] = (
    ("codex-http-failed", {"httpConnectionFailed": {"httpStatusCode": 401}},
     "category: httpConnectionFailed; HTTP status: 401)"),
    ("codex-stream-connect", {"responseStreamConnectionFailed": {"httpStatusCode": 502}},
     "category: responseStreamConnectionFailed; HTTP status: 502)"),
    ("codex-stream-disconnected", {"responseStreamDisconnected": {"httpStatusCode": None}},
     "category: responseStreamDisconnected)"),
    ("codex-too-many-attempts", {"responseTooManyFailedAttempts": {"httpStatusCode": 429}},
     "category: responseTooManyFailedAttempts; HTTP status: 429)"),
    ("codex-not-steerable", {"activeTurnNotSteerable": {"turnKind": "review"}}, "category: activeTurnNotSteerable)"),
    ("codex-unknown-info", "somethingNewer", "category: unknown)"),
)  # fmt: skip


def _kebab(name: str) -> str:
    return "".join(f"-{ch.lower()}" if ch.isupper() else ch for ch in name)


def _codex_entries() -> dict[str, tuple[dict[str, Any], str, str]]:
    entries: dict[str, tuple[dict[str, Any], str, str]] = {
        "codex": (_codex("success"), "delegate to Codex (scripted app-server, our client)",
                  "  [tool result] fake answer"),
    }  # fmt: skip
    for variant in _CODEX_STRINGS:
        summary = f"the Codex turn fails with codexErrorInfo {variant}"
        if variant == "contextWindowExceeded":
            summary += " (stop reason max-tokens)"
        elif variant == "cyberPolicy":
            summary += " (an error, not a refusal)"
        entries[f"codex-{_kebab(variant)}"] = (
            _codex("fail", variant),
            summary,
            _codex_line(f"stage: turn; category: {variant})"),
        )
    for name, info, rest in _CODEX_OBJECTS:
        entries[name] = (_codex("fail", info), f"the Codex turn fails with {json.dumps(info)}",
                         _codex_line(f"stage: turn; {rest}"))  # fmt: skip
    entries.update({
        "codex-initialize-exit": (_codex("exit_at_initialize"), "the app-server exits at initialize",
                                  _codex_line("stage: initialize; category: process-exit; exit code: 9)")),
        "codex-initialize-garbage": (_codex("garbage_at_initialize"), "a non-JSON frame answers initialize",
                                     _codex_line("stage: initialize; category: unknown)")),
        "codex-thread-start": (_codex("thread_start_malformed"), "thread/start answers without a thread id",
                               _codex_line("stage: thread-start; category: unknown)")),
        "codex-turn-start": (_codex("turn_start_malformed"), "turn/start answers without a turn id",
                             _codex_line("stage: turn-start; category: unknown)")),
        "codex-process-exit": (_codex("exit_mid_turn"), "the app-server exits with code 4 mid-turn",
                               _codex_line("stage: process; category: process-exit; exit code: 4)")),
        "codex-killed": (_codex("kill_mid_turn"), "the app-server dies of SIGKILL mid-turn",
                         _codex_line("stage: process; category: process-exit; signal: SIGKILL)")),
        "codex-deadline": (_codex("hang_turn", turn_timeout=1),
                           "the turn outlives its 1 s deadline: dsh sends turn/interrupt and reports the last error",
                           _codex_line("stage: turn; category: responseStreamDisconnected)")),
        "codex-teardown": (_codex("stubborn_after_success"), "the app-server answers, then ignores EOF and SIGTERM: "
                           "the run fails at teardown (SIGKILL)",
                           _codex_line("stage: teardown; category: unknown; signal: SIGKILL)")),
        "codex-approval": (_codex("approvals_then_fail"), "Codex asks for approvals; the unattended run denies them "
                           "and the turn fails (sandboxError)",
                           f"{_INDENT}Codex unattended decision (mode: never; request: command execution; "
                           "decision: denied): the provider does not request human approval"),
    })  # fmt: skip
    return entries


def _entries() -> dict[str, tuple[dict[str, Any], str, str]]:
    return {**_CLAUDE, **_codex_entries()}


def product_demo_tables() -> dict[str, dict[str, Any]]:
    """``[subagents.NAME]`` tables for the product scenarios (one per scenario) that can run as installed."""
    return runnable_tables(all_product_tables())


def all_product_tables() -> dict[str, dict[str, Any]]:
    """Every product table, whether or not its extra is installed."""
    return {name: table for name, (table, _summary, _expect) in _entries().items()}


def _scenario_name(table: str) -> str:
    return f"delegate-{table}" if table in ("claude-code", "codex") else table


PRODUCT_SCENARIOS: tuple[DelegationScenario, ...] = tuple(
    DelegationScenario(_scenario_name(name), summary, name, expect)
    for name, (_table, summary, expect) in _entries().items()
)


def register_product_demo_scenarios(register: Callable[..., Any], behaviour: Callable[..., Any]) -> None:
    """``register`` is the catalogue's ``register_scenario``; ``behaviour`` the fault server's ``Behaviour``."""
    tables = all_product_tables()
    for scenario in PRODUCT_SCENARIOS:
        setup = scenario_setup(scenario, behaviour, tables[scenario.provider])
        register(scenario.name, scenario.summary, setup, expect=scenario.expect,
                 extra=scenario_extra(tables[scenario.provider]))
