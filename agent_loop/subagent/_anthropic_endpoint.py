"""Where a Claude Code subagent sends its requests when its table says ``endpoint = "deepseek"``.

DeepSeek serves the Anthropic Messages format under ``/anthropic`` on its API host
(https://api-docs.deepseek.com/guides/anthropic_api) and documents Claude Code on it with
``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_AUTH_TOKEN`` set to the DeepSeek key
(https://api-docs.deepseek.com/quick_start/agent_integrations/claude_code). The child gets exactly those two
entries: the base URL (``endpoint_url``, else the parent's base URL's origin plus ``/anthropic`` when the parent
is on DeepSeek's host) and the parent's DeepSeek key, never another of the parent's secrets. The key is never
sent to a host the user did not name: a parent on another server and no ``endpoint_url`` is a configuration
problem, not a guess. What the lines call it is :attr:`ChildEndpoint.label`, a closed name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dsh.agent_loop.subagent import ConfigTable, ParentContext, SubagentConfigError
from dsh.agent_loop.subagent.diagnostics import DEEPSEEK_ANTHROPIC
from dsh.llm.endpoint import endpoint_for_url

__all__ = [
    "DEEPSEEK_ANTHROPIC",
    "DEEPSEEK_ANTHROPIC_URL",
    "ENDPOINTS",
    "RESERVED_ENV",
    "ChildEndpoint",
    "child_endpoint",
]

DEEPSEEK_ANTHROPIC_URL = "https://api.deepseek.com/anthropic"
ENDPOINTS: dict[str, str] = {"deepseek": DEEPSEEK_ANTHROPIC}  # the table's ``endpoint`` -> what lines call it
# Set by the endpoint alone: a table's env or pass_env naming one would send another key, or this one elsewhere.
RESERVED_ENV = frozenset({"ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"})
_PATH = "/anthropic"


@dataclass(frozen=True, slots=True)
class ChildEndpoint:
    """The endpoint a child uses: its closed name, its base URL (no credentials) and the key (never shown)."""

    label: str
    base_url: str
    api_key: str = field(repr=False)

    def env(self) -> dict[str, str]:
        """The child's entries, as DeepSeek's Claude Code page sets them."""
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_AUTH_TOKEN": self.api_key}


def child_endpoint(
    table: ConfigTable, parent: ParentContext, env: dict[str, str], pass_env: tuple[str, ...]
) -> ChildEndpoint | None:
    """The table's ``endpoint`` (with ``endpoint_url``), or None when it sets none. Raises
    :class:`SubagentConfigError` naming the table and key only (a URL or key is never echoed)."""
    if "endpoint" not in table.config:
        if "endpoint_url" in table.config:
            raise SubagentConfigError(table.name, 'endpoint_url needs endpoint = "deepseek"')
        return None
    kind = table.choice("endpoint", "deepseek", frozenset(ENDPOINTS))
    clash = sorted(RESERVED_ENV & (set(env) | set(pass_env)))
    if clash:
        raise SubagentConfigError(table.name, f"env and pass_env may not set {', '.join(clash)}: endpoint sets them")
    if not parent.api_key:
        raise SubagentConfigError(table.name, "endpoint needs the DeepSeek API key (api_key or DEEPSEEK_API_KEY)")
    url = table.string("endpoint_url")
    if url is not None:
        base_url = _checked_url(table.name, url)
    elif not parent.base_url:
        base_url = DEEPSEEK_ANTHROPIC_URL
    elif endpoint_for_url(parent.base_url).is_deepseek:
        base_url = _origin(parent.base_url) + _PATH
    else:
        raise SubagentConfigError(
            table.name, "endpoint_url is required: the parent's base_url is not DeepSeek's, and its key stays there"
        )
    return ChildEndpoint(ENDPOINTS[kind], base_url, parent.api_key)


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, credentials dropped."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}" + (f":{parts.port}" if parts.port else "")


def _checked_url(name: str, url: str) -> str:
    """An http(s) URL with a host and no credentials, query or fragment, without a trailing slash."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        ok = False
    if not ok or parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise SubagentConfigError(name, "endpoint_url must be an http:// or https:// URL without credentials")
    return url.rstrip("/")
