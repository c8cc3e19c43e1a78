"""Claude Code on DeepSeek's key: ``endpoint = "deepseek"`` (docs/subagents.md, "Claude Code on DeepSeek").

The table is read against a parent context (where the base URL comes from, which key, which model, what is
refused); the scripted CLI records the child's environment; the real ``claude`` binary from npm (``make
npm-agents``, as the claude-agent-acp tests use it) runs against the loopback Anthropic fake served under
``/anthropic``, as DeepSeek serves it, and must send every request there with the DeepSeek key as its token,
while the key appears in no line, log or diagnostic.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.subagent import ParentContext, SubagentConfigError, build_provider
from dsh.agent_loop.subagent.claude_code import ClaudeCodeConfig, from_config
from dsh.agent_loop.subagent.result import SubagentFailure, SubagentResult
from dsh.agent_loop.subagent.tool import foreground_output
from dsh.llm import chain_links, redact_text
from fixtures.fake_anthropic import FakeAnthropic
from tests.agent_loop.subagent.product_support import (
    FAKE_CLAUDE_CLI,
    FAST_GRACES,
    PARENT_CANARY,
    STDERR_CANARY,
    assert_no_canary,
    claude_failure,
    request,
    run_once,
)
from tests.real_parts import missing

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

KEY = "sk-5eedcafe0123456789abcdef0badf00d"  # the DeepSeek canary key: a real key's shape
OTHER_SECRET = "parent-other-secret-77aa"  # another of the parent's secrets: never the child's
ON_DEEPSEEK = "Product subagent failure (product: Claude Code; endpoint: DeepSeek (Anthropic format); "
DEEPSEEK = ParentContext(model="deepseek-v4-pro", base_url="https://api.deepseek.com/beta", api_key=KEY)
REPO = Path(__file__).resolve().parents[3]
INSTALL = "make npm-agents (npm install --prefix .venv/npm @agentclientprotocol/claude-agent-acp@0.101.0)"


def settings(table: dict[str, Any], parent: ParentContext = DEEPSEEK) -> ClaudeCodeConfig:
    return ClaudeCodeConfig.from_mapping("ds", {"endpoint": "deepseek", **table}, parent)


# -- the table ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://api.deepseek.com", "https://api.deepseek.com/anthropic"),
        ("https://api.deepseek.com/beta", "https://api.deepseek.com/anthropic"),
        ("https://user:pw@api.deepseek.com:443/v1", "https://api.deepseek.com:443/anthropic"),
        (None, "https://api.deepseek.com/anthropic"),
    ],
)
def test_the_base_url_follows_the_parents_deepseek_origin(base_url: str | None, expected: str) -> None:
    parent = ParentContext(model="deepseek-flash", base_url=base_url, api_key=KEY)
    endpoint = settings({}, parent).endpoint
    assert endpoint is not None
    assert (endpoint.label, endpoint.base_url) == ("DeepSeek (Anthropic format)", expected)
    assert endpoint.env() == {"ANTHROPIC_BASE_URL": expected, "ANTHROPIC_AUTH_TOKEN": KEY}
    assert KEY not in repr(endpoint)


def test_endpoint_url_overrides_and_the_model_defaults_to_the_parents() -> None:
    config = settings({"endpoint_url": "http://127.0.0.1:9/anthropic/"})
    assert config.endpoint is not None and config.endpoint.base_url == "http://127.0.0.1:9/anthropic"
    assert config.model == "deepseek-v4-pro"
    assert settings({"model": "deepseek-flash"}).model == "deepseek-flash"
    # Without an endpoint nothing is inherited, as before.
    plain = ClaudeCodeConfig.from_mapping("ds", {}, DEEPSEEK)
    assert (plain.endpoint, plain.model) == (None, None)


BAD = [
    ({"endpoint": "anthropic"}, DEEPSEEK, "[subagents.ds] endpoint must be one of deepseek"),
    ({"endpoint_url": "https://x/anthropic"}, DEEPSEEK, '[subagents.ds] endpoint_url needs endpoint = "deepseek"'),
    (
        {"endpoint": "deepseek"},
        ParentContext(model="m", base_url="https://openrouter.ai/api/v1", api_key=KEY),
        "[subagents.ds] endpoint_url is required: the parent's base_url is not DeepSeek's, and its key stays there",
    ),
    (
        {"endpoint": "deepseek"},
        ParentContext(model="m", base_url="https://api.deepseek.com"),
        "[subagents.ds] endpoint needs the DeepSeek API key (api_key or DEEPSEEK_API_KEY)",
    ),
    (
        {"endpoint": "deepseek", "pass_env": ["ANTHROPIC_API_KEY"], "env": {"ANTHROPIC_BASE_URL": "x"}},
        DEEPSEEK,
        "[subagents.ds] env and pass_env may not set ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL: endpoint sets them",
    ),
    (
        {"endpoint": "deepseek", "endpoint_url": f"https://me:{PARENT_CANARY}@example.test/anthropic"},
        DEEPSEEK,
        "[subagents.ds] endpoint_url must be an http:// or https:// URL without credentials",
    ),
    (
        {"endpoint": "deepseek", "endpoint_url": f"ftp://example.test/{PARENT_CANARY}"},
        DEEPSEEK,
        "[subagents.ds] endpoint_url must be an http:// or https:// URL without credentials",
    ),
]


@pytest.mark.parametrize(("table", "parent", "message"), BAD)
def test_a_bad_endpoint_table_is_a_configuration_problem(
    table: dict[str, Any], parent: ParentContext, message: str
) -> None:
    with pytest.raises(SubagentConfigError) as raised:
        ClaudeCodeConfig.from_mapping("ds", table, parent)
    assert str(raised.value) == message


async def test_a_bad_endpoint_table_fails_its_runs_without_the_endpoint(tmp_path: Path) -> None:
    provider = build_provider("ds", {"provider": "claude", "endpoint": "deepseek"}, ParentContext(api_key=None))
    result = await run_once(provider, request(tmp_path))
    assert (result.stop_reason, result.diagnostic) == ("error", claude_failure("query-start", "configuration"))


# -- the scripted CLI: what the child is given, the line ----------------------------------------------


async def test_the_child_gets_the_endpoint_and_the_key_and_no_other_secret(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", PARENT_CANARY)
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)  # the parent's own variable: the child gets the key by its token
    record = tmp_path / "record.json"
    parent = ParentContext(model="deepseek-flash", base_url="https://api.deepseek.com", api_key=KEY,
                           secrets=(OTHER_SECRET,))  # fmt: skip
    provider = from_config("probe", _scripted("success", FAKE_CLAUDE_RECORD=str(record)), parent)
    result = await run_once(provider, request(workdir))
    assert result.stop_reason == "completed"
    seen = json.loads(record.read_text())
    env = seen["env"]
    assert env["ANTHROPIC_BASE_URL"] == "https://api.deepseek.com/anthropic"
    assert env["ANTHROPIC_AUTH_TOKEN"] == KEY
    assert "ANTHROPIC_API_KEY" not in env and "DEEPSEEK_API_KEY" not in env
    assert PARENT_CANARY not in json.dumps(env) and OTHER_SECRET not in json.dumps(env)
    argv = seen["argv"]
    assert any(argv[i : i + 2] == ["--model", "deepseek-flash"] for i in range(len(argv)))
    assert KEY not in json.dumps(argv)


async def test_the_failure_line_names_the_endpoint(tmp_path: Path) -> None:
    provider = from_config("probe", _scripted("error_max_turns"), DEEPSEEK)
    result = await run_once(provider, request(tmp_path))
    assert result.diagnostic == ON_DEEPSEEK + "stage: query-run; category: error_max_turns; exit code: 1)"


def _scripted(scenario: str, **env: str) -> dict[str, Any]:
    """A DeepSeek-endpoint table over the scripted CLI playing ``scenario``."""
    env = {"FAKE_CLAUDE_SCENARIO": scenario, "FAKE_CLAUDE_STDERR": STDERR_CANARY, **env}
    return {"command": [sys.executable, FAKE_CLAUDE_CLI], "env": env, "endpoint": "deepseek", **FAST_GRACES}


# -- the real claude binary against the loopback fake under /anthropic ----------------------------------


@pytest.fixture
def claude_cli() -> str:
    """The ``claude`` binary npm installed (the native CLI package of the Agent SDK), with the Python SDK."""
    found = sorted((REPO / ".venv/npm/node_modules/@anthropic-ai").glob("claude-agent-sdk-*/claude"))
    cli = os.environ.get("DSH_CLAUDE_CLI") or (str(found[0]) if found else "")
    if not cli or not os.access(cli, os.X_OK):
        missing("claude (npm)", INSTALL)
    if importlib.util.find_spec("claude_agent_sdk") is None:  # the provider drives the CLI through it
        missing("claude-agent-sdk", "pip install 'dsh-agent[claude]'")
    return cli


def _real(api: FakeAnthropic, cli: str, tmp_path: Path) -> Any:
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir(exist_ok=True)
    table = {
        "provider": "claude",
        "endpoint": "deepseek",
        "endpoint_url": api.url + "/anthropic",
        "cli_path": cli,
        "env": {
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        },
    }
    parent = ParentContext(model="deepseek-flash", base_url=api.url, api_key=KEY, secrets=(OTHER_SECRET,))
    return build_provider("ds", table, parent)


def _assert_key_nowhere(result: SubagentResult, caplog: pytest.LogCaptureFixture, capfd: Any) -> None:
    shown = foreground_output(result)
    words = result.cause.words.lines() if isinstance(result.cause, SubagentFailure) else []
    captured = capfd.readouterr()
    for text in (result.output, result.diagnostic or "", shown.text, shown.diagnostic or "", "\n".join(words),
                 str(result.cause or ""), caplog.text, captured.out, captured.err):  # fmt: skip
        assert KEY not in text and OTHER_SECRET not in text


@pytest.mark.real_product
async def test_real_cli_sends_every_request_to_anthropic_with_the_deepseek_token(
    claude_cli: str, tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ANTHROPIC_API_KEY", PARENT_CANARY)  # the user's own Anthropic key stays home
    caplog.set_level(logging.DEBUG)
    with FakeAnthropic("text", text="Hello from DeepSeek's fake", path_prefix="/anthropic") as api:
        result = await run_once(_real(api, claude_cli, tmp_path), request(workdir))
        posts = api.message_requests
        assert posts, "the CLI never called the fake's /anthropic/v1/messages"
        assert all(r.path.startswith("/anthropic/") for r in api.requests)
        for post in posts:
            assert post.headers.get("authorization") == f"Bearer {KEY}"
            assert "x-api-key" not in post.headers
            assert post.body["model"] == "deepseek-flash"
            assert PARENT_CANARY not in json.dumps(post.headers) + json.dumps(post.body)
    assert result == SubagentResult("Hello from DeepSeek's fake", "completed", None)
    assert "subagent ds: Claude Code on DeepSeek (Anthropic format)" in caplog.messages
    _assert_key_nowhere(result, caplog, capfd)


@pytest.mark.real_product
async def test_real_cli_refused_key_echoed_back_stays_masked(
    claude_cli: str, tmp_path: Path, workdir: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"Authentication Fails, Your api key: {KEY} is invalid"
    with FakeAnthropic("status", status=401, error_message=echo, path_prefix="/anthropic") as api:
        provider = _real(api, claude_cli, tmp_path)
        result = await run_once(provider, request(workdir))
        assert api.message_requests and api.message_requests[0].headers.get("authorization") == f"Bearer {KEY}"
    assert result.stop_reason == "error"
    assert result.diagnostic == ON_DEEPSEEK + "stage: query-run; category: invalid-success; exit code: 1)"
    assert foreground_output(result).diagnostic == result.diagnostic
    assert_no_canary(result)
    _assert_key_nowhere(result, caplog, capfd)
    # The raw cause beneath holds the CLI's own words, echoed key included; /why masks every link with the
    # session's secrets, the parent's key among them (repl/why.py), as the run's own secrets here.
    links = chain_links(result.cause)
    assert any(KEY in link.text for link in links)
    assert KEY in provider.secrets
    assert all(KEY not in redact_text(link.text, provider.secrets) for link in links)
