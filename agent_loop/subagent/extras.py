"""Which optional SDK a provider needs, and the one line that says how to install it.

``pip install dsh`` gives the core; each provider whose SDK is heavy lives behind an extra. A provider
whose SDK is missing still builds (so one missing extra never keeps the REPL from starting); the REPL
shows :func:`missing_extra_hint` on screen and the run ends with a configuration failure. Checked with
:func:`importlib.util.find_spec`, so asking costs no SDK import.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Mapping
from typing import Any

__all__ = ["PROVIDER_EXTRAS", "missing_extra", "missing_extra_hint"]

# provider kind -> (extra name, the import name of the SDK it installs)
PROVIDER_EXTRAS: dict[str, tuple[str, str]] = {
    "acp": ("acp", "acp"),
    "claude-code": ("claude", "claude_agent_sdk"),
    "codex": ("codex", "codex_cli_bin"),
}


def missing_extra(kind: str, table: Mapping[str, Any] | None = None) -> str | None:
    """The extra to install for provider ``kind`` when its SDK is not importable, else None.

    Codex needs its wheel only for the binary: a configured ``command`` or a ``codex`` on PATH does.
    """
    entry = PROVIDER_EXTRAS.get(kind)
    if entry is None:
        return None
    if kind == "codex" and ((table or {}).get("command") or shutil.which("codex")):
        return None
    extra, module = entry
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else extra


def missing_extra_hint(name: str, kind: str, table: Mapping[str, Any] | None = None) -> str | None:
    """``subagent NAME (KIND) needs the acp extra: pip install 'dsh[acp]'``, or None when nothing is missing."""
    extra = missing_extra(kind, table)
    if extra is None:
        return None
    return f"subagent {name} ({kind}) needs the {extra} extra: pip install 'dsh[{extra}]'"
