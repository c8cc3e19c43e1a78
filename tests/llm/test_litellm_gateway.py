"""dsh through a real LiteLLM proxy (a gateway) in front of the loopback fault server, driven as a user drives it.

One proxy serves the module (its start-up takes seconds; tests/llm/litellm_proxy.py). Each test scripts the
fault server (LiteLLM's upstream), runs `dsh -p` (or piped stdin for `/why`) with DEEPSEEK_BASE_URL at the
proxy, and asserts the exact lines a user sees (docs/endpoints.md) and that neither the user's key
(the proxy's master key) nor LiteLLM's own upstream key shows anywhere. docs/endpoints.md shows the same runs.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.leak_check import leak_check
from tests.llm.litellm_proxy import MASTER_KEY, UPSTREAM_KEY, LiteLLMProxy
from tests.reliability.dsh_harness import Home, Run, config_text, make_home, run_dsh

pytestmark = pytest.mark.slow

ANSWER = "Hello! How can I help you today?"
# LiteLLM's words after the upstream's error body, in every relayed HTTP error (\n\n folded to a space).
MODEL_GROUP_FAILED = "LiteLLM: model group 'deepseek-flash' failed with the error above. No fallback was attempted."
UPSTREAM_401 = (
    'litellm.BadRequestError: DeepseekException - {"error": {"message": "Authentication Fails, Your api key: '
    '****abcd is invalid", "type": "authentication_error", "param": null, "code": "invalid_request_error"}} '
    + MODEL_GROUP_FAILED
)
UPSTREAM_429 = (
    'litellm.RateLimitError: RateLimitError: DeepseekException - {"error": {"message": "Rate Limit Reached", '
    '"type": "rate_limit_error", "param": null, "code": "invalid_request_error"}} ' + MODEL_GROUP_FAILED
)
UPSTREAM_500 = (
    'litellm.BadRequestError: DeepseekException - {"error": {"message": "Internal Server Error", "type": '
    '"api_error", "param": null, "code": "invalid_request_error"}} ' + MODEL_GROUP_FAILED
)
# LiteLLM's in-stream error event when its upstream resets the connection mid-stream (the event's message).
RESET_EVENT = (
    "litellm.APIConnectionError: APIConnectionError: DeepseekException - Response payload is not completed: "
    "<TransferEncodingError: 400, message='Not enough data to satisfy transfer length header.'>. "
    "ConnectionResetError(104, 'Connection reset by peer')"
)
FIX_UPSTREAM_AUTH = (
    "  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own credential"
    " — check the upstream key in LiteLLM's configuration"
)
FIX_UPSTREAM_QUOTA = (
    "  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own account for quota or credit"
    " — check the balance of the upstream account in LiteLLM's configuration"
)
# OpenAI's answer for an account out of quota: a 429 that no retry can heal.
QUOTA_429 = Behaviour("http_429", type="insufficient_quota",
                      message="You exceeded your current quota, please check your plan and billing details.")
FIX_SERVER = "  fix: the LiteLLM server is having trouble; retry later"
DOCS = Path(__file__).resolve().parents[2] / "docs"
CALL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # x-litellm-call-id


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultServer]:
    """LiteLLM's upstream: the fault server, answering ``text`` unless a test scripts it."""
    server = FaultServer().start_in_thread()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway(upstream: FaultServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiteLLMProxy]:
    with leak_check():
        proxy = LiteLLMProxy(upstream.url, tmp_path_factory.mktemp("litellm")).start()
        try:
            yield proxy
        finally:
            proxy.stop()


@pytest.fixture
def home(tmp_path: Path, upstream: FaultServer) -> Home:
    upstream.clear_script()
    return make_home(tmp_path, config_text())


def through(gateway: LiteLLMProxy, home: Home, *args: str, lines: list[str] | None = None) -> Run:
    """dsh with the user's key (the proxy's master key) and the proxy as its base URL; no key leaks."""
    run = run_dsh(home, args, lines, key=MASTER_KEY, env={"DEEPSEEK_BASE_URL": gateway.url},
                  label="litellm", timeout=120)
    assert_no_key(home, run)
    return run


def assert_no_key(home: Home, run: Run) -> None:
    """Neither key in what dsh printed, its host log or the session log."""
    written = [run.stdout, run.stderr]
    written += [path.read_text(encoding="utf-8", errors="replace") for path in (home.host_log, *home.session_files())
                if path.exists()]
    for key in (MASTER_KEY, UPSTREAM_KEY):
        assert not [text for text in written if key in text]


def errors(run: Run) -> list[str]:
    return run.stderr.splitlines()


# --- what works ------------------------------------------------------------------------------------------


def test_an_answer_comes_through_and_the_upstream_gets_litellms_key_not_the_users(gateway, upstream, home):
    run = through(gateway, home, "-p", "hi")
    assert (run.returncode, run.stdout, run.stderr) == (0, ANSWER + "\n", "")
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_reasoning_is_streamed_through(gateway, upstream, home):
    upstream.push("reasoning")
    run = through(gateway, home, "-p", "which is greater, 9.8 or 9.11?")
    assert (run.returncode, run.stdout, run.stderr) == (0, "9.8 is greater.\n", "9.8 = 9.80 > 9.11, so 9.8.\n")


def test_a_tool_round_trip_sends_the_result_back_through_the_gateway(gateway, upstream, home):
    upstream.push(Behaviour("tool_call", name="read_file", arguments='{"path": "notes.txt"}'), "text")
    run = through(gateway, home, "-p", "read my notes")
    assert run.returncode == 0 and run.stdout == ANSWER + "\n"
    assert errors(run) == [
        "Need the weather; call it.",
        '  [tool call] read_file({"path": "notes.txt"})',
        "  [tool result] reliability notes",
    ]
    *_, asked, answered = upstream.requests
    assert "tools" in asked.json
    (result,) = [m for m in answered.json["messages"] if m["role"] == "tool"]
    assert result["tool_call_id"] == "call_00_kX3f9Q" and "reliability notes" in result["content"]


def test_openai_shaped_usage_counts_cache_hits_and_their_price(gateway, upstream, tmp_path):
    # LiteLLM rewrites DeepSeek's prompt_cache_hit_tokens into prompt_tokens_details.cached_tokens.
    prices = "[models.deepseek-flash]\ninput_cache_hit = 1.0\ninput_cache_miss = 10.0\noutput = 100.0\n"
    home = make_home(tmp_path, config_text(extra=prices))
    usage = {"prompt_tokens": 1000, "prompt_cache_hit_tokens": 800, "prompt_cache_miss_tokens": 200,
             "completion_tokens": 9, "total_tokens": 1009}
    upstream.push(Behaviour("text", usage=usage))
    run = through(gateway, home, "-p", "hi", "--output-format", "json")
    answer = json.loads(run.stdout)
    assert answer["usage"] == {"requests": 1, "prompt_tokens": 1000, "cached_tokens": 800, "output_tokens": 9,
                               "reasoning_tokens": 0}
    assert answer["cost_usd"] == pytest.approx((800 * 1.0 + 200 * 10.0 + 9 * 100.0) / 1e6)


# --- what fails, and what the user is told ---------------------------------------------------------------


def test_an_upstream_401_is_the_gateways_credential_not_the_users_key(gateway, upstream, home):
    upstream.push("http_401")
    run = through(gateway, home, lines=["hi", "/why"])
    first, fix, why, link = run.stdout.splitlines()
    assert first == f"[main turn 1] [turn failed AUTH] {UPSTREAM_401}"
    assert fix == FIX_UPSTREAM_AUTH
    assert re.fullmatch(rf"last failure \(AUTH, HTTP 401, request id {CALL_ID.pattern}\):", why)
    assert link.startswith("  dsh.llm.errors.LlmError: litellm.BadRequestError: DeepseekException - ")


def test_doctor_says_the_gateway_took_the_key_and_its_upstream_refused_its_own(gateway, upstream, home):
    upstream.push("http_401")  # the doctor's stream step; GET /models is LiteLLM's own answer
    run = through(gateway, home, "doctor")
    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert any(line.startswith("✓ HTTP: GET /models 200 ") for line in lines)
    (stream,) = [line for line in lines if line.startswith("✗ stream: ")]
    assert stream.startswith("✗ stream: [AUTH] LiteLLM accepted your key (GET /models 200), but its upstream "
                             "refused LiteLLM's own credential: litellm.BadRequestError: DeepseekException - ")
    assert FIX_UPSTREAM_AUTH in lines
    assert not [line for line in lines if "DEEPSEEK_API_KEY" in line and "fix:" in line]
    # One line per step, though LiteLLM's message holds blank lines.
    heads = ("✓ ", "✗ ", "– ", "  fix: ", "doctor: ")  # repl/doctor.py's MARKS, a fix, the verdict
    assert [line for line in lines if not line.startswith(heads)] == []


def test_a_429_is_retried_after_the_upstreams_retry_after_that_litellm_relays(gateway, upstream, tmp_path):
    # The fault server answers Retry-After: 2; LiteLLM passes it on only as llm_provider-retry-after.
    home = make_home(tmp_path, config_text(max_retries=1))
    upstream.push("http_429", "text")
    run = through(gateway, home, "-p", "hi")
    assert (run.returncode, run.stdout) == (0, ANSWER + "\n")
    assert errors(run) == [f"[retry 1/1 in 2.0s] RATE_LIMIT: {UPSTREAM_429}"]


def test_a_429_without_retries_left_names_the_rate_limit(gateway, upstream, home):
    upstream.push("http_429")
    run = through(gateway, home, "-p", "hi")
    assert run.returncode == 1
    assert errors(run) == [f"[turn failed RATE_LIMIT] {UPSTREAM_429}",
                           "  fix: requests are arriving too fast; back off and try again shortly"]


@pytest.mark.parametrize("refusal", [Behaviour("http_402"), QUOTA_429], ids=["402", "quota-429"])
def test_an_upstream_quota_refusal_names_the_gateways_upstream_account_not_the_users(gateway, upstream, home,
                                                                                   refusal):
    upstream.push(refusal)
    run = through(gateway, home, "-p", "hi")
    assert run.returncode == 1
    line, fix = errors(run)
    assert line.startswith("[turn failed QUOTA] litellm.") and "Exception - " in line
    assert fix == FIX_UPSTREAM_QUOTA
    assert len(upstream.requests) and upstream.requests[-1].behaviour == refusal.name  # not retried


def test_doctor_says_the_gateway_took_the_key_and_its_upstream_refused_its_account(gateway, upstream, home):
    upstream.push("http_402")
    run = through(gateway, home, "doctor")
    assert run.returncode == 1
    lines = run.stdout.splitlines()
    (stream,) = [line for line in lines if line.startswith("✗ stream: ")]
    assert stream.startswith("✗ stream: [QUOTA] LiteLLM accepted your key (GET /models 200), but its upstream "
                             "refused LiteLLM's own account for quota or credit: litellm.")
    assert FIX_UPSTREAM_QUOTA in lines
    assert not [line for line in lines if "DEEPSEEK_API_KEY" in line and "fix:" in line]


def test_an_upstream_500_names_litellm_not_deepseek(gateway, upstream, home):
    upstream.push("http_500")
    run = through(gateway, home, "-p", "hi")
    assert run.returncode == 1
    assert errors(run) == [f"[turn failed SERVER] {UPSTREAM_500}", FIX_SERVER]


def test_an_error_event_mid_stream_is_the_failure_with_the_relays_message(gateway, upstream, home):
    upstream.push("reset_mid_stream")
    run = through(gateway, home, lines=["hi", "/why"])
    lines = run.stdout.splitlines()
    assert lines[:3] == ["[main turn 1] Half an answer", f"[turn failed SERVER] {RESET_EVENT}", FIX_SERVER]
    assert re.fullmatch(rf"last failure \(SERVER, HTTP 500, request id {CALL_ID.pattern}\):", lines[3])
    # /why keeps the relay's whole event (masked, bounded) beneath the failure.
    assert any('error event: {"error": {"message": "litellm.APIConnectionError: ' in line for line in lines[4:])


def test_a_stalled_upstream_fires_dshs_header_deadline_naming_the_endpoint(gateway, upstream, tmp_path):
    # LiteLLM sends no headers until its upstream does; the first request has not learnt who answers yet.
    home = make_home(tmp_path, config_text(idle=2, first_token=2))
    upstream.push("stall_before_headers")
    run = through(gateway, home, "-p", "hi")
    address = gateway.url.removeprefix("http://")
    assert (run.returncode, errors(run)) == (
        1, [f"[turn failed TIMEOUT] no response headers from the endpoint at {address} within 2s"])


# --- docs/endpoints.md --------------------------------------------------------------------------------------


def test_the_endpoints_page_shows_what_these_runs_print(gateway, upstream, tmp_path):
    # docs/transcripts.py generates the table only with --slow (it needs this proxy): here it is checked.
    sys.path.insert(0, str(DOCS))
    try:
        import transcripts
    finally:
        sys.path.remove(str(DOCS))
    lab = transcripts.Lab(Path(os.path.realpath(tmp_path)))
    try:
        table = transcripts.litellm_table(lab, gateway.url, upstream, MASTER_KEY)
    finally:
        lab.close()
    (shown,) = [text for name, text in transcripts.regions(DOCS / "endpoints.md") if name == "litellm"]
    assert table == shown, "run `python docs/transcripts.py --slow --only litellm --write` and review the diff"
