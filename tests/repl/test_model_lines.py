"""DeepSeek's current models (issue 37, part 1): the default, the model table, the legacy-name line at start, and
the first turn's check of the model against the endpoint's ``GET /models`` (agent_loop/model_check.py).

Every run is the real ``dsh`` against the real loopback fault server; no mocks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsh.agent_loop.model_check import MAX_NAME_CHARS, MAX_NAMES, listed_names, not_listed_line
from dsh.llm.defaults import DEFAULT_MODEL
from dsh.llm.endpoint import legacy_note, legacy_warning
from dsh.llm.loopback.fault_server import FaultServer, closed_port
from dsh.llm.models import MODELS, model_info
from tests.repl.test_cli import dsh, write_config

KEY = "sk-modelLinesKey0000000000000000"
LEGACY = ('model deepseek-v4-flash is a legacy name: DeepSeek serves it with deepseek-flash (V4.1-Flash) at Flash '
          'prices; set model = "deepseek-flash"')


def _ports(text: str) -> str:
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)


# --- the default and the table ---------------------------------------------------------------------------------


def test_the_default_model_is_deepseek_flash_and_the_table_holds_each_known_model() -> None:
    assert DEFAULT_MODEL == "deepseek-flash"
    flash, pro = MODELS["deepseek-flash"], MODELS["deepseek-v4-pro"]
    assert (flash.context_window, flash.output_limit, flash.images, flash.served_by) == (1_048_576, 393_216, True, None)
    assert (pro.context_window, pro.output_limit, pro.images, pro.served_by) == (1_048_576, 393_216, False, None)
    for legacy in ("deepseek-v4-flash", "deepseek-v4-flash-vision-exp"):
        info = MODELS[legacy]
        assert info.served_by == "deepseek-flash"
        assert (info.peak, info.off_peak, info.images) == (flash.peak, flash.off_peak, True)  # at Flash prices
    assert legacy_note("deepseek-flash") is None and legacy_note("deepseek-v4-pro") is None
    assert legacy_note("deepseek-v4-flash") == LEGACY
    assert model_info("deepseek-v4-flash") == MODELS["deepseek-v4-flash"]


def test_the_legacy_line_is_for_deepseeks_host_only() -> None:
    assert legacy_warning("deepseek-v4-flash", "https://api.deepseek.com") == LEGACY
    assert legacy_warning("deepseek-v4-flash", "https://api.deepseek.com/v1", "DSH_MODEL (environment)") == (
        f"{LEGACY} where the model is set: DSH_MODEL (environment)")
    for other in ("http://127.0.0.1:4000", "https://openrouter.ai/api/v1", "https://api.deepseek.com.evil.example"):
        assert legacy_warning("deepseek-v4-flash", other) is None
    assert legacy_warning("deepseek-flash", "https://api.deepseek.com") is None


# --- the legacy line at start -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["print", "piped"])
def test_a_legacy_name_gets_one_warning_line_at_start_saying_where_the_model_was_set(home: Path, mode: str) -> None:
    # DeepSeek's host, reached through a proxy that refuses: the line comes before any request.
    write_config(home, "max_retries = 0\n")
    with closed_port() as port:
        args = ("-p", "hi") if mode == "print" else ()
        result = dsh(home, *args, stdin="" if mode == "print" else "hi\n", DEEPSEEK_API_KEY=KEY,
                     DEEPSEEK_BASE_URL="https://api.deepseek.com", DSH_MODEL="deepseek-v4-flash",
                     HTTPS_PROXY=f"http://127.0.0.1:{port}", NO_PROXY="")
    lines = result.stderr.splitlines() if mode == "print" else (result.stderr + result.stdout).splitlines()
    warnings = [line for line in lines if "legacy name" in line]
    assert warnings == [f"dsh: warning: {LEGACY} where the model is set: DSH_MODEL (environment)"], result
    assert lines[0] == warnings[0]


def test_no_legacy_line_for_another_server(home: Path, fault: FaultServer) -> None:
    fault.models = ("deepseek-v4-flash",)
    result = dsh(home, "-p", "hi", "--model", "deepseek-v4-flash", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=fault.url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "Hello! How can I help you today?\n", "")


# --- the first turn's GET /models -----------------------------------------------------------------------------------


def test_a_model_the_endpoint_does_not_list_gets_one_notice_line(home: Path, fault: FaultServer) -> None:
    result = dsh(home, "-p", "hi", "--model", "deepseek-v9", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=fault.url)
    assert (result.returncode, result.stdout) == (0, "Hello! How can I help you today?\n")
    assert _ports(result.stderr) == ("dsh: warning: model deepseek-v9 is not listed by GET /models at "
                                     "http://127.0.0.1:<port>; it lists deepseek-flash, deepseek-v4-pro\n")
    assert [r.path for r in fault.account_requests] == ["/models"]


def test_the_check_runs_once_per_session(home: Path, fault: FaultServer) -> None:
    result = dsh(home, "--model", "deepseek-v9", stdin="one\ntwo\n", DEEPSEEK_API_KEY=KEY,
                 DEEPSEEK_BASE_URL=fault.url)
    assert result.returncode == 0, result
    assert result.stdout.count("is not listed by GET /models") == 1
    assert len(fault.requests) == 2 and [r.path for r in fault.account_requests] == ["/models"]


def test_a_listed_model_gets_no_line(home: Path, fault: FaultServer) -> None:
    result = dsh(home, "-p", "hi", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=fault.url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "Hello! How can I help you today?\n", "")
    assert [r.path for r in fault.account_requests] == ["/models"]


def test_no_line_when_models_is_not_served(home: Path) -> None:
    srv = FaultServer(default="text", models=None).start_in_thread()
    try:
        result = dsh(home, "-p", "hi", "--model", "deepseek-v9", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=srv.url)
    finally:
        srv.stop()
    assert (result.returncode, result.stdout, result.stderr) == (0, "Hello! How can I help you today?\n", "")
    assert [r.behaviour for r in srv.account_requests] == ["not_found"]


def test_no_line_and_no_failed_turn_when_models_fails(home: Path) -> None:
    srv = FaultServer(default="text", account="unauthorized").start_in_thread()
    try:
        result = dsh(home, "-p", "hi", "--model", "deepseek-v9", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=srv.url)
    finally:
        srv.stop()
    assert (result.returncode, result.stdout, result.stderr) == (0, "Hello! How can I help you today?\n", "")


def test_hostile_model_names_are_bounded_in_count_and_length_and_kept_on_one_line(home: Path) -> None:
    names = [f"evil-{i}\x1b[31m\n{'x' * 500}" for i in range(40)]
    srv = FaultServer(default="text", models=names).start_in_thread()
    try:
        result = dsh(home, "-p", "hi", "--model", "deepseek-v9", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=srv.url)
    finally:
        srv.stop()
    assert result.returncode == 0 and result.stdout == "Hello! How can I help you today?\n"
    [line] = result.stderr.splitlines()
    assert "\x1b" not in line and "␛[31m" in line  # the front end's sanitizer pictured the escape
    listed = line.split("; it lists ", 1)[1]
    shown, more = listed.rsplit(" and ", 1)
    assert more == "30 more"
    assert len(shown.split(", ")) == MAX_NAMES
    assert all(len(name) <= MAX_NAME_CHARS for name in shown.split(", "))
    assert len(line) < 1000


def test_the_line_builders_bound_what_they_show() -> None:
    assert listed_names({"data": [{"id": "a"}, {"id": 3}, "b", {"id": "c"}]}) == ["a", "c"]
    assert listed_names({"data": "nope"}) is None and listed_names([1]) is None
    assert not_listed_line("m", [], "http://x") is None  # an empty list is no evidence
    assert not_listed_line("m", ["m", "n"], "http://x") is None
    line = not_listed_line("m", ["sk-secret-key-123456 here", "n"], "http://x", ("sk-secret-key-123456",))
    assert line is not None and "sk-secret" not in line


def test_the_look_at_models_is_kept_out_of_a_recording(home: Path, fault: FaultServer) -> None:
    trace = home / "trace.jsonl"
    result = dsh(home, "-p", "hi", "--model", "deepseek-v9", "--record", str(trace), DEEPSEEK_API_KEY=KEY,
                 DEEPSEEK_BASE_URL=fault.url)
    assert result.returncode == 0 and "is not listed" in result.stderr
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["path"] for r in records if r.get("type") == "request"] == ["/chat/completions"]
    assert [r.path for r in fault.account_requests] == ["/models"]
