"""The one way dsh reads a setting: typed readers that raise one error naming where the value is.

Every table of the config file (the top-level keys and ``[models.NAME]`` in repl/config.py,
``[mcp_servers.NAME]`` in agent_loop/mcp/config.py, ``[subagents.NAME]`` in the subagent providers) is read
with these, so every problem is one :class:`SettingsError` line of one form::

    config file ~/.config/dsh/config.toml: [mcp_servers.fx] startup_timeout must be a number of seconds above 0
    (at most a day), got 'ten'

the source (the file, ``environment`` or ``command line``; left out where it is not known, as for a subagent
table checked when its run starts), the ``[table]`` when the key is in one, the key, and what it must be.
A value is shown (as ``repr``, cut at 40 characters) only for numbers, switches and choices, and only where the
line cannot reach the model (``At.echo``; a subagent table's problem becomes its runs' result): a string may be a
secret, so a bad string is never echoed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError

__all__ = ["At", "SettingsError", "argv", "boolean", "enum", "number", "string", "string_list", "string_map",
           "table", "unknown_keys"]


class SettingsError(HarnessError):
    """A setting that cannot be used: one line naming the source, the table and the key (docs/configuration.md)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.CONFIG)


@dataclass(frozen=True, slots=True)
class At:
    """Where the values being read are: the source ("config file PATH", "environment", "command line") and the
    ``[table]`` they are in; either may be unknown (None)."""

    source: str | None = None
    table: str | None = None
    echo: bool = True  # a bad number, switch or choice is shown; False where the line may reach the model

    def shown(self, value: object) -> str:
        """``, got <value>`` (its ``repr``, cut at 40 characters), or nothing when values are not echoed."""
        return f", got {value!r:.40}" if self.echo else ""

    def error(self, key: str | None, problem: str) -> SettingsError:
        """``<source>: [<table>] <key> <problem>``, each part only when known."""
        words = [part for part in (f"[{self.table}]" if self.table else None, key, problem) if part]
        text = " ".join(words)
        return SettingsError(f"{self.source}: {text}" if self.source else text)


def table(at: At, key: str | None, value: object) -> Mapping[str, object]:
    """A TOML table (``key`` None: the table ``at`` names)."""
    if not isinstance(value, Mapping):
        raise at.error(key, "must be a table")
    return value


def unknown_keys(at: At, value: Mapping[str, object], known: Sequence[str]) -> None:
    """The first key of ``value`` that is not in ``known``, as ``[table] has unknown key 'x' (known: ...)``."""
    unknown = [key for key in value if key not in known]
    if unknown:
        raise at.error(None, f"has unknown key {str(unknown[0])!r:.40} (known: {', '.join(known)})")


def string(at: At, key: str, value: object, *, strip: bool = False) -> str:
    """A non-empty string (``strip``: without its surrounding blanks, which must not be all it holds)."""
    if not isinstance(value, str) or not (value.strip() if strip else value):
        raise at.error(key, "must be a non-empty string")
    return value.strip() if strip else value


def number(
    at: At,
    key: str,
    value: object,
    *,
    what: str,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    integer: bool = False,
) -> float:
    """A finite number (an int when ``integer``) in the range given; ``what`` says it in words ("a positive
    integer", "a number of seconds above 0 (at most a day)")."""
    ok = not isinstance(value, bool) and isinstance(value, int if integer else int | float)
    if ok:
        assert isinstance(value, int | float)
        ok = (math.isfinite(value) and (above is None or value > above) and (at_least is None or value >= at_least)
              and (at_most is None or value <= at_most))
    if not ok:
        raise at.error(key, f"must be {what}{at.shown(value)}")
    assert isinstance(value, int | float)
    return value


def boolean(at: At, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise at.error(key, f"must be true or false{at.shown(value)}")
    return value


def enum(at: At, key: str, value: object, choices: Sequence[str]) -> str:
    """One of ``choices`` (two: ``"a" or "b"``; more: ``one of a, b, c``)."""
    if isinstance(value, str) and value in choices:
        return value
    said = f'"{choices[0]}" or "{choices[1]}"' if len(choices) == 2 else f"one of {', '.join(choices)}"
    raise at.error(key, f"must be {said}{at.shown(value)}")


def string_list(at: At, key: str, value: object, *, non_empty: bool = False) -> tuple[str, ...]:
    """A list of strings (``non_empty``: at least one, none of them empty)."""
    ok = isinstance(value, list | tuple) and all(isinstance(item, str) for item in value)
    if ok and non_empty:
        assert isinstance(value, list | tuple)
        ok = bool(value) and all(value)
    if not ok:
        wanted = "a non-empty list of non-empty strings" if non_empty else "a list of strings"
        raise at.error(key, f"must be {wanted}")
    assert isinstance(value, list | tuple)
    return tuple(value)


def argv(at: At, key: str, value: object) -> tuple[str, ...]:
    """A command: a program name, or a non-empty list of non-empty strings."""
    if isinstance(value, str) and value.strip():
        return (value,)
    if isinstance(value, list | tuple) and value and all(isinstance(part, str) and part for part in value):
        return tuple(value)
    raise at.error(key, "must be a program name or a non-empty list of strings")


def string_map(at: At, key: str, value: object, *, single_line: bool = True) -> dict[str, str]:
    """A table of strings meant for an environment or headers: names without ``=`` or NUL, values without NUL
    (``single_line``: nor a newline). A value is never echoed: it may be a secret."""
    if not isinstance(value, Mapping):
        raise at.error(key, "must be a table of strings")
    forbidden = ("\0", "\n", "\r") if single_line else ("\0",)
    for name, item in value.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise at.error(key, "names must be non-empty strings without '=' or NUL")
        if not isinstance(item, str) or any(char in item for char in forbidden):
            rule = "(no NUL or newline)" if single_line else "(no NUL)"
            raise at.error(f"{key}.{name}", f"must be a string {rule}")
    return dict(value)
