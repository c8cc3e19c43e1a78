"""Which optional SDK a provider needs, and the one line that says how to install it.

``pip install dsh-agent`` (:data:`~dsh.llm._version.DISTRIBUTION`) gives the core; each provider whose SDK
is heavy lives behind an extra. A provider whose SDK is missing still builds (so one missing extra never
keeps the REPL from starting); the REPL shows :func:`missing_extra_hint` on screen and the run ends with a
configuration failure. Checked with :func:`importlib.util.find_spec`, so asking costs no SDK import.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Mapping
from typing import Any

from dsh.llm._version import install_line

__all__ = ["PROVIDER_EXTRAS", "extra_installed", "missing_extra", "missing_extra_hint", "provider_extra"]

# provider kind -> (extra name, the import name of the SDK it installs)
PROVIDER_EXTRAS: dict[str, tuple[str, str]] = {
    "acp": ("acp", "acp"),
    "claude-code": ("claude", "claude_agent_sdk"),
    "claude": ("claude", "claude_agent_sdk"),  # the alias of claude-code
    "codex": ("codex", "codex_cli_bin"),
}


def provider_extra(kind: str, table: Mapping[str, Any] | None = None) -> str | None:
    """The extra provider ``kind`` needs, installed or not (None: the core is enough).

    Codex needs its wheel only for the binary: a configured ``command`` or a ``codex`` on PATH does.
    """
    entry = PROVIDER_EXTRAS.get(kind)
    if entry is None:
        return None
    if kind == "codex" and ((table or {}).get("command") or shutil.which("codex")):
        return None
    return entry[0]


def extra_installed(extra: str) -> bool:
    """Whether the SDK that ``extra`` installs is importable (an unknown extra counts as installed)."""
    module = next((module for name, module in PROVIDER_EXTRAS.values() if name == extra), None)
    if module is None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extra(kind: str, table: Mapping[str, Any] | None = None) -> str | None:
    """The extra to install for provider ``kind`` when its SDK is not importable, else None."""
    extra = provider_extra(kind, table)
    return None if extra is None or extra_installed(extra) else extra


def missing_extra_hint(name: str, kind: str, table: Mapping[str, Any] | None = None) -> str | None:
    """``subagent NAME (KIND) needs the acp extra: pip install 'dsh-agent[acp]'``, or None when nothing is missing."""
    extra = missing_extra(kind, table)
    if extra is None:
        return None
    return f"subagent {name} ({kind}) needs the {extra} extra: {install_line(extra)}"
