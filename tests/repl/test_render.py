"""The renderer and its lines are pure (dsh.repl.renderer, turn_end, approvals, activity): every turn-end line,
pinned to the character."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop import events as ev
from dsh.agent_loop.reasons import Aborted, Completed, Disposed, EndReason, Failed, Interrupted, MaxTokens, Rejected
from dsh.repl.activity import TurnActivity
from dsh.repl.answer_split import ANSWER, REST, AnswerSplit
from dsh.repl.approvals import approval_answer, approval_question, question_for, shown_command
from dsh.repl.prompt_line import fit_width
from dsh.repl.renderer import Renderer
from dsh.repl.sanitize import sanitize
from dsh.repl.styles import DIM, HIGHLIGHT, RESET, styled, terminal_text
from dsh.repl.turn_end import FIX_AUTH, FIX_QUOTA, FIX_RATE_LIMIT, FIX_SERVER, fix_line, turn_end_line

TRANSPORT_MESSAGE = (
    "DeepSeek API request to http://127.0.0.1:1 failed: All connection attempts failed: "
    "[Errno 111] Connect call failed ('127.0.0.1', 1)"
)


def run(renderer: Renderer, *events: ev.Event) -> str:
    """What a sink writes for these events (the sink applies the one sanitizer and dsh's styles)."""
    return "".join(terminal_text(renderer.render(event)) for event in events)


def end(turn: int, reason: dict) -> ev.Event:
    return ev.TurnEnd(turn, EndReason.from_dict(reason))


# --- the turn-end lines ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "line"),
    [
        (Failed("TRANSPORT", TRANSPORT_MESSAGE, 1).to_dict(), f"[turn failed TRANSPORT] {TRANSPORT_MESSAGE}"),
        ({"kind": "error", "message": "it broke"}, "[turn failed] it broke"),
        ({"kind": "error", "code": "", "message": "it broke"}, "[turn failed] it broke"),
        (Aborted("cancelled").to_dict(), "[turn aborted] cancelled"),
        (Aborted(None).to_dict(), "[turn aborted]"),
        (Rejected("prompt contains what looks like a secret (sk-…); not sent").to_dict(),
         "[turn rejected] prompt contains what looks like a secret (sk-…); not sent"),
        (MaxTokens().to_dict(), "[turn hit the output-token limit]"),
        (Interrupted().to_dict(), "[turn interrupted by a previous process exit]"),
        (Completed().to_dict(), None),
        (Disposed().to_dict(), None),
        ({"kind": "some-future-kind", "x": 1}, None),
        ({}, None),
    ],
)
def test_turn_end_line(reason: dict, line: str | None) -> None:
    assert turn_end_line(EndReason.from_dict(reason)) == line


@pytest.mark.parametrize(
    ("reason", "rendered"),
    [
        (Failed("TRANSPORT", TRANSPORT_MESSAGE, 1).to_dict(),
         f"[main turn 1] [turn failed TRANSPORT] {TRANSPORT_MESSAGE}\n"),
        (Aborted().to_dict(), "[main turn 1] [turn aborted] cancelled\n"),
        (Rejected("no").to_dict(), "[main turn 1] [turn rejected] no\n"),
        (MaxTokens().to_dict(), "[main turn 1] [turn hit the output-token limit]\n"),
        (Interrupted().to_dict(), "[main turn 1] [turn interrupted by a previous process exit]\n"),
        (Completed().to_dict(), "[main turn 1] \n"),
        (Disposed().to_dict(), "[main turn 1] \n"),
        ({"kind": "later"}, "[main turn 1] \n"),
    ],
)
def test_a_status_right_after_the_header_shares_its_line(reason: dict, rendered: str) -> None:
    renderer = Renderer(color=False)
    assert run(renderer, ev.TurnStart(1, "hi"), end(1, reason)) == rendered
    assert renderer.at_line_start


DEEPSEEK_SERVER = "  fix: the DeepSeek server is having trouble; retry later"


@pytest.mark.parametrize(
    ("status", "code", "fix"),
    [
        (401, "AUTH", FIX_AUTH),
        (402, "QUOTA", FIX_QUOTA),
        (429, "RATE_LIMIT", FIX_RATE_LIMIT),
        (500, "SERVER", DEEPSEEK_SERVER),
        (502, "SERVER", DEEPSEEK_SERVER),
        (503, "SERVER", DEEPSEEK_SERVER),
        (403, "AUTH", FIX_AUTH),  # the fix follows the code, not the status
        (429, "QUOTA", FIX_QUOTA),  # 429 "insufficient quota": QUOTA's fix, not the rate-limit one
        (400, "INVALID_REQUEST", None),
        (422, "HTTP_422", None),
        (None, "AUTH", FIX_AUTH),
        (None, "QUOTA", FIX_QUOTA),
        (None, "RATE_LIMIT", FIX_RATE_LIMIT),
        (None, "SERVER", DEEPSEEK_SERVER),
        (None, "TRANSPORT", None),
    ],
)
def test_fix_line_follows_401_402_429_5xx(status: int | None, code: str, fix: str | None) -> None:
    reason = Failed(code, "msg", 1, status=status, endpoint="https://api.deepseek.com",
                    endpoint_name="DeepSeek").to_dict()
    assert fix_line(EndReason.from_dict(reason)) == fix
    text = run(Renderer(color=False), ev.TurnStart(2, "x"), end(2, reason))
    expected = f"[main turn 2] [turn failed {code}] msg\n" + (f"{fix}\n" if fix else "")
    assert text == expected


def test_fix_lines_are_short_and_fixed() -> None:
    for fix in (FIX_AUTH, FIX_QUOTA, FIX_RATE_LIMIT, DEEPSEEK_SERVER):
        assert fix.startswith("  fix: ") and len(fix) <= 100
    assert "key" in FIX_AUTH and "top up" in FIX_QUOTA and "back off" in FIX_RATE_LIMIT and "retry later" in FIX_SERVER
    assert fix_line(Completed()) is None


GATEWAY = "http://127.0.0.1:4000"
KEY_SOURCE = {"api_key": "DEEPSEEK_API_KEY (environment)"}


@pytest.mark.parametrize(
    ("code", "detail", "name", "fix"),
    [
        ("SERVER", None, "LiteLLM", "  fix: the LiteLLM server is having trouble; retry later"),
        ("SERVER", None, None, "  fix: the endpoint at 127.0.0.1:4000 is having trouble; retry later"),
        ("QUOTA", None, "LiteLLM", "  fix: LiteLLM refused the request for quota or credit — check the account of "
                                   "the key in DEEPSEEK_API_KEY (environment)"),
        ("QUOTA", None, None, "  fix: the endpoint at 127.0.0.1:4000 refused the request for quota or credit — check "
                              "the account of the key in DEEPSEEK_API_KEY (environment)"),
        ("AUTH", "upstream-auth", "LiteLLM", "  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own "
                                             "credential — check the upstream key in LiteLLM's configuration"),
        ("AUTH", "upstream-auth", None, "  fix: the gateway at 127.0.0.1:4000 accepted your key, but its upstream "
                                        "refused the gateway's own credential — check the upstream key in the "
                                        "gateway's configuration"),
        ("AUTH", None, "LiteLLM", "  fix: the API key was refused — check DEEPSEEK_API_KEY (environment)"),
    ],
)
def test_fix_lines_name_the_endpoint_that_answered(code, detail, name, fix) -> None:
    reason = EndReason.from_dict(Failed(code, "msg", 1, detail=detail, endpoint=GATEWAY, endpoint_name=name).to_dict())
    assert fix_line(reason, KEY_SOURCE) == fix
    assert "DeepSeek" not in fix and "top_up" not in fix and "/user/balance" not in fix


def test_a_failure_that_does_not_say_who_answered_names_no_one() -> None:
    assert fix_line(Failed("SERVER", "msg", 1)) == "  fix: the server is having trouble; retry later"
    assert fix_line(Failed("QUOTA", "msg", 1), KEY_SOURCE) == (
        "  fix: the endpoint refused the request for quota or credit — check the account of the key in "
        "DEEPSEEK_API_KEY (environment)")


def test_a_deepseek_failure_from_an_older_log_is_still_deepseeks() -> None:
    old = EndReason.from_dict({"kind": "error", "code": "QUOTA", "message": "m", "endpoint": "https://api.deepseek.com"})
    assert fix_line(old) == FIX_QUOTA


def test_failure_message_is_masked_and_kept_on_one_line() -> None:
    key = "sk-thisIsAConfiguredKey0123456789"
    reason = Failed("AUTH", f"bad key {key}\nsecond line", 1, status=401).to_dict()
    line = turn_end_line(EndReason.from_dict(reason), secrets=(key,))
    assert line == "[turn failed AUTH] bad key *** second line"


# --- partial lines are ended before status lines ------------------------------------------------------


def test_status_line_after_partial_text_starts_a_new_line() -> None:
    renderer = Renderer(color=False)
    text = run(
        renderer,
        ev.TurnStart(3, "x"),
        ev.StepStart(3, 1),
        ev.TextDelta("Half an"),
        ev.TextDelta(" answer"),
        end(3, Failed("TRANSPORT", "DeepSeek API stream from http://h failed", 1).to_dict()),
    )
    assert text == "[main turn 3] Half an answer\n[turn failed TRANSPORT] DeepSeek API stream from http://h failed\n"


def test_text_that_ended_its_line_gets_no_blank_line() -> None:
    renderer = Renderer(color=False)
    text = run(renderer, ev.TurnStart(1, "x"), ev.TextDelta("done.\n"), end(1, Aborted().to_dict()))
    assert text == "[main turn 1] done.\n[turn aborted] cancelled\n"


def test_completed_turn_ends_a_partial_line() -> None:
    renderer = Renderer(color=False)
    assert run(renderer, ev.TurnStart(1, "x"), ev.TextDelta("Hi"), end(1, Completed().to_dict())) == (
        "[main turn 1] Hi\n"
    )
    assert renderer.end_line() == ""


def test_retry_lines_exact() -> None:
    renderer = Renderer(color=False)
    retry = ev.LlmRetry(1, 1, attempt=1, max_attempts=5, delay_s=0.5, code="SERVER", message="Server Overloaded")
    retry2 = ev.LlmRetry(1, 1, attempt=2, max_attempts=5, delay_s=1.04, code="SERVER", message="Server Overloaded")
    text = run(renderer, ev.TurnStart(1, "x"), retry, ev.TextDelta("partial"), retry2)
    assert text == (
        "[main turn 1] [retry 1/5 in 0.5s] SERVER: Server Overloaded\n"
        "partial\n[retry 2/5 in 1.0s] SERVER: Server Overloaded\n"
    )


def test_second_turn_header_starts_on_a_fresh_line() -> None:
    renderer = Renderer(color=False)
    text = run(renderer, ev.TurnStart(1, "x"), ev.TextDelta("a"), ev.TurnStart(2, "y"))
    assert text == "[main turn 1] a\n[main turn 2] "


def test_child_label() -> None:
    assert Renderer(color=False, label="child-7").render(ev.TurnStart(4, "x")) == "[child-7 turn 4] "


def test_resume_notice() -> None:
    renderer = Renderer(color=False)
    assert renderer.resume_notice(5) == "[main turn 5] [turn interrupted by a previous process exit]\n"
    assert renderer.at_line_start


def test_line_helper_breaks_partial_lines() -> None:
    renderer = Renderer(color=False)
    assert run(renderer, ev.TextDelta("abc")) == "abc"
    assert renderer.line("note") == "\nnote\n"
    assert renderer.line("again") == "again\n"


# --- text, reasoning, styling --------------------------------------------------------------------------


def test_text_deltas_are_verbatim() -> None:
    renderer = Renderer(color=True)
    pieces = ["Hel", "lo, ", "wörld — ", "ok\n", "  indented\tline"]
    assert run(renderer, *(ev.TextDelta(p) for p in pieces)) == "".join(pieces)


def test_reasoning_is_dim_on_a_terminal_and_each_line_closes_its_escape() -> None:
    renderer = Renderer(color=True)
    text = run(renderer, ev.TurnStart(1, "x"), ev.ReasoningDelta("think\nmore"), ev.TextDelta("Answer"))
    assert text == f"[main turn 1] {DIM}think{RESET}\n{DIM}more{RESET}\nAnswer"


def test_reasoning_is_plain_without_color() -> None:
    renderer = Renderer(color=False)
    text = run(renderer, ev.TurnStart(1, "x"), ev.ReasoningDelta("think"), ev.TextDelta("Answer"))
    assert text == "[main turn 1] think\nAnswer"
    assert "\x1b" not in text


def test_control_characters_cannot_drive_the_terminal() -> None:
    renderer = Renderer(color=False)
    text = run(renderer, ev.TextDelta("a\x1b[2Jb\r\nc\x07\rd\x7f\x9b"))
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert text == "a\u241b[2Jb\nc\u2407\u240dd\u2421<U+009B>"
    assert sanitize("tab\tand\nnewline") == "tab\tand\nnewline"


# --- tools, jobs --------------------------------------------------------------------------------------


def test_tool_call_and_result_lines() -> None:
    renderer = Renderer(color=False)
    text = run(
        renderer,
        ev.TurnStart(1, "x"),
        ev.ToolCallStart(1, "c1", "list_dir", '{"path": "."}'),
        ev.ToolResult(1, "c1", "list_dir", "a.txt\nb/\n", is_error=False, diagnostic=None),
    )
    assert text == '[main turn 1] \n  [tool call] list_dir({"path": "."})\n  [tool result] a.txt\n    b/\n'


def test_long_tool_result_is_previewed() -> None:
    renderer = Renderer(color=False)
    output = "\n".join(f"line {n}" for n in range(10))
    text = renderer.render(ev.ToolResult(1, "c", "read_file", output, is_error=False, diagnostic=None))
    assert text == "  [tool result] line 0\n    line 1\n    line 2\n    … (+7 more lines)\n"


def test_error_result_with_diagnostic_on_its_own_highlighted_line() -> None:
    diagnostic = "Subagent failure (provider: probe; stage: initialize; category: process-exit; exit code: 9)"
    output = f"subagent run failed\nDiagnostic: {diagnostic}\nPartial output before the run ended:\nhalf"
    event = ev.ToolResult(1, "c", "subagent", output, is_error=True, diagnostic=diagnostic)
    assert Renderer(color=False).render(event) == f"  [tool result] Error: subagent run failed\n    {diagnostic}\n"
    assert terminal_text(Renderer(color=True).render(event)) == (
        f"  [tool result] Error: subagent run failed\n    {HIGHLIGHT}{diagnostic}{RESET}\n"
    )


def test_multiline_diagnostic_keeps_each_line() -> None:
    diagnostic = "Subagent failure (provider: p; stage: prompt; category: unknown)\nSubagent permission decision (x)"
    event = ev.ToolResult(1, "c", "subagent", "subagent run failed", is_error=True, diagnostic=diagnostic)
    assert Renderer(color=False).render(event) == (
        "  [tool result] Error: subagent run failed\n"
        "    Subagent failure (provider: p; stage: prompt; category: unknown)\n"
        "    Subagent permission decision (x)\n"
    )


def test_error_result_already_saying_error_is_not_prefixed_twice() -> None:
    event = ev.ToolResult(1, "c", "nope", 'Error: unknown tool "nope"', is_error=True, diagnostic=None)
    assert Renderer(color=False).render(event) == '  [tool result] Error: unknown tool "nope"\n'


def test_empty_tool_output() -> None:
    event = ev.ToolResult(1, "c", "x", "", is_error=False, diagnostic=None)
    assert Renderer(color=False).render(event) == "  [tool result] (no output)\n"


def test_tool_call_arguments_stay_on_one_line_and_are_bounded() -> None:
    arguments = '{\n  "path": "' + "x" * 1000 + '"\n}'
    line = Renderer(color=False).render(ev.ToolCallStart(1, "c", "read_file", arguments))
    assert line.count("\n") == 1 and line.startswith('  [tool call] read_file({ "path": "xxx')
    assert len(line) < 450 and line.endswith("…)\n")


def test_job_notice_inline_on_its_own_line() -> None:
    renderer = Renderer(color=False)
    notice = (
        "background job subagent-1 (subagent: probe) finished [status: completed]. Read its output with job_output."
    )
    text = run(renderer, ev.TextDelta("typing"), ev.JobNotice("subagent-1", notice))
    assert text == f"typing\n[job] {notice}\n"


def test_unknown_and_live_only_events_render_nothing() -> None:
    renderer = Renderer(color=False)
    assert run(renderer, ev.StreamKeepAlive(), ev.UnknownEvent("something/new", {"a": 1})) == ""
    assert renderer.render(ev.AssistantMessage(1, 1, content="x", reasoning_content=None, tool_calls=(),
                                                finish_reason="stop", interrupted=False, usage=None)) == ""


def test_hostile_event_data_does_not_raise() -> None:
    renderer = Renderer(color=False)
    # Hostile data is made well-typed where it enters (from_wire); what is left must still render.
    assert renderer.render(ev.from_wire({"type": "turn/end", "data": {"reason": "not a dict"}})) == ""
    retry = renderer.render(ev.from_wire({"type": "llm/retry", "data": {"delay_s": float("nan")}}))
    assert retry.startswith("[retry 0/0 in 0.0s]")
    assert renderer.render(ev.from_wire({"type": "text/delta", "data": {"text": 5}})) == ""


def test_approval_question_and_answer() -> None:
    assert approval_question("ls -la").question == "  [approve] run_shell: ls -la  (y / n / a) "
    assert not approval_question("ls -la").must_view
    shown = terminal_text(approval_question("a\nb\x1b\u202e").question)
    assert shown == "  [approve] run_shell: a\n      b\u241b<U+202E>  (y / n / a) "
    assert [approval_answer(a) for a in ("y", "n", "a", None)] == ["yes", "no", "always", "no"]


def test_a_sandboxed_command_s_question_says_where_it_runs() -> None:
    from dsh.agent_loop.tools.registry import SandboxedCommand

    assert question_for(SandboxedCommand("make test"), rows=24, cols=80, color=False).question == (
        "  [approve] run_shell (sandboxed): make test  (y / n / a) ")
    assert question_for("make test", rows=24, cols=80, color=False).question == (
        "  [approve] run_shell: make test  (y / n / a) ")
    long = question_for(SandboxedCommand("echo x\n" * 40), rows=10, cols=80, color=False)
    assert long.must_view and long.question == (
        "  [approve] run_shell (sandboxed): command is 41 lines / 280 chars \u2014 v to view  (v / n) ")
    assert long.view.startswith("  [command] run_shell (sandboxed), 41 lines / 280 chars:\n")


# --- the toolbar's activity ----------------------------------------------------------------------------


def test_turn_activity_waiting_and_keepalive() -> None:
    activity = TurnActivity()
    assert activity.text(0.0) == "" and not activity.busy
    activity.on_event(ev.TurnStart(1, "x"), 100.0)
    assert activity.text(112.4) == "waiting for first token 12s"
    activity.on_event(ev.StreamKeepAlive(), 110.0)
    assert activity.text(112.4) == "waiting for first token 12s · keep-alive 2s ago"
    activity.on_event(ev.TextDelta("a"), 113.0)
    assert activity.text(114.0) == "streaming"
    activity.on_event(ev.ToolCallStart(1, "c", "list_dir", "{}"), 115.0)
    assert activity.text(116.0) == "running list_dir"
    activity.on_event(ev.StepStart(1, 2), 117.0)
    assert activity.text(118.0) == "waiting for first token 1s"  # a new step forgets old keep-alives
    activity.on_event(ev.LlmRetry(1, 2, attempt=1, max_attempts=5, delay_s=2.0, code="SERVER", message="m"), 120.0)
    assert activity.text(120.5) == "retry 1/5 in 2s"
    assert activity.text(123.0) == "waiting for first token 1s"
    activity.on_event(end(1, Completed().to_dict()), 124.0)
    assert activity.text(125.0) == "" and not activity.busy


def test_turn_activity_shows_a_stall_mid_stream() -> None:
    activity = TurnActivity()
    activity.on_event(ev.TurnStart(1, "x"), 100.0)
    activity.on_event(ev.TextDelta("some text"), 101.0)
    assert activity.text(103.9) == "streaming"  # content came within STALL_AFTER_S
    assert activity.text(113.5) == "no content for 12s"  # then nothing at all
    activity.on_event(ev.StreamKeepAlive(), 111.0)
    assert activity.text(113.5) == "no content for 12s · keep-alive 2s ago"
    activity.on_event(ev.ReasoningDelta("more"), 114.0)
    assert activity.text(114.5) == "streaming"
    assert activity.text(118.0) == "no content for 4s"  # the keep-alive before the content no longer counts


def test_fit_width_cuts_to_terminal_cells_with_an_ellipsis() -> None:
    assert fit_width("abc", 3) == "abc"
    assert fit_width("abcdef", 4) == "abc…"
    assert fit_width("日本語テキスト", 6) == "日本…"  # wide characters take two cells each
    assert fit_width("anything", 0) == ""
    line = " no content for 12s · keep-alive 2s ago · Ctrl-C cancels · deepseek-v4-flash · http://127.0.0.1:1"
    assert fit_width(line, 60) == line[:59] + "…" and len(fit_width(line, 60)) == 60


def test_answer_split_keeps_the_answer_apart_from_everything_else() -> None:
    split = AnswerSplit(Renderer(color=False))
    outputs = [
        split.render(event)
        for event in (
            ev.TurnStart(1, "x"),
            ev.StepStart(1, 1),
            ev.ReasoningDelta("thinking"),
            ev.TextDelta("Let me look."),
            ev.ToolCallStart(1, "c1", "list_dir", "{}"),
            ev.ToolResult(1, "c1", "list_dir", "a\nb"),
            ev.StepStart(1, 2),
            ev.TextDelta("Two files."),
            end(1, Failed(code="SERVER", message="boom", endpoint="https://api.deepseek.com").to_dict()),
        )
    ]
    chunks = [chunk for output in outputs for chunk in output] + [(ANSWER, split.end())]
    answer = "".join(text for stream, text in chunks if stream == ANSWER)
    rest = "".join(text for stream, text in chunks if stream == REST)
    assert answer == "Let me look.\nTwo files.\n"  # a later step's text on its own line; no header
    assert rest == ("thinking\n  [tool call] list_dir({})\n  [tool result] a\n    b\n"
                    "[turn failed SERVER] boom\n  fix: the DeepSeek server is having trouble; retry later\n")
    # Both streams on one terminal (2>&1): in write order, nothing glues onto an unfinished line.
    assert "".join(text for _, text in chunks) == (
        "thinking\nLet me look.\n  [tool call] list_dir({})\n  [tool result] a\n    b\nTwo files.\n"
        "[turn failed SERVER] boom\n  fix: the DeepSeek server is having trouble; retry later\n"
    )
    assert split.end() == ""


def test_answer_split_renders_markdown_for_a_terminal_in_whole_lines() -> None:
    """``-p`` with stdout a colour terminal: the answer as Markdown, a line once its newline arrives; a held
    line ends where anything else is shown, and at the end of the turn."""
    split = AnswerSplit(Renderer(color=False), markdown=True)
    events = (
        ev.TurnStart(1, "x"),
        ev.StepStart(1, 1),
        ev.TextDelta("# Pl"),
        ev.TextDelta("an\nSome **bold"),
        ev.TextDelta("** here"),
        ev.ToolCallStart(1, "c1", "list_dir", "{}"),
        ev.ToolResult(1, "c1", "list_dir", "a"),
        ev.StepStart(1, 2),
        ev.TextDelta("`code` at the end"),
        end(1, Completed().to_dict()),
    )
    chunks = [chunk for event in events for chunk in split.render(event)] + [(ANSWER, split.end())]
    answer = "".join(terminal_text(text) for stream, text in chunks if stream == ANSWER)
    assert answer == ("\x1b[1;4mPlan\x1b[0m\nSome \x1b[1mbold\x1b[0m here\n"
                      "\x1b[36mcode\x1b[0m at the end\n")
    assert "".join(terminal_text(text) for _, text in chunks) == (
        "\x1b[1;4mPlan\x1b[0m\nSome \x1b[1mbold\x1b[0m here\n  [tool call] list_dir({})\n  [tool result] a\n"
        "\x1b[36mcode\x1b[0m at the end\n"
    )
    assert split.end() == ""


# --- the one sanitizer (every sink calls terminal_text) -------------------------------------------------

UNSAFE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")
HOSTILE = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.sampled_from("\x1b\x07\x9b\x9d\x90\r\n\t\u202a\u202e\u2066\u2069\u200b\u200d\u2060\ufeff\U000e0041"),
        st.characters(categories=UNSAFE_CATEGORIES),  # type: ignore[arg-type]
    )
)


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in UNSAFE_CATEGORIES and char not in "\n\t"


@given(HOSTILE)
def test_sanitized_text_holds_no_unsafe_character_and_sanitizing_is_idempotent(text: str) -> None:
    once = sanitize(text)
    assert not any(_unsafe(char) for char in once), ascii(once)
    assert "\r" not in once and "\x1b" not in once
    assert sanitize(once) == once


@given(HOSTILE, HOSTILE, HOSTILE)
def test_styled_text_carries_only_dsh_escapes(before: str, inside: str, after: str) -> None:
    painted = terminal_text(before + styled(inside, "dim") + after)
    stripped = painted.replace(DIM, "").replace(RESET, "")
    assert not any(_unsafe(char) for char in stripped), ascii(painted)
    assert stripped == sanitize(before) + sanitize(inside) + sanitize(after)


def test_every_unsafe_code_point_is_made_visible() -> None:
    missed = [
        f"U+{code:04X}" for code in range(sys.maxunicode + 1)
        if _unsafe(chr(code)) and sanitize(chr(code)) == chr(code)
    ]
    assert missed == []


def test_terminal_escapes_become_visible_text() -> None:
    hostile = "a\x1b]52;c;ZXZpbA==\x07b\x1b]0;pwned\x07c\x1b[2Jd\x1bP+q544e\x1b\\e\u202egnp.exe\u2066x\u200by"
    assert sanitize(hostile) == (
        "a\u241b]52;c;ZXZpbA==\u2407b\u241b]0;pwned\u2407c\u241b[2Jd\u241bP+q544e\u241b\\e<U+202E>gnp.exe<U+2066>x"
        "<U+200B>y"
    )


# --- approvals show the whole command ------------------------------------------------------------------


def test_a_long_run_of_spaces_is_counted_and_must_be_viewed() -> None:
    command = "ls" + " " * 3000 + "; echo EVIL > f"
    approval = approval_question(command, rows=24, cols=80)
    assert approval.must_view
    assert approval.question == "  [approve] run_shell: command is 1 line / 3017 chars \u2014 v to view  (v / n) "
    assert approval.view == "  [command] run_shell, 1 line / 3017 chars:\n      ls\u2420\u00d73000; echo EVIL > f\n"
    assert approval.viewed_question == "  [approve] run_shell: the command above (1 line / 3017 chars)  (y / n / a) "


def test_many_newlines_are_counted_and_must_be_viewed() -> None:
    command = "ls -la" + "\n" * 60 + "echo EVIL > f"
    approval = approval_question(command, rows=24, cols=80)
    assert approval.must_view
    assert approval.view == (
        "  [command] run_shell, 61 lines / 79 chars:\n      ls -la\n      (59 blank lines)\n      echo EVIL > f\n"
    )


def test_short_runs_stay_inline_and_tabs_are_shown() -> None:
    assert shown_command("a  b\tc\n\nd") == ["a  b\u2409c", "", "d"]
    assert approval_question("for f in *; do\n    echo $f\ndone").question == (
        "  [approve] run_shell: for f in *; do\n          echo $f\n      done  (y / n / a) "
    )


def test_a_command_taller_than_the_screen_must_be_viewed() -> None:
    command = "\n".join(f"echo {n}" for n in range(30))
    assert approval_question(command, rows=24, cols=80).must_view
    assert not approval_question(command, rows=60, cols=80).must_view
    assert approval_question("x" * 2001, rows=200, cols=200).must_view


@pytest.mark.parametrize(
    ("code", "detail", "endpoint", "sources", "fix"),
    [
        ("TRANSPORT", "refused", "http://127.0.0.1:1", {"base_url": "DEEPSEEK_BASE_URL (environment)"},
         "  fix: nothing is listening at 127.0.0.1:1 — check DEEPSEEK_BASE_URL (environment)"),
        ("AUTH", None, "https://api.deepseek.com", {"api_key": "api_key in /home/u/.config/dsh/config.toml"},
         "  fix: the API key was refused — check api_key in /home/u/.config/dsh/config.toml"),
        ("AUTH", None, "https://api.deepseek.com", {},
         "  fix: check your API key (DEEPSEEK_API_KEY, or api_key in config.toml)"),
        ("TRANSPORT", "plain-http", "https://127.0.0.1:8765", {},
         "  fix: the server speaks plain HTTP — did you mean http://127.0.0.1:8765?"),
        ("TRANSPORT", "certificate", "https://127.0.0.1:8443", {},
         "  fix: trust the CA that issued it: point SSL_CERT_FILE at a bundle that holds that CA, or add the CA "
         "to the OS trust store (update-ca-certificates on Debian)"),
        ("TRANSPORT", "certificate-name", "https://127.0.0.1:8443", {"base_url": "--base-url (flag)"},
         "  fix: the certificate is for other host names — use one it names in --base-url (flag), or the server "
         "needs a certificate for 127.0.0.1"),
        ("TRANSPORT", "certificate-expired", "https://127.0.0.1:8443", {},
         "  fix: the server's certificate has expired and must be renewed there (if it looks current, check this "
         "machine's clock)"),
        ("TRANSPORT", "certificate-not-yet-valid", "https://127.0.0.1:8443", {},
         "  fix: the certificate is not valid yet — check this machine's clock, or the dates of the server's "
         "certificate"),
        ("TRANSPORT", "name-not-found", "https://api.deepseek.invalid", {"base_url": "--base-url (flag)"},
         "  fix: the host name api.deepseek.invalid does not exist — check --base-url (flag)"),
        ("TRANSPORT", "invalid-url", "htps://x", {"base_url": "base_url in /home/u/.config/dsh/config.toml"},
         "  fix: the URL is not valid — check base_url in /home/u/.config/dsh/config.toml"),
        ("PROXY", "proxy-auth", "http://***@127.0.0.1:3128", {"proxy": "HTTPS_PROXY (environment)"},
         "  fix: the proxy refused the credentials — check the user:password in HTTPS_PROXY (environment)"),
        ("PROXY", "refused", "http://***@127.0.0.1:3128", {"proxy": "--proxy (flag)"},
         "  fix: nothing is listening at the proxy 127.0.0.1:3128 — check --proxy (flag)"),
        ("PROXY", None, "http://127.0.0.1:3128", {"proxy": "proxy in /etc/dsh.toml"},
         "  fix: the proxy failed the request — check the proxy, or unset proxy in /etc/dsh.toml"),
        ("TRANSPORT", None, "http://127.0.0.1:1", {}, None),  # reset, timeouts: nothing to fix
    ],
)
def test_fix_line_names_where_the_setting_came_from(code, detail, endpoint, sources, fix) -> None:
    reason = EndReason.from_dict(Failed(code, "msg", 1, detail=detail, endpoint=endpoint).to_dict())
    assert fix_line(reason, sources) == fix
    text = run(Renderer(color=False, sources=sources), ev.TurnStart(2, "x"), end(2, reason.to_dict()))
    assert text == f"[main turn 2] [turn failed {code}] msg\n" + (f"{fix}\n" if fix else "")
