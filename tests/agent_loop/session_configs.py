"""A SessionConfig (agent_loop/session_config.py) for the agent loop's own tests: every setting the session reads,
with the front end's defaults, and no loader (the tests of agent_loop never import the front end)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsh.agent_loop.hooks import HookSpec
from dsh.agent_loop.mcp.config import McpServerConfig
from dsh.llm.models import ModelSettings


@dataclass(frozen=True)
class StubConfig:
    base_url: str = "http://127.0.0.1:9"
    api_key: str | None = "sk-stub-config-key-000000"
    model: str = "deepseek-chat"
    max_tokens: int | None = None
    thinking: bool | None = None
    reasoning_effort: str | None = None
    stream_idle_timeout: float = 10.0
    first_token_timeout: float = 20.0
    prompt_hook: str | None = None
    max_retries: int | None = None
    subagents: dict[str, dict[str, Any]] = field(default_factory=dict)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    system_prompt: str | None = None
    system_prompt_append: str | None = None
    models: dict[str, ModelSettings] = field(default_factory=dict)
    allow_edits: bool = False
    auto_compact: bool = False
    proxy: str | None = None
    record: str | None = None
    report_ring_bytes: int = 4 << 20
    sandbox: str | None = None
    sandbox_network: bool = False
    permission_mode: str = "default"
    dialect: str = "openai"  # a loopback endpoint's default (llm/endpoint.py: only DeepSeek's host is deepseek)
    max_parallel: int = 0
    max_cost: float | None = None
    max_continuations: int = 2
    auto_continue: bool = False
    keep_images: bool = False
    hooks: tuple[HookSpec, ...] = ()
    claude_settings: bool = False
    web: bool = False
    web_allow: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The key only: what a table or the environment would add is each test's to say."""
        return (self.api_key,) if self.api_key else ()
