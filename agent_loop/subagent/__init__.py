"""Subagents: the provider-neutral seam, and the registry that builds providers from configuration.

A ``[subagents.NAME]`` table in the config file is a dict; :func:`build_provider` turns it into a
:class:`~dsh.agent_loop.subagent.run.Provider` by its ``provider`` key, through the module registered
for that kind in :data:`PROVIDER_MODULES` (imported only when a table names it, so heavy SDKs stay
unimported until then). Every provider module exposes exactly one factory,
``from_config(name: str, table: Mapping[str, Any], parent: ParentContext | None) -> Provider``.

=================  ==============================================  ==================================
``provider``       module                                          child
=================  ==============================================  ==================================
``dsh``            ``dsh.agent_loop.subagent.dsh_sdk``             ``dsh serve --stdio`` (JSON-RPC)
``acp``            ``dsh.agent_loop.subagent.acp``                 any ACP agent over stdio
``claude-code``    ``dsh.agent_loop.subagent.claude_code``         Claude Code (claude-agent-sdk)
``codex``          ``dsh.agent_loop.subagent.codex``               ``codex app-server``
=================  ==============================================  ==================================

Adding a provider is one module and one line here: see ``docs/adding-a-provider.md``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsh.agent_loop import settings
from dsh.agent_loop.frames import FrameLog
from dsh.agent_loop.front_matter import fold_line
from dsh.agent_loop.settings import At, SettingsError
from dsh.agent_loop.subagent.extras import missing_extra_hint
from dsh.agent_loop.subagent.result import (
    DIAGNOSTIC_LIMIT_BYTES,
    STOP_REASONS,
    SubagentRequest,
    SubagentResult,
    limit_diagnostic,
)
from dsh.agent_loop.subagent.run import (
    AnyProvider,
    Outcome,
    Provider,
    ProviderSettings,
    Run,
    SubagentConfigError,
)

__all__ = [
    "DIAGNOSTIC_LIMIT_BYTES",
    "PROVIDER_MODULES",
    "STOP_REASONS",
    "AnyProvider",
    "ConfigTable",
    "Outcome",
    "ParentContext",
    "Provider",
    "ProviderSettings",
    "Run",
    "SubagentConfigError",
    "SubagentRequest",
    "SubagentResult",
    "build_provider",
    "build_providers",
    "config_bool",
    "config_command",
    "config_env",
    "config_number",
    "config_positive_int",
    "config_seconds",
    "config_string",
    "limit_diagnostic",
    "reject_unknown_keys",
]

# The registry: provider kind -> the module whose ``from_config`` builds it. One line per provider.
PROVIDER_MODULES: dict[str, str] = {
    "dsh": "dsh.agent_loop.subagent.dsh_sdk",
    "dsh-sdk": "dsh.agent_loop.subagent.dsh_sdk",
    "acp": "dsh.agent_loop.subagent.acp",
    "claude-code": "dsh.agent_loop.subagent.claude_code",
    "claude": "dsh.agent_loop.subagent.claude_code",
    "codex": "dsh.agent_loop.subagent.codex",
}
_ALIASES = frozenset({"dsh-sdk", "claude"})  # accepted, not advertised


@dataclass(frozen=True, slots=True)
class ParentContext:
    """What a provider may inherit from the parent session unless its table overrides it."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    cwd: str | None = None
    secrets: tuple[str, ...] = ()  # the parent's masked values: a child's output has them masked too
    frames: FrameLog | None = None  # where each run's JSON-RPC frames are remembered (agent_loop/frames.py)
    dialect: str | None = None  # the parent's dialect (deepseek | openai), for a child on the parent's endpoint
    max_parallel: int = 0  # the parent's bound on model requests at once, handed to a child dsh (0: none)
    # The directory of the parent client's request gate, made on first need, which a child dsh on the parent's
    # endpoint joins (dsh.llm.request_gate); None: the child bounds its own requests.
    request_gate: Callable[[], str | None] | None = None


def build_provider(name: str, config: Mapping[str, Any], parent: ParentContext | None = None) -> AnyProvider:
    """The provider for one ``[subagents.NAME]`` table (its module is imported only now).

    Raises :class:`SubagentConfigError` for a bad name or an unknown ``provider``; problems inside a
    table are the provider's to report (its runs then fail with ``category: configuration``, so one
    typo does not keep the REPL from starting). A provider whose optional SDK is missing carries the
    one-line install hint in :attr:`Provider.hint`.
    """
    if not isinstance(name, str) or not name or not all(ch.isalnum() or ch in "_.-" for ch in name):
        raise SubagentConfigError(str(name)[:40], "the subagent name must be letters, digits, '_', '.' or '-'")
    if not isinstance(config, Mapping):
        raise SubagentConfigError(name, "must be a table")
    kind = config.get("provider")
    if not isinstance(kind, str) or kind not in PROVIDER_MODULES:
        settings.enum(_at(name), "provider", kind, sorted(set(PROVIDER_MODULES) - _ALIASES))
    assert isinstance(kind, str)
    module_name = PROVIDER_MODULES[kind]
    # ``description`` is every table's (the subagent tool lists it), so no provider needs to know the key.
    description = config.get("description")
    own = {key: value for key, value in config.items() if key != "description"}
    provider: AnyProvider = importlib.import_module(module_name).from_config(name, own, parent)
    secrets = _run_secrets(config, parent)
    hint = missing_extra_hint(name, kind, config)
    frames = parent.frames if parent is not None else None
    return dataclasses.replace(provider, hint=hint, secrets=secrets, frames=frames,
                               description=fold_line(description, 1024) if isinstance(description, str) else "")


def _run_secrets(config: Mapping[str, Any], parent: ParentContext | None) -> tuple[str, ...]:
    """The parent's secrets and the table's own key: a run masks them (and its env's secrets) in its output."""
    secrets: list[str] = []
    if parent is not None:
        secrets.extend(parent.secrets)
        if parent.api_key:
            secrets.append(parent.api_key)
    api_key = config.get("api_key")
    if isinstance(api_key, str):
        secrets.append(api_key)
    return tuple(dict.fromkeys(secrets))


def build_providers(
    tables: Mapping[str, Mapping[str, Any]], parent: ParentContext | None = None
) -> dict[str, AnyProvider]:
    """Every configured subagent, by name, in table order."""
    return {name: build_provider(name, table, parent) for name, table in tables.items()}


# -- shared parsing of table entries (providers use these so every table reads the same way) -------


@dataclass(frozen=True, slots=True)
class _SubagentTable(At):
    """Where a ``[subagents.NAME]`` value is: its problem becomes the runs' result, which the model reads, so no
    value is echoed, and the error is a :class:`SubagentConfigError` (the one settings error, with the name)."""

    name: str = ""

    def error(self, key: str | None, problem: str) -> SettingsError:
        return SubagentConfigError(self.name, " ".join(part for part in (key, problem) if part))


def _at(name: str) -> At:
    return _SubagentTable(table=f"subagents.{name}", echo=False, name=name)


def reject_unknown_keys(name: str, config: Mapping[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(str(key) for key in config if key not in known)
    if unknown:
        raise _at(name).error(None, f"unknown keys: {', '.join(unknown)}")


def config_string(name: str, config: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = config.get(key, default)
    return None if value is None else settings.string(_at(name), key, value)


def config_choice(name: str, config: Mapping[str, Any], key: str, default: str, choices: frozenset[str]) -> str:
    """``config[key]`` (or ``default``), which must be one of ``choices``."""
    return settings.enum(_at(name), key, config.get(key, default), sorted(choices))


def config_number(
    name: str, config: Mapping[str, Any], key: str, default: float | None, *, section: str | None = None
) -> float | None:
    """A positive finite number from ``config[key]`` (or ``config[section][key]``)."""
    source = settings.table(_at(name), section, config.get(section, {})) if section else config
    value = source.get(key, default)
    if value is None:
        return None
    label = f"{section}.{key}" if section else key
    return float(settings.number(_at(name), label, value, what="a positive number", above=0))


def config_seconds(name: str, config: Mapping[str, Any], key: str, default: float) -> float:
    """A duration: :func:`config_number` with a default, so never ``None``."""
    value = config_number(name, config, key, default)
    return default if value is None else value


def config_positive_int(name: str, config: Mapping[str, Any], key: str) -> int | None:
    """A positive integer (``max_turns``, ``max_tokens``); ``None`` when absent."""
    value = config.get(key)
    if value is None:
        return None
    return int(settings.number(_at(name), key, value, what="a positive integer", at_least=1, integer=True))


def config_bool(name: str, config: Mapping[str, Any], key: str, default: bool) -> bool:
    return settings.boolean(_at(name), key, config.get(key, default))


def config_command(name: str, config: Mapping[str, Any], default: Sequence[str] | None = None) -> list[str]:
    """``command`` (a string or an argv list) followed by ``args``; ``default`` when no command is set."""
    command = config.get("command")
    if command is None and default is None:
        raise _at(name).error("command", "is required")
    argv = list(default or ()) if command is None else list(settings.argv(_at(name), "command", command))
    return argv + list(settings.string_list(_at(name), "args", config.get("args", [])))


def config_env(name: str, config: Mapping[str, Any]) -> dict[str, str]:
    """``env`` entries passed explicitly to the child (on top of the allowlist); a value is never echoed."""
    return settings.string_map(_at(name), "env", config.get("env", {}), single_line=False)


@dataclass(frozen=True, slots=True)
class ConfigTable:
    """One ``[subagents.NAME]`` table, read with the ``config_*`` parsers above without repeating its name.

    A provider builds it with :meth:`checked` (unknown keys refused first), then reads each key once.
    """

    name: str
    config: Mapping[str, Any]

    @classmethod
    def checked(cls, name: str, config: Mapping[str, Any], known: frozenset[str]) -> ConfigTable:
        reject_unknown_keys(name, config, known)
        return cls(name, config)

    def string(self, key: str, default: str | None = None) -> str | None:
        return config_string(self.name, self.config, key, default)

    def choice(self, key: str, default: str, choices: frozenset[str]) -> str:
        return config_choice(self.name, self.config, key, default, choices)

    def number(self, key: str, default: float | None = None) -> float | None:
        return config_number(self.name, self.config, key, default)

    def seconds(self, key: str, default: float) -> float:
        return config_seconds(self.name, self.config, key, default)

    def positive_int(self, key: str) -> int | None:
        return config_positive_int(self.name, self.config, key)

    def command(self, default: Sequence[str] | None = None) -> list[str]:
        return config_command(self.name, self.config, default)

    def optional_command(self) -> tuple[str, ...] | None:
        """``command`` when the table sets one (the product providers find their binary otherwise)."""
        if "command" not in self.config:
            return None
        command = self.command(())
        if not command:
            raise SubagentConfigError(self.name, "command must be a program name or a non-empty list of strings")
        return tuple(command)

    def env(self) -> dict[str, str]:
        return config_env(self.name, self.config)

    def names(self, key: str) -> tuple[str, ...]:
        """A list of names (``pass_env``, ``setting_sources``); empty when absent."""
        value = self.config.get(key, [])
        listed = isinstance(value, Sequence) and not isinstance(value, str)
        if not listed or not all(isinstance(v, str) and v for v in value):
            raise SubagentConfigError(self.name, f"{key} must be a list of strings")
        return tuple(value)
