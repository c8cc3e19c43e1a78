"""The endpoint a mode talks to: the configured one, the demo's, or a replay of a recording — one :class:`Endpoint`.

:func:`open_endpoint` builds it once per run from the launch options and the config, held open by the mode's
exit stack; every mode (the terminal, piped stdin, ``-p``, ``dsh serve``, ``dsh acp``, ``dsh doctor``) takes it,
and :meth:`Endpoint.session` is the one place a :class:`~dsh.agent_loop.session.Session` is built from it. What an
endpoint other than the configured one changes is a field here, never a test of which endpoint it is: its client,
retry policy and subagent tables, where its settings come from (the fix lines' words), what the banner and the
toolbar say of it, the prompt rewrite before each turn, what the doctor probes, and scenario controls.

The demo registers itself: :mod:`dsh.repl.demo.endpoint` provides its opener, named once in
:data:`dsh.repl.options.OPENERS` and imported only when ``--demo`` picks it (docs/architecture.md, "Start-up and
lazy imports").
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from dsh.agent_loop.session import Session
from dsh.repl import __version__
from dsh.repl.config import Config, config_file_path, state_dir
from dsh.repl.first_prompt import banner_line
from dsh.repl.options import LaunchOptions, endpoint_opener

if TYPE_CHECKING:
    from pathlib import Path

    from dsh.agent_loop.retry import RetryPolicy
    from dsh.agent_loop.session import ExtraTools, PromptTransform
    from dsh.agent_loop.session_config import Approver, EndpointClient, SessionConfig
    from dsh.agent_loop.tools.file_access import FileAccess

__all__ = [
    "ConfiguredLabel",
    "Endpoint",
    "EndpointOpener",
    "Label",
    "Probe",
    "ScenarioControls",
    "configured_endpoint",
    "open_endpoint",
    "sessions_root",
]


class Label(Protocol):
    """What the interactive banner and the toolbar say about the endpoint."""

    def banner(self, session: Session) -> str: ...

    def toolbar(self) -> str:
        """What the toolbar adds after its own fields (`` · demo scenario: text``), or ``""``."""
        ...


class ScenarioControls(Protocol):
    """``/scenario`` and its completion: an endpoint whose failures are picked by name (the demo's)."""

    def listing(self) -> str: ...

    def select(self, name: str) -> tuple[str, str]:
        """The picked scenario's name and summary; KeyError for an unknown name."""
        ...

    def scenarios(self) -> list[tuple[str, str]]:
        """Each scenario's name and summary, in order."""
        ...


class Probe(NamedTuple):
    """What the doctor checks in place of the configured endpoint (the demo's own server: no key, no proxy)."""

    base_url: str
    key_note: str  # the configuration step's words for the key, e.g. ``key not needed (demo)``


class EndpointOpener(Protocol):
    """An endpoint other than the configured one, registered by its package (the demo's)."""

    def check(self, options: LaunchOptions, config: Config) -> tuple[LaunchOptions, Config]:
        """The options and config this endpoint runs with, checked at start (ConfigError, exit 2, for what cannot
        work)."""
        ...

    async def open(self, stack: contextlib.AsyncExitStack, options: LaunchOptions, config: Config) -> Endpoint: ...


def sessions_root(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "sessions"


@dataclass(frozen=True, eq=False)  # an endpoint is itself, not its fields: none is ever compared
class Endpoint:
    """The endpoint of one run and everything a mode reads of it (see the module's docstring)."""

    sources: Mapping[str, str]  # where each setting came from, in the fix lines' words (the demo: its own two)
    label: Label
    client: EndpointClient | None = None  # None: the session builds the configured client when first needed
    retry: RetryPolicy | None = None  # None: the config's
    subagent_tables: Mapping[str, Mapping[str, Any]] | None = None  # before the config's [subagents.*]
    parent_base_url: str | None = None  # the endpoint subagents are told about (None: the config's)
    prompt_transform: PromptTransform | None = None  # the text the model is sent for the user's prompt
    probe: Probe | None = None  # None: the doctor checks the configured endpoint and its key
    controls: ScenarioControls | None = None  # /scenario, for an endpoint with scenarios

    def session(
        self,
        config: SessionConfig,
        env: Mapping[str, str],
        *,
        approve: Approver | None,
        child: bool = False,
        cwd: str | None = None,
        extra_tools: ExtraTools | None = None,
        allow_mcp: bool = False,
        files: FileAccess | None = None,
        mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Session:
        """A session over this endpoint; ``child`` (``dsh serve``) keeps no log and gathers no project context,
        its parent keeps the record."""
        return Session(
            config, sessions_root=None if child else sessions_root(env), env=env, client=self.client,
            retry=self.retry, approve=approve, subagent_tables=self.subagent_tables,
            parent_base_url=self.parent_base_url, user_dir=None if child else config_file_path(env).parent,
            extra_tools=extra_tools, label="child" if child else "main", cwd=cwd, project_context=not child,
            allow_mcp=allow_mcp, files=files, mcp_servers=mcp_servers, prompt_transform=self.prompt_transform,
        )

    def probed(self, config: Config) -> Config:
        """The config the doctor checks: the configured one, or the probe's endpoint with no key and no proxy."""
        if self.probe is None:
            return config
        return dataclasses.replace(config, base_url=self.probe.base_url, api_key=None, proxy=None)


class ConfiguredLabel(NamedTuple):
    """The banner of the configured endpoint, with what a replay adds to it."""

    replaying: str = ""  # `` · replaying N recorded exchange(s) from FILE``

    def banner(self, session: Session) -> str:
        return banner_line(__version__, session.model, session.endpoint, session.id or "?") + self.replaying

    def toolbar(self) -> str:
        return ""


def configured_endpoint(config: Config, client: EndpointClient | None = None) -> Endpoint:
    """The endpoint the config names; its client built by the session when first needed, unless one is given."""
    return Endpoint(sources=config.sources, label=ConfiguredLabel(), client=client)


async def open_endpoint(stack: contextlib.AsyncExitStack, options: LaunchOptions, config: Config) -> Endpoint:
    """The endpoint ``options`` pick, held open by ``stack`` (servers, clients and the recording close with it)."""
    opener: EndpointOpener | None = endpoint_opener(options)
    return await opener.open(stack, options, config) if opener is not None else configured_endpoint(config)
