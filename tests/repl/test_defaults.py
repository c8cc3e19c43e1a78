"""Defaults (endpoint, model, deadlines, retries) are defined once, in dsh.llm.defaults, and read everywhere."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.agent_loop.retry import RetryPolicy
from dsh.llm import defaults
from dsh.llm.client_settings import ClientSettings
from dsh.llm.deepseek import DeepSeekClient
from dsh.repl.config import Config

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("llm", "agent_loop", "repl")


def product_sources() -> dict[Path, str]:
    return {
        path.relative_to(REPO): path.read_text(encoding="utf-8")
        for folder in PRODUCT
        for path in sorted((REPO / folder).rglob("*.py"))
    }


@pytest.mark.parametrize("value", [defaults.DEFAULT_BASE_URL, defaults.DEFAULT_MODEL])
def test_the_default_endpoint_and_model_are_spelled_once_in_product_code(value: str) -> None:
    # llm/models.py is the price table: it names every model it knows, the default among them.
    spelled = [str(path) for path, text in product_sources().items() for _ in range(text.count(f'"{value}"'))
               if path != Path("llm", "models.py")]
    assert spelled == [str(Path("llm", "defaults.py"))]


def test_every_user_reads_the_defaults() -> None:
    config = Config()
    assert (config.base_url, config.model) == (defaults.DEFAULT_BASE_URL, defaults.DEFAULT_MODEL)
    assert config.stream_idle_timeout == defaults.DEFAULT_STREAM_IDLE_TIMEOUT
    assert config.first_token_timeout == defaults.DEFAULT_FIRST_TOKEN_TIMEOUT

    client = inspect.signature(DeepSeekClient).parameters
    assert ClientSettings().base_url == defaults.DEFAULT_BASE_URL  # DeepSeekClient(...) opens its transport from these
    assert client["stream_idle_timeout"].default == defaults.DEFAULT_STREAM_IDLE_TIMEOUT
    assert client["first_token_timeout"].default == defaults.DEFAULT_FIRST_TOKEN_TIMEOUT
    assert client["connect_timeout"].default == defaults.DEFAULT_CONNECT_TIMEOUT

    policy = RetryPolicy()
    assert (policy.max_retries, policy.base_delay, policy.max_delay, policy.jitter) == (
        defaults.DEFAULT_MAX_RETRIES,
        defaults.DEFAULT_RETRY_BASE_DELAY,
        defaults.DEFAULT_RETRY_MAX_DELAY,
        defaults.DEFAULT_RETRY_JITTER,
    )

    import dsh.llm

    assert dsh.llm.DEFAULT_BASE_URL is defaults.DEFAULT_BASE_URL
    assert dsh.llm.DEFAULT_MODEL is defaults.DEFAULT_MODEL


def test_reading_the_defaults_and_the_config_does_not_load_the_http_client() -> None:
    code = (
        "import sys, dsh.llm.defaults, dsh.repl.config\n"
        "print(sorted(m for m in ('httpx', 'dsh.llm.deepseek', 'anyio') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert result.stdout.strip() == "[]"
