"""What a user sees of the dialect (deepseek | openai) and DeepSeek's concurrency cap (issue 37 parts 2 and 4):
the config's precedence and sources, the real ``dsh -p``'s lines against the loopback fault server taught
DeepSeek's 429, and ``dsh doctor``'s configuration step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.llm.endpoint import endpoint_for_url, legacy_warning
from dsh.llm.loopback.fault_server import FaultServer
from dsh.repl.config import ConfigError, load_config
from dsh.repl.turn_end import FIX_CONCURRENCY_CAP, FIX_RATE_LIMIT
from tests.reliability.dsh_harness import config_text, make_home, run_dsh

CAP_LINE = ("[turn failed RATE_LIMIT] Rate Limit Reached: the account's cap on concurrent requests to deepseek-flash "
            "was reached; this dsh had 1 request in flight")


def test_the_dialect_goes_by_the_host_unless_set_and_says_where_it_was_set(tmp_path: Path):
    config = tmp_path / "config.toml"
    config.write_text('dialect = "openai"\n', encoding="utf-8")
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    deepseek = load_config({}, {}, require_key=False, config_path=empty)
    assert (deepseek.dialect, deepseek.sources.get("dialect")) == ("deepseek", None)
    local = load_config({"base_url": "http://127.0.0.1:9"}, {}, require_key=False, config_path=empty)
    assert (local.dialect, local.sources.get("dialect")) == ("openai", None)
    filed = load_config({}, {}, require_key=False, config_path=config)
    assert (filed.dialect, filed.sources["dialect"]) == ("openai", f"dialect in {config}")
    env = load_config({}, {"DSH_DIALECT": "DeepSeek"}, require_key=False, config_path=config)
    assert (env.dialect, env.sources["dialect"]) == ("deepseek", "DSH_DIALECT (environment)")
    flag = load_config({"dialect": "openai"}, {"DSH_DIALECT": "deepseek"}, require_key=False, config_path=config)
    assert (flag.dialect, flag.sources["dialect"]) == ("openai", "--dialect (flag)")


def test_a_dialect_that_is_neither_and_a_negative_bound_are_config_errors(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("max_parallel = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"max_parallel"):
        load_config({}, {}, require_key=False, config_path=bad)
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"DSH_DIALECT"):
        load_config({}, {"DSH_DIALECT": "anthropic"}, require_key=False, config_path=empty)


# --- what a user sees ------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FaultServer]:
    started = FaultServer().start_in_thread()
    try:
        yield started
    finally:
        started.stop()


def test_dsh_p_names_the_concurrency_cap_under_the_deepseek_dialect(server: FaultServer, tmp_path: Path):
    server.push("http_429_concurrency")
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["-p", "hi", "--dialect", "deepseek"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 1
    assert run.stderr.splitlines()[-2:] == [CAP_LINE, FIX_CONCURRENCY_CAP]


def test_dsh_p_keeps_the_generic_line_under_the_openai_dialect(server: FaultServer, tmp_path: Path):
    server.push("http_429_concurrency")
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["-p", "hi"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 1
    assert run.stderr.splitlines()[-2:] == ["[turn failed RATE_LIMIT] Rate Limit Reached", FIX_RATE_LIMIT]


def test_dsh_p_retries_the_cap_with_backoff_as_before(server: FaultServer, tmp_path: Path):
    server.push("http_429_concurrency", "text")
    home = make_home(tmp_path, config_text(max_retries=1))
    run = run_dsh(home, ["-p", "hi"], env={"DEEPSEEK_BASE_URL": server.url, "DSH_DIALECT": "deepseek"})
    assert run.returncode == 0
    [retry] = run.stderr.splitlines()
    assert retry.startswith("[retry 1/1 in ") and retry.endswith(
        "RATE_LIMIT: Rate Limit Reached: the account's cap on concurrent requests to deepseek-flash was reached; "
        "this dsh had 1 request in flight")


def test_doctor_shows_the_dialect_and_where_it_came_from(server: FaultServer, tmp_path: Path):
    home = make_home(tmp_path, config_text())
    by_host = run_dsh(home, ["doctor"], env={"DEEPSEEK_BASE_URL": server.url})
    set_by_env = run_dsh(home, ["doctor"], env={"DEEPSEEK_BASE_URL": server.url, "DSH_DIALECT": "deepseek"})
    [line] = [line for line in by_host.stdout.splitlines() if line.startswith("✓ configuration: ")]
    assert line.startswith(f"✓ configuration: base_url {server.url} (DEEPSEEK_BASE_URL (environment)); model "
                           "deepseek-flash (default); dialect openai (default for this host); max_retries 0 ")
    assert "; dialect deepseek (DSH_DIALECT (environment)); " in set_by_env.stdout.splitlines()[0]


def test_legacy_names_are_read_under_the_deepseek_dialect_and_the_server_is_never_called_deepseek():
    note = legacy_warning("deepseek-v4-flash", "http://127.0.0.1:9", None, "deepseek")
    assert note is not None and note.startswith("model deepseek-v4-flash is a legacy name: DeepSeek serves it with ")
    assert legacy_warning("deepseek-v4-flash", "http://127.0.0.1:9", None, "openai") is None
    assert endpoint_for_url("http://127.0.0.1:9").name is None  # the dialect names nobody
