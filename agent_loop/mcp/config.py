"""``[mcp_servers.NAME]`` tables -> frozen :class:`McpServerConfig` (docs/mcp.md).

A table is a stdio server (``command``, ``args``, ``env``, ``cwd``) or a streamable-HTTP one (``url``,
``headers``). A header value may name an environment variable as ``${NAME}`` (``"Bearer ${GITHUB_TOKEN}"``):
it is expanded from dsh's own environment at connect time, so no token sits in the file. The tables are read
with the one family of readers (agent_loop/settings.py): every error is a :class:`SettingsError` naming the file
(when known), the table and the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dsh.agent_loop import settings
from dsh.agent_loop.settings import At

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_STARTUP_TIMEOUT",
    "McpServerConfig",
    "expand_headers",
    "parse_servers",
    "secret_values",
]

DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 120.0
_KEYS = ("command", "args", "env", "cwd", "url", "headers", "enabled", "startup_timeout", "call_timeout", "allow",
         "deny", "approve")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A server's name becomes part of tool names (mcp__<server>__<tool>) and of the failure line.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    command: tuple[str, ...] = ()  # argv: ``command`` then ``args``; empty for HTTP
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # values may hold ${VAR}: see expand_headers
    enabled: bool = True
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    allow: tuple[str, ...] | None = None  # tool names the model may see (None: all)
    deny: tuple[str, ...] = ()
    approve: Literal["ask", "auto"] = "ask"
    written: tuple[str, ...] = ()  # the keys the table set (the capsule shows a table by its keys only)

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url is not None else "stdio"

    def keys(self) -> tuple[str, ...]:
        return self.written

    def tool_allowed(self, tool: str) -> bool:
        return tool not in self.deny and (self.allow is None or tool in self.allow)

    def literal_secrets(self) -> tuple[str, ...]:
        """The values written in the file that dsh masks: env values and header values without ``${}``."""
        return tuple(value for value in (*self.env.values(), *self.headers.values())
                     if value and not _VARIABLE.search(value))

    def header_secrets(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The values its headers take from ``environ`` (``${NAME}``): masked wherever dsh shows text."""
        return expand_headers(self.headers, environ)[1]

    def secrets(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """Every value of this table to mask: written in it, or taken from ``environ`` by its headers."""
        return (*self.literal_secrets(), *self.header_secrets(environ))


def expand_headers(headers: Mapping[str, str], environ: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Headers with each ``${NAME}`` replaced from ``environ`` (an unset one becomes empty), and the values
    substituted (to be masked wherever dsh shows text)."""
    used: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        value = environ.get(match.group(1), "")
        if value:
            used.append(value)
        return value

    expanded = {key: _VARIABLE.sub(substitute, value) for key, value in headers.items()}
    return expanded, tuple(used)


def secret_values(configs: Iterable[McpServerConfig], environ: Mapping[str, str]) -> tuple[str, ...]:
    """Values to mask: what the tables hold literally and what their headers take from the environment.
    Known from the tables alone, before any server connects (the agent's redactor gets them when built)."""
    return tuple(dict.fromkeys(value for config in configs for value in config.secrets(environ)))


def parse_servers(tables: Mapping[str, Any], source: str | None = None) -> dict[str, McpServerConfig]:
    """Every ``[mcp_servers.NAME]`` table, in file order; :class:`SettingsError` for the first bad one, naming
    ``source`` (the config file) when it is known."""
    return {str(name): _parse(At(source, f"mcp_servers.{name}"), str(name), table) for name, table in tables.items()}


def _parse(at: At, name: str, value: object) -> McpServerConfig:
    if not _NAME.fullmatch(name):
        raise at.error(None, "the server name must be 1-32 letters, digits, '_' or '-'")
    if "__" in name or name.endswith("_"):
        # Else mcp__a__b__x is both server a's tool b__x and server a__b's tool x (docs/mcp.md, "Names").
        raise at.error(None, "the server name must not contain '__' or end with '_' "
                             "(dsh names its tools mcp__<server>__<tool>)")
    table = settings.table(at, None, value)
    settings.unknown_keys(at, table, _KEYS)
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise at.error(None, "needs exactly one of command (stdio) or url (streamable HTTP)")
    argv: tuple[str, ...] = ()
    if command is not None:
        argv = (*settings.argv(at, "command", command), *settings.string_list(at, "args", table.get("args", [])))
    elif not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise at.error("url", "must be an http:// or https:// URL")
    for key in ("command", "url"):
        other = ("args", "env", "cwd") if key == "url" else ("headers",)
        if table.get(key) is not None:
            for bad in other:
                if bad in table:
                    raise at.error(bad, f"does not apply to a {key} server")
    cwd = table.get("cwd")
    allow = table.get("allow")
    return McpServerConfig(
        name=name, command=argv, env=settings.string_map(at, "env", table.get("env", {})),
        cwd=None if cwd is None else settings.string(at, "cwd", cwd),
        url=url if isinstance(url, str) else None,
        headers=settings.string_map(at, "headers", table.get("headers", {})),
        enabled=settings.boolean(at, "enabled", table.get("enabled", True)),
        startup_timeout=_seconds(at, "startup_timeout", table.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT)),
        call_timeout=_seconds(at, "call_timeout", table.get("call_timeout", DEFAULT_CALL_TIMEOUT)),
        allow=None if allow is None else settings.string_list(at, "allow", allow),
        deny=settings.string_list(at, "deny", table.get("deny", [])),
        approve="auto" if settings.enum(at, "approve", table.get("approve", "ask"), ("ask", "auto")) == "auto"
        else "ask",
        written=tuple(str(key) for key in table),
    )


def _seconds(at: At, key: str, value: object) -> float:
    return float(settings.number(at, key, value, what="a number of seconds above 0 (at most a day)", above=0,
                                 at_most=86_400))
