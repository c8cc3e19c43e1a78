"""``[mcp_servers.NAME]`` tables -> frozen :class:`McpServerConfig` (docs/mcp.md).

A table is a stdio server (``command``, ``args``, ``env``, ``cwd``) or a streamable-HTTP one (``url``,
``headers``). A header value may name an environment variable as ``${NAME}`` (``"Bearer ${GITHUB_TOKEN}"``):
it is expanded from dsh's own environment at connect time, so no token sits in the file. Every error is a
:class:`McpConfigError` naming the table and the key, as ``[subagents.NAME]`` errors do (repl/config.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_STARTUP_TIMEOUT",
    "McpConfigError",
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


class McpConfigError(HarnessError):
    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CONFIG)


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

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url is not None else "stdio"

    def tool_allowed(self, tool: str) -> bool:
        return tool not in self.deny and (self.allow is None or tool in self.allow)

    def literal_secrets(self) -> tuple[str, ...]:
        """The values written in the file that dsh masks: env values and header values without ``${}``."""
        return tuple(value for value in (*self.env.values(), *self.headers.values())
                     if value and not _VARIABLE.search(value))


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
    configs = tuple(configs)
    values = [value for config in configs for value in config.literal_secrets()]
    values += [value for config in configs for value in expand_headers(config.headers, environ)[1]]
    return tuple(dict.fromkeys(values))


def parse_servers(tables: Mapping[str, Any]) -> dict[str, McpServerConfig]:
    """Every ``[mcp_servers.NAME]`` table, in file order; :class:`McpConfigError` for the first bad one."""
    return {str(name): _parse(str(name), table) for name, table in tables.items()}


def _parse(name: str, table: object) -> McpServerConfig:
    where = f"[mcp_servers.{name}]"
    if not _NAME.fullmatch(name):
        raise McpConfigError(f"{where}: the server name must be 1-32 letters, digits, '_' or '-'")
    if "__" in name or name.endswith("_"):
        # Else mcp__a__b__x is both server a's tool b__x and server a__b's tool x (docs/mcp.md, "Names").
        raise McpConfigError(f"{where}: the server name must not contain '__' or end with '_' "
                             "(dsh names its tools mcp__<server>__<tool>)")
    if not isinstance(table, Mapping):
        raise McpConfigError(f"{where} must be a table")
    unknown = [key for key in table if key not in _KEYS]
    if unknown:
        raise McpConfigError(f"{where} has unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise McpConfigError(f"{where}: set exactly one of command (stdio) or url (streamable HTTP)")
    argv: tuple[str, ...] = ()
    if command is not None:
        argv = (*_command(where, command), *_strings(where, "args", table.get("args", [])))
    elif not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise McpConfigError(f"{where}: url must be an http:// or https:// URL")
    for key in ("command", "url"):
        other = ("args", "env", "cwd") if key == "url" else ("headers",)
        if table.get(key) is not None:
            for bad in other:
                if bad in table:
                    raise McpConfigError(f"{where}: {bad} does not apply to a {key} server")
    cwd = table.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise McpConfigError(f"{where}: cwd must be a non-empty string")
    allow = table.get("allow")
    approve = table.get("approve", "ask")
    if approve not in ("ask", "auto"):
        raise McpConfigError(f"{where}: approve must be \"ask\" or \"auto\"")
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise McpConfigError(f"{where}: enabled must be true or false")
    return McpServerConfig(
        name=name, command=argv, env=_table(where, "env", table.get("env", {})), cwd=cwd,
        url=url if isinstance(url, str) else None, headers=_table(where, "headers", table.get("headers", {})),
        enabled=enabled, startup_timeout=_seconds(where, "startup_timeout", table, DEFAULT_STARTUP_TIMEOUT),
        call_timeout=_seconds(where, "call_timeout", table, DEFAULT_CALL_TIMEOUT),
        allow=None if allow is None else _strings(where, "allow", allow),
        deny=_strings(where, "deny", table.get("deny", [])), approve=approve,
    )


def _command(where: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) and value.strip():
        return (value,)
    if isinstance(value, list) and value and all(isinstance(part, str) and part for part in value):
        return tuple(value)
    raise McpConfigError(f"{where}: command must be a program name or a non-empty list of strings")


def _strings(where: str, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise McpConfigError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def _table(where: str, key: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise McpConfigError(f"{where}: {key} must be a table of strings")
    for item_key, item in value.items():
        if not isinstance(item_key, str) or not item_key or "=" in item_key or "\0" in item_key \
                or not isinstance(item, str) or "\0" in item or "\n" in item or "\r" in item:
            raise McpConfigError(f"{where}: {key}.{item_key} must be a string (no NUL or newline)")
    return dict(value)


def _seconds(where: str, key: str, table: Mapping[str, Any], default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86_400:
        raise McpConfigError(f"{where}: {key} must be a number of seconds above 0 (at most a day)")
    return float(value)
