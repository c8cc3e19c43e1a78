"""The failure record and its fixed lines: exact texts, field order, omission, and closed-value validation."""

from __future__ import annotations

import pytest

from dsh.agent_loop.process import ExitStatus
from dsh.agent_loop.subagent import acp, claude_code, codex, dsh_sdk
from dsh.agent_loop.subagent.diagnostics import (
    Category,
    Failure,
    Stage,
    failure_line,
    join_lines,
    permission_line,
    safe_token,
    unattended_decision,
)
from dsh.agent_loop.subagent.result import SubagentResult, limit_diagnostic

CANARY = "sk-canary-77d1-DO-NOT-LEAK"


# -- the generic line ------------------------------------------------------------------------------


def subagent_failure(provider: object, stage: object, category: object, **facts: object) -> str:
    return failure_line(Failure(stage, category, **facts), provider=provider)  # type: ignore[arg-type]


def product_failure(product: object, stage: object, category: object, **facts: object) -> str:
    return failure_line(Failure(stage, category, **facts), provider="x", product=product)  # type: ignore[arg-type]


def test_design_examples_exactly() -> None:
    assert (
        subagent_failure("probe", acp.Stage.PROMPT, acp.Category.REMOTE_LIMIT, stop_reason="max_turn_requests")
        == "Subagent failure (provider: probe; stage: prompt; category: remote-limit; stop reason: max_turn_requests)"
    )
    assert (
        subagent_failure("probe", acp.Stage.INITIALIZE, acp.Category.PROCESS_EXIT, exit_status=ExitStatus(9, None))
        == "Subagent failure (provider: probe; stage: initialize; category: process-exit; exit code: 9)"
    )
    assert (
        subagent_failure("probe", acp.Stage.PROCESS, acp.Category.PROCESS_EXIT, exit_status=ExitStatus(None, "SIGKILL"))
        == "Subagent failure (provider: probe; stage: process; category: process-exit; signal: SIGKILL)"
    )


def test_all_fields_in_fixed_order() -> None:
    line = subagent_failure(
        "child.dsh-1",
        dsh_sdk.Stage.SESSION_RUN,
        dsh_sdk.Category.CHILD_ERROR,
        stop_reason="error",
        exit_status=ExitStatus(1, "SIGTERM"),
    )
    assert line == (
        "Subagent failure (provider: child.dsh-1; stage: session-run; category: child-error; "
        "stop reason: error; exit code: 1; signal: SIGTERM)"
    )


def test_exit_code_zero_is_shown() -> None:
    line = subagent_failure("p", acp.Stage.PROCESS, acp.Category.PROCESS_EXIT, exit_status=ExitStatus(0, None))
    assert line.endswith("category: process-exit; exit code: 0)")


@pytest.mark.parametrize("reason", ["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"])
def test_acp_stop_reasons_are_known(reason: str) -> None:
    line = subagent_failure("p", acp.Stage.PROMPT, acp.Category.UNKNOWN, stop_reason=reason)
    assert f"stop reason: {reason})" in line


@pytest.mark.parametrize("reason", ["mystery", CANARY, "end_turn; signal: SIGKILL", "", 7])
def test_unknown_stop_reason_is_omitted_not_copied(reason: object) -> None:
    line = subagent_failure("p", acp.Stage.PROMPT, acp.Category.UNKNOWN, stop_reason=reason)
    assert line == "Subagent failure (provider: p; stage: prompt; category: unknown)"


@pytest.mark.parametrize(
    "hostile",
    [CANARY + " ; x", "a b", "name)", "x" * 65, "", "ünïcode", "line\nbreak", None, 3],
)
def test_child_text_never_passes_through_any_field(hostile: object) -> None:
    line = subagent_failure(hostile, hostile, hostile, exit_status=None)
    assert line == "Subagent failure (provider: unknown; stage: unknown; category: unknown)"
    assert permission_line(hostile, hostile, hostile) == (  # type: ignore[arg-type]
        "Subagent permission decision (policy: unknown; request: unknown; decision: unknown)"
    )


def test_stage_and_category_are_enum_members_only() -> None:
    # A string, even one that spells a real stage, is not a stage: only a provider's declared members pass.
    assert subagent_failure("p", "prompt", "unknown") == (
        "Subagent failure (provider: p; stage: unknown; category: unknown)"
    )
    assert subagent_failure("p", acp.Category.TIMEOUT, acp.Stage.PROMPT) == (  # swapped: neither passes
        "Subagent failure (provider: p; stage: unknown; category: unknown)"
    )


@pytest.mark.parametrize("module", [acp, dsh_sdk, claude_code, codex])
def test_every_provider_declares_closed_stages_and_categories(module: object) -> None:
    stages, categories = module.Stage, module.Category  # type: ignore[attr-defined]
    assert issubclass(stages, Stage) and issubclass(categories, Category)
    assert all(safe_token(member.value) == member.value for member in [*stages, *categories])
    assert "configuration" in set(categories)


def test_bogus_exit_facts_are_dropped() -> None:
    class Weird:
        exit_code = True  # a bool is not an exit code
        signal = "SIGKILL; provider: evil"

    assert subagent_failure("p", acp.Stage.PROCESS, acp.Category.PROCESS_EXIT, exit_status=Weird()) == (
        "Subagent failure (provider: p; stage: process; category: process-exit)"
    )


def test_safe_token() -> None:
    assert safe_token("my-agent_2.v1") == "my-agent_2.v1"
    assert safe_token("has space") == "unknown"
    assert safe_token("x" * 64) == "x" * 64
    assert safe_token("x" * 65) == "unknown"


# -- permission line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "kind", "decision"),
    [("reject", "execute", "rejected"), ("allow", "edit", "allowed"), ("reject", "fetch", "cancelled")],
)
def test_permission_line_exact(policy: str, kind: str, decision: str) -> None:
    assert permission_line(policy, kind, decision) == (
        f"Subagent permission decision (policy: {policy}; request: {kind}; decision: {decision})"
    )


def test_permission_line_all_acp_tool_kinds() -> None:
    for kind in ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"):
        assert f"request: {kind};" in permission_line("allow", kind, "allowed")
    assert "request: unknown;" in permission_line("allow", None, "allowed")


# -- product lines --------------------------------------------------------------------------------


def test_product_failure_fields() -> None:
    assert product_failure("Codex", codex.Stage.TURN, codex.Category.httpConnectionFailed, http_status=401) == (
        "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed; HTTP status: 401)"
    )
    line = product_failure(
        "Claude Code",
        claude_code.Stage.PROCESS,
        claude_code.Category.PROCESS_EXIT,
        exit_status=ExitStatus(None, "SIGKILL"),
    )
    assert (
        line
        == "Product subagent failure (product: Claude Code; stage: process; category: process-exit; signal: SIGKILL)"
    )
    assert product_failure("Claude Code", claude_code.Stage.QUERY_RUN, claude_code.Category.ERROR_MAX_TURNS) == (
        "Product subagent failure (product: Claude Code; stage: query-run; category: error_max_turns)"
    )


@pytest.mark.parametrize("status", [99, 600, True, "500", None])
def test_product_failure_drops_impossible_http_status(status: object) -> None:
    line = product_failure("Codex", codex.Stage.TURN, codex.Category.other, http_status=status)
    assert line == "Product subagent failure (product: Codex; stage: turn; category: other)"


def test_product_failure_unknown_values() -> None:
    assert product_failure("Gemini", codex.Stage.TURN, "totallyNewKind") == (
        "Product subagent failure (product: unknown; stage: turn; category: unknown)"
    )


def test_unattended_decision_exact() -> None:
    assert unattended_decision("Claude Code", "dontAsk", "tool permission", "denied") == (
        "Claude Code unattended decision (mode: dontAsk; request: tool permission; decision: denied): "
        "the provider does not request human approval"
    )
    assert unattended_decision("Codex", "never", "command execution", "declined") == (
        "Codex unattended decision (mode: never; request: command execution; decision: declined): "
        "the provider does not request human approval"
    )
    assert unattended_decision("Codex", CANARY + " x", CANARY, CANARY) == (
        "Codex unattended decision (mode: unknown; request: unknown; decision: unknown): "
        "the provider does not request human approval"
    )


def test_join_lines() -> None:
    assert join_lines("a", None, "b") == "a\nb"
    assert join_lines(None, None) is None


# -- the shared 4096-byte bound -------------------------------------------------------------------


def test_4096_byte_ascii_diagnostic_is_unchanged() -> None:
    text = "A" * 4096
    assert limit_diagnostic(text) == text
    assert SubagentResult("", "error", text).diagnostic == text


def test_multibyte_overflow_is_bounded_without_replacement_chars() -> None:
    suffix = "\n[diagnostic truncated]"
    for prefix_len in range(4):  # shift the cut across every byte position of the 4-byte char
        text = "x" * prefix_len + "😀" * 2000  # 8000+ bytes
        bounded = limit_diagnostic(text)
        assert bounded is not None
        encoded = bounded.encode("utf-8")
        assert len(encoded) <= 4096
        assert bounded.endswith(suffix)
        assert "\ufffd" not in bounded
        assert text.startswith(bounded[: -len(suffix)])
        # The longest prefix that fits: one more code point would overflow.
        kept = bounded[: -len(suffix)]
        assert len(encoded) + len("😀".encode()) > 4096 or len(kept) == len(text)


def test_4097_bytes_are_truncated() -> None:
    bounded = limit_diagnostic("é" * 2048 + "x")  # 4097 bytes
    assert bounded is not None and bounded.endswith("\n[diagnostic truncated]")
    assert len(bounded.encode()) <= 4096
    assert limit_diagnostic(None) is None


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        (-32000, "; error code: -32000 (authentication required)"),
        (-32002, "; error code: -32002 (resource not found)"),
        (-32600, "; error code: -32600 (invalid request)"),
        (-32601, "; error code: -32601 (method not found)"),
        (-32602, "; error code: -32602 (invalid params)"),
        (-32603, "; error code: -32603 (internal error)"),
        (-32700, "; error code: -32700 (parse error)"),
        (-32001, "; error code: -32001"),  # not defined by the protocols: a bare integer
        (500, "; error code: 500"),
        (True, ""),
        (2**40, ""),
    ],
)
def test_agent_error_code_follows_the_category(code: object, shown: str) -> None:
    failure = Failure(acp.Stage.PROMPT, acp.Category.AGENT_ERROR, error_code=code)  # type: ignore[arg-type]
    assert failure_line(failure, provider="claude") == (
        f"Subagent failure (provider: claude; stage: prompt; category: agent-error{shown})"
    )


def test_mode_warning_names_only_safe_tokens() -> None:
    from dsh.agent_loop.subagent.diagnostics import mode_warning

    assert mode_warning("claude", "auto") == (
        "Subagent permission warning (provider: claude; mode: auto): "
        "tool calls ran without a permission request under policy reject"
    )
    assert "mode: unknown)" in mode_warning("claude", "rm -rf /; sk-ant-x y")
    assert "mode: unknown)" in mode_warning("claude", None)
