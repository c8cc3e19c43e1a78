"""What a session is built from: its settings, its model client and who approves, as protocols.

:class:`~dsh.agent_loop.session.Session` and :mod:`dsh.agent_loop.build` both read them; a front end
provides them (``dsh.repl.config.Config`` is a :class:`SessionConfig`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from dsh.llm.client_settings import ClientSettings
from dsh.llm.events import ModelClient
from dsh.llm.models import ModelSettings

if TYPE_CHECKING:
    from dsh.agent_loop.hooks import HookSpec
    from dsh.agent_loop.mcp.config import McpServerConfig
    from dsh.agent_loop.tools.edits import EditRequest
    from dsh.agent_loop.tools.registry import Approval, McpCallRequest
    from dsh.llm.exchange_ring import ExchangeRing

__all__ = ["Approver", "EndpointClient", "SessionConfig", "client_settings"]


class SessionConfig(Protocol):
    """The settings a session is built from, already resolved (``dsh.repl.config.Config`` is one)."""

    @property
    def api_key(self) -> str | None: ...
    @property
    def base_url(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def thinking(self) -> bool | None: ...
    @property
    def reasoning_effort(self) -> str | None: ...
    @property
    def stream_idle_timeout(self) -> float: ...
    @property
    def first_token_timeout(self) -> float: ...
    @property
    def prompt_hook(self) -> str | list[str] | None: ...
    @property
    def max_retries(self) -> int | None: ...
    @property
    def subagents(self) -> dict[str, dict[str, Any]]: ...
    @property
    def mcp_servers(self) -> Mapping[str, McpServerConfig]: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def system_prompt_append(self) -> str | None: ...
    @property
    def models(self) -> Mapping[str, ModelSettings]: ...
    @property
    def allow_edits(self) -> bool: ...
    @property
    def auto_compact(self) -> bool: ...
    @property
    def max_continuations(self) -> int: ...  # a cut reply's prefix completions a step (agent_loop/continuation.py)
    @property
    def auto_continue(self) -> bool: ...  # a reply stopped at the output-token limit is continued too
    @property
    def keep_images(self) -> bool: ...  # an image's bytes go into the session log (agent_loop/image_input.py)
    @property
    def hooks(self) -> tuple[HookSpec, ...]: ...  # [[hooks.EVENT]] tables (docs/hooks.md)
    @property
    def claude_settings(self) -> bool: ...  # the project's .claude/settings.json hooks run too
    @property
    def proxy(self) -> str | None: ...
    @property
    def record(self) -> str | None: ...
    @property
    def report_ring_bytes(self) -> int: ...  # the last exchanges kept in memory for a failure capsule
    @property
    def sandbox(self) -> str | None: ...  # "bwrap": run_shell under bubblewrap (docs/safety.md)
    @property
    def sandbox_network(self) -> bool: ...
    @property
    def permission_mode(self) -> str: ...  # default | plan | accept-edits | auto (dsh.agent_loop.permissions)
    @property
    def dialect(self) -> str: ...  # deepseek | openai, resolved (by the host when nothing set it)
    @property
    def max_parallel(self) -> int: ...  # model requests at once, this dsh and its child dsh subagents; 0: no bound
    @property
    def max_cost(self) -> float | None: ...  # US dollars one run or session may spend (agent_loop/budget.py)
    @property
    def web(self) -> bool: ...  # the model gets web_fetch (agent_loop/tools/web.py; docs/tools.md)
    @property
    def web_allow(self) -> tuple[str, ...]: ...  # hosts web_fetch fetches without asking
    @property
    def sources(self) -> Mapping[str, str]: ...  # where base_url, api_key and proxy came from (the fix lines' words)
    @property
    def secrets(self) -> tuple[str, ...]: ...


class EndpointClient(ModelClient, Protocol):
    """A model client a session can name in its messages, mask and close (``DeepSeekClient`` and the demo's)."""

    @property
    def base_url_display(self) -> str: ...
    @property
    def secrets(self) -> tuple[str, ...]: ...
    @property
    def dialect(self) -> str:
        """``deepseek`` or ``openai``: which request extensions it uses and how it reads DeepSeek's answers."""
    @property
    def ring(self) -> ExchangeRing | None:
        """The last exchanges a failure capsule copies, masked when the capsule is written (docs/reporting.md); None
        keeps none."""
    @property
    def trace_header(self) -> dict[str, Any] | None:
        """The header a recording of this client starts with; None with neither a recording nor a ring."""
    async def aclose(self) -> None: ...


def client_settings(config: SessionConfig, env: Mapping[str, str]) -> ClientSettings:
    """The settings of a session's client from its config; a replay and the doctor start from them."""
    # trust_env off: the config already read the proxy variables (and names them in fix lines).
    return ClientSettings(base_url=config.base_url, api_key=config.api_key, proxy=config.proxy, trust_env=False,
                          stream_idle_timeout=config.stream_idle_timeout,
                          first_token_timeout=config.first_token_timeout, env=env, record=config.record,
                          ring_bytes=config.report_ring_bytes, dialect=config.dialect,
                          max_parallel=config.max_parallel, keep_images=config.keep_images)


# What is asked: run_shell's command, an edit's EditRequest, an MCP tool call's McpCallRequest (docs/mcp.md).
Approver = Callable[["str | EditRequest | McpCallRequest"], Awaitable["Approval | None"]]  # None: nobody answered
