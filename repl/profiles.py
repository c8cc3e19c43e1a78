"""Profiles: ``[profiles.NAME]`` tables that bundle a model and how it runs (docs/configuration.md, "Profiles").

A profile names some of :data:`PROFILE_KEYS`, each checked as the top-level key of that name is. ``--profile NAME``
(or ``DSH_PROFILE``) puts its values over the config files' and under the environment's and the flags', each
with the source ``profile NAME`` (``dsh doctor`` names it); ``/profile NAME`` switches the running session from
its next request. A project file's profiles follow its other keys' rules (repl/project_config.py): a profile's
``max_cost`` may lower the user's cap, never raise it, and the user's own profile of a name wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from dsh.agent_loop import settings
from dsh.agent_loop.settings import At, SettingsError

__all__ = ["PROFILE_KEYS", "cap_profiles", "check_profiles", "profile_lines", "select_profile", "switched_words"]

PROFILE_KEYS = ("model", "thinking", "reasoning_effort", "max_tokens", "max_cost")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
Check = Callable[[str, object, str], Any]


def check_profiles(key: str, value: object, where: str, checks: Mapping[str, Check]) -> dict[str, dict[str, Any]]:
    """``[profiles.NAME]`` tables, each value checked by ``checks`` (the top-level keys' checks)."""
    if not isinstance(value, Mapping):
        raise At(where).error(f"[{key}]", f"must be a table of [{key}.NAME] tables")
    profiles: dict[str, dict[str, Any]] = {}
    for name, table in value.items():
        if not _NAME.match(str(name)):  # names show in lines and are typed after /profile
            raise At(where).error(f"[{key}]", "has a profile name that is not letters, digits, '.', '_' or '-' "
                                              "(at most 40)")
        at = At(where, f"{key}.{name}")
        settings.unknown_keys(at, settings.table(at, None, table), PROFILE_KEYS)
        assert isinstance(table, Mapping)  # settings.table checked it
        profiles[str(name)] = {item: checks[item](item, given, f"{where}: [{key}.{name}]")
                               for item, given in table.items()}
    return profiles


def cap_profiles(profiles: Mapping[str, dict[str, Any]], user: Mapping[str, Any], where: str,
                 lines: list[str]) -> dict[str, dict[str, Any]]:
    """A project file's profiles under the user's rules: a ``max_cost`` above the user's cap is left out (one
    line), and the user's own profile of a name wins (docs/configuration.md, "Profiles")."""
    cap = user.get("max_cost")
    kept: dict[str, dict[str, Any]] = {}
    for name, table in profiles.items():
        if cap is not None and table.get("max_cost", 0) > cap:
            lines.append(f"{where}: profiles.{name} max_cost is ignored here: it may lower your cap, not raise it")
            table = {key: value for key, value in table.items() if key != "max_cost"}
        kept[name] = table
    return {**kept, **user.get("profiles", {})}


def select_profile(flag: str | None, env: Mapping[str, str], values: dict[str, Any], sources: dict[str, str],
                   path: object) -> None:
    """Put the values of the profile ``--profile`` (``flag``) or ``DSH_PROFILE`` names over ``values`` (the files'),
    each with the source ``profile NAME``. An unknown name stops dsh (exit 2)."""
    name = flag or env.get("DSH_PROFILE", "").strip()
    how = "--profile" if flag else "DSH_PROFILE (environment)"
    if not name:
        return
    profiles: Mapping[str, dict[str, Any]] = values.get("profiles", {})
    table = profiles.get(name)
    if table is None:
        known = ", ".join(profiles) or "none configured"
        raise SettingsError(f"{how}: no profile {name[:40]!r} in {path} (profiles: {known})")
    for key, value in table.items():
        values[key] = value
        sources[key] = f"profile {name}"
    values["profile"] = name


def _value(key: str, value: object) -> str:
    if key == "thinking":
        return "enabled" if value else "disabled"
    if key == "max_cost" and isinstance(value, float):
        return f"${value:.2f}"
    return str(value)


def profile_lines(profiles: Mapping[str, Mapping[str, Any]], current: str | None) -> list[str]:
    """``/profile``'s listing: each profile and its values, the current one marked ``*``."""
    if not profiles:
        return ["no profiles configured ([profiles.NAME] in config.toml; docs/configuration.md)"]
    lines = ["profiles:"]
    width = max(len(name) for name in profiles)
    for name, table in profiles.items():
        shown = ", ".join(f"{key} {_value(key, value)}" for key, value in table.items()) or "(empty)"
        lines.append(f"{'*' if name == current else ' '} {name:<{width}}  {shown}")
    lines.append("/profile NAME switches from the next turn")
    return lines


def switched_words(name: str, changes: Mapping[str, tuple[object, object]]) -> str:
    """``profile deep: model deepseek-flash → deepseek-v4-pro, max_cost $1.00 (from the next turn)``."""
    if not changes:
        return f"profile {name}: nothing changed"
    shown = ", ".join(f"{key} {_value(key, old) if old is not None else 'unset'} → {_value(key, new)}"
                      for key, (old, new) in changes.items())
    return f"profile {name}: {shown} (from the next turn)"
