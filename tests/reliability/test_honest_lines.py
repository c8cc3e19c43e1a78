"""Honest lines, round 4 (issue 35, section 5): the real ``dsh`` against the loopback fault server.

Each test runs ``dsh -p`` (or ``dsh doctor``) as a child, isolated in its own HOME, with the fault server as
its base URL, and asserts the exact lines a user reads on stderr, what stdout carries, and the exit status:

* a reset while a tool call is still streaming (nothing on screen) is retried like any pre-content failure;
  reasoning or text on screen still make it final;
* ``Retry-After`` is honoured up to ``DEFAULT_RETRY_AFTER_MAX`` (60 s); past it the turn ends at once, saying when the
  server asked to be retried; hostile values fall back to the backoff;
* an in-stream ``invalid_api_key`` error event is AUTH, as the HTTP 401 it stands for;
* a reply without usage counts as a request whose tokens and cost are unknown (``null``), never zero;
* ``dsh doctor`` names DeepSeek's key shape only when the endpoint is DeepSeek;
* a gateway's relayed upstream QUOTA names the gateway's upstream account (real LiteLLM:
  tests/llm/test_litellm_gateway.py).
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.reliability.dsh_harness import Run, config_text, make_home, run_dsh

pytestmark = pytest.mark.slow

HELLO = "Hello! How can I help you today?"
RESET = "ReadError: BrokenResourceError: [Errno 104] Connection reset by peer"
FIX_RATE = "  fix: requests are arriving too fast; back off and try again shortly"
FIX_AUTH = "  fix: the API key was refused — check DEEPSEEK_API_KEY (environment)"
BACKOFF = r"0\.[56]"  # the first backoff: 0.5 s plus up to 10 % jitter, at one decimal


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    srv = FaultServer().start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def fault(server: FaultServer) -> FaultServer:
    server.clear_script()
    server.requests.clear()  # each test counts its own requests
    return server


def dsh(server: FaultServer, tmp_path: Path, *args: str, retries: int = 1, key: str | None = None) -> Run:
    home = make_home(tmp_path, config_text(max_retries=retries))
    options = {"key": key} if key is not None else {}
    command = list(args)
    at = 1 if command[:1] == ["doctor"] else 0  # a subcommand comes before the options
    command[at:at] = ["--base-url", server.url]
    return run_dsh(home, command, label="honest", timeout=120, **options)


def stream_failed(server: FaultServer) -> str:
    return f"stream from the endpoint at {server.url} failed: {RESET}"


# --- 1. a reset mid tool call ---------------------------------------------------------------------------


def test_a_reset_while_a_tool_call_streams_is_retried_and_the_turn_completes(fault, tmp_path):
    fault.push(Behaviour("reset_mid_tool_call", name="read_file", arguments='{"path": "notes.txt"}'),
               Behaviour("tool_call", name="read_file", arguments='{"path": "notes.txt"}'), "text")
    run = dsh(fault, tmp_path, "-p", "read my notes")
    assert (run.returncode, run.stdout) == (0, HELLO + "\n")
    retry, *rest = run.stderr.splitlines()
    assert re.fullmatch(rf"\[retry 1/1 in {BACKOFF}s\] TRANSPORT: " + re.escape(stream_failed(fault)), retry)
    # The half call was dropped: the tool ran once, from the whole call of the second attempt.
    assert rest == ["Need the weather; call it.", '  [tool call] read_file({"path": "notes.txt"})',
                    "  [tool result] reliability notes"]
    assert len(fault.requests) == 3


def test_a_reset_mid_tool_call_after_reasoning_on_screen_still_ends_the_turn(fault, tmp_path):
    fault.push(Behaviour("reset_mid_tool_call", reasoning="Let me look."), "text")
    run = dsh(fault, tmp_path, "-p", "read my notes")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.splitlines() == ["Let me look.", f"[turn failed TRANSPORT] {stream_failed(fault)}"]
    assert len(fault.requests) == 1


def test_a_reset_mid_tool_call_after_text_on_screen_still_ends_the_turn(fault, tmp_path):
    fault.push(Behaviour("reset_mid_tool_call", text="Let me look."), "text")
    run = dsh(fault, tmp_path, "-p", "read my notes")
    assert (run.returncode, run.stdout) == (1, "Let me look.\n")
    assert run.stderr.splitlines() == [f"[turn failed TRANSPORT] {stream_failed(fault)}"]
    assert len(fault.requests) == 1


# --- 4. Retry-After -------------------------------------------------------------------------------------


def test_a_retry_after_above_the_backoff_cap_is_waited_for(fault, tmp_path):
    # 11 s: above the 10 s backoff cap, below the 60 s Retry-After cap (today it was retried after 0.5 s).
    fault.push(Behaviour("http_429", retry_after="11"), "text")
    run = dsh(fault, tmp_path, "-p", "hi")
    assert (run.returncode, run.stdout) == (0, HELLO + "\n")
    assert run.stderr.splitlines() == ["[retry 1/1 in 11.0s] RATE_LIMIT: Rate Limit Reached"]


def test_a_short_retry_after_on_a_503_is_waited_for(fault, tmp_path):
    fault.push(Behaviour("http_503", retry_after="2"), "text")
    run = dsh(fault, tmp_path, "-p", "hi")
    assert (run.returncode, run.stdout) == (0, HELLO + "\n")
    assert run.stderr.splitlines() == ["[retry 1/1 in 2.0s] SERVER: Server Overloaded, please try again later"]


def test_a_retry_after_as_an_http_date_is_waited_for(fault, tmp_path):
    # The date is written when the 429 is answered (a date fixed before dsh starts is in the past on a slow
    # machine): whole seconds, so 2-3 s after the answer.
    fault.push(Behaviour("http_429", retry_after_date_in="3"), "text")
    run = dsh(fault, tmp_path, "-p", "hi")
    assert (run.returncode, run.stdout) == (0, HELLO + "\n")
    (retry,) = run.stderr.splitlines()
    assert re.fullmatch(r"\[retry 1/1 in [123]\.\ds\] RATE_LIMIT: Rate Limit Reached", retry)


def test_a_retry_after_past_the_cap_ends_the_turn_saying_when_to_retry(fault, tmp_path):
    fault.push(Behaviour("http_429", retry_after="120"), "text")
    run = dsh(fault, tmp_path, "-p", "hi", retries=5)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.splitlines() == [
        "[turn failed RATE_LIMIT] Rate Limit Reached (the server asked to retry after 2 min)", FIX_RATE]
    assert len(fault.requests) == 1


def test_an_http_date_an_hour_away_ends_the_turn_in_json_too(fault, tmp_path):
    when = email.utils.formatdate(time.time() + 3600, usegmt=True)
    fault.push(Behaviour("http_503", retry_after=when))
    run = dsh(fault, tmp_path, "-p", "hi", "--output-format", "json", retries=5)
    assert run.returncode == 1
    reason = json.loads(run.stdout)["reason"]
    assert (reason["code"], reason["message"]) == (
        "SERVER", "Server Overloaded, please try again later (the server asked to retry after 60 min)")


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "1e400", "soon", "0", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_a_hostile_retry_after_falls_back_to_the_backoff(fault, tmp_path, value):
    fault.push(Behaviour("http_429", retry_after=value), "text")
    run = dsh(fault, tmp_path, "-p", "hi")
    assert (run.returncode, run.stdout) == (0, HELLO + "\n")
    (retry,) = run.stderr.splitlines()
    assert re.fullmatch(rf"\[retry 1/1 in {BACKOFF}s\] RATE_LIMIT: Rate Limit Reached", retry)


def test_an_absurd_retry_after_ends_the_turn_in_bounded_words(fault, tmp_path):
    fault.push(Behaviour("http_429", retry_after="9" * 300))
    run = dsh(fault, tmp_path, "-p", "hi")
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "[turn failed RATE_LIMIT] Rate Limit Reached (the server asked to retry after more than a day)", FIX_RATE]


# --- 5. in-stream error events ----------------------------------------------------------------------------


def test_an_in_stream_invalid_api_key_event_is_auth(fault, tmp_path):
    # OpenAI's shape: a generic type, the specific code.
    fault.push(Behaviour("error_event", message="Incorrect API key provided: sk-***abcd.",
                         type="invalid_request_error", code="invalid_api_key"))
    run = dsh(fault, tmp_path, "-p", "hi", retries=2)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.splitlines() == ["[turn failed AUTH] Incorrect API key provided: sk-***abcd.", FIX_AUTH]
    assert len(fault.requests) == 1  # AUTH is never retried


@pytest.mark.parametrize(
    ("error_type", "code", "expected"),
    [
        ("authentication_error", "invalid_request_error", "AUTH"),  # DeepSeek's body: a specific type, generic code
        ("insufficient_quota", "insufficient_quota", "QUOTA"),
        ("requests", "rate_limit_exceeded", "RATE_LIMIT"),
        ("invalid_request_error", "rate_limit", "RATE_LIMIT"),
        ("invalid_request_error", "permission_denied", "AUTH"),
        ("invalid_request_error", "context_length_exceeded", "CONTEXT_WINDOW_EXCEEDED"),
        ("invalid_request_error", "invalid_value", "INVALID_REQUEST"),
    ],
)
def test_in_stream_error_codes_map_as_their_http_statuses(fault, tmp_path, error_type, code, expected):
    fault.push(Behaviour("error_event", message="refused", type=error_type, code=code))
    run = dsh(fault, tmp_path, "-p", "hi", "--output-format", "json", retries=0)
    assert run.returncode == 1
    assert json.loads(run.stdout)["reason"]["code"] == expected


# --- 6. usage the endpoint never sent --------------------------------------------------------------------


def test_a_reply_without_usage_counts_the_request_and_says_unknown(fault, tmp_path):
    fault.push(Behaviour("text", usage="none"))
    run = dsh(fault, tmp_path, "-p", "hi", "--output-format", "json")
    assert run.returncode == 0
    answer = json.loads(run.stdout)
    assert answer["usage"] == {"requests": 1, "prompt_tokens": None, "cached_tokens": None, "output_tokens": None,
                               "reasoning_tokens": None}
    assert answer["cost_usd"] is None


def test_a_reply_with_usage_keeps_its_numbers(fault, tmp_path):
    fault.push("text")
    run = dsh(fault, tmp_path, "-p", "hi", "--output-format", "json")
    answer = json.loads(run.stdout)
    assert answer["usage"] == {"requests": 1, "prompt_tokens": 12, "cached_tokens": 8, "output_tokens": 7,
                               "reasoning_tokens": 0}
    assert answer["cost_usd"] is not None and answer["cost_usd"] > 0


def test_cost_says_tokens_are_unknown_when_the_endpoint_sent_no_usage(fault, tmp_path):
    fault.push(Behaviour("text", usage="none"))
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["--base-url", fault.url], ["hi", "/cost"], label="cost", timeout=120)
    assert run.returncode == 0
    assert run.stdout.splitlines()[-1] == "1 request: tokens unknown (the endpoint sent no usage)"


# --- 3. doctor's key shape --------------------------------------------------------------------------------


def configuration_line(run: Run) -> str:
    (line,) = [line for line in run.stdout.splitlines() if " configuration: " in line]
    return line


@pytest.mark.parametrize("key", ["sk-or-v1-0123456789abcdef", "not-a-deepseek-key-at-all", "sk-" + "0" * 32])
def test_doctor_names_no_deepseek_key_shape_for_another_server(fault, tmp_path, key):
    run = dsh(fault, tmp_path, "doctor", key=key)
    line = configuration_line(run)
    assert "DeepSeek" not in line
    assert line.endswith(f"key {'sk-' if key.startswith('sk-') else ''}***{key[-4:]} "
                         f"(DEEPSEEK_API_KEY (environment); {len(key)} characters)")


def test_doctor_still_flags_whitespace_in_any_key(fault, tmp_path):
    key = "sk-0123456789abcdef 0123456789abcdef"
    run = dsh(fault, tmp_path, "doctor", key=key)
    assert configuration_line(run).endswith(
        "(DEEPSEEK_API_KEY (environment); 36 characters; holds whitespace: a copy-paste accident?)")


def test_doctor_names_deepseeks_key_shape_for_deepseek(tmp_path):
    from dsh.repl.config import load_config
    from dsh.repl.doctor import Doctor

    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "DEEPSEEK_API_KEY": "sk-or-v1-0123456789"}
    config = load_config({"base_url": "https://api.deepseek.com"}, env, require_key=False)
    step = Doctor(config, env).configuration()
    assert step.text.endswith("(DEEPSEEK_API_KEY (environment); 19 characters; sk-…, but not the 32 hex digits "
                              "DeepSeek issues)")


# --- 2. a gateway's upstream out of quota (LiteLLM itself: tests/llm/test_litellm_gateway.py) --------------


def test_a_relayed_upstream_402_names_the_gateways_account_not_the_users(fault, tmp_path):
    fault.push("gateway_upstream_402")
    run = dsh(fault, tmp_path, "-p", "hi")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.splitlines() == [
        "[turn failed QUOTA] litellm.BadRequestError: DeepseekException - Insufficient Balance",
        "  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own account for quota or credit"
        " — check the balance of the upstream account in LiteLLM's configuration"]


def test_a_quota_refusal_of_the_users_own_key_still_names_their_key(fault, tmp_path):
    fault.push(Behaviour("http_402", gateway="litellm"))  # LiteLLM's own refusal: no upstream exception named
    run = dsh(fault, tmp_path, "-p", "hi")
    assert run.stderr.splitlines() == [
        "[turn failed QUOTA] Insufficient Balance",
        "  fix: LiteLLM refused the request for quota or credit — check the account of the key in DEEPSEEK_API_KEY"
        " (environment)"]


def test_a_usage_line_over_some_unreported_requests_shows_what_came_and_no_cost():
    import datetime

    from dsh.agent_loop.usage import UsageTally
    from dsh.llm.events import Usage
    from dsh.llm.models import model_info
    from dsh.repl.usage import usage_line

    tally = UsageTally()
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    tally.add(Usage(prompt_tokens=12, completion_tokens=7, total_tokens=19, prompt_cache_hit_tokens=8),
              "deepseek-v4-flash", model_info("deepseek-v4-flash"), when)
    tally.add(None, "deepseek-v4-flash", model_info("deepseek-v4-flash"), when)
    assert (tally.requests, tally.tokens_known) == (2, False)
    assert usage_line(tally) == "tokens 12 in (8 cached) · 7 out · cache 67% · no usage sent for 1 of 2 requests"
