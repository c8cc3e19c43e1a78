"""The demo as an :class:`~dsh.repl.endpoint.Endpoint`: ``dsh.repl.options`` imports this module by name
(:data:`~dsh.repl.options.OPENERS`) only when ``--demo`` picks it, and opens it through :data:`OPENER`.

Everything the front end shows of the demo is said here: the sources fix lines name (the scenario picks the
endpoint and the proxy), the banner and the toolbar's scenario, what ``/doctor`` probes, and ``/scenario``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.repl import __version__
from dsh.repl.config import Config, ConfigError
from dsh.repl.demo.catalogue import BUDGET_DEMO_CAP, SCENARIOS, Demo, start_demo
from dsh.repl.endpoint import Endpoint, Probe
from dsh.repl.options import LaunchOptions

if TYPE_CHECKING:
    from dsh.agent_loop.session import Session

__all__ = ["DEMO_SOURCES", "KEY_NOT_NEEDED", "OPENER", "demo_config", "demo_endpoint"]

# In the demo the scenario picks the endpoint and the proxy, so fix lines point there.
DEMO_SOURCES = {"base_url": "the demo scenario", "proxy": "the demo scenario"}
KEY_NOT_NEEDED = "key not needed (demo)"  # the doctor's configuration step: the demo sends no key


@dataclass(frozen=True)
class _Label:
    demo: Demo

    def banner(self, session: Session) -> str:
        return (
            f"dsh {__version__} demo · no key, no network: scripted endpoint {session.endpoint} · "
            f"scenario {self.demo.scenario.name} · /scenario lists the failure kit · /help"
        )

    def toolbar(self) -> str:
        return f" · demo scenario: {self.demo.scenario.name}"


@dataclass(frozen=True)
class _Controls:
    """``/scenario`` over the demo's catalogue."""

    demo: Demo

    def listing(self) -> str:
        return self.demo.listing()

    def select(self, name: str) -> tuple[str, str]:
        scenario = self.demo.select(name)
        return scenario.name, scenario.summary

    def scenarios(self) -> list[tuple[str, str]]:
        return self.demo.scenarios()


def demo_endpoint(demo: Demo) -> Endpoint:
    """The endpoint over a started demo (its fault server, closed port and client)."""
    return Endpoint(
        sources=DEMO_SOURCES, label=_Label(demo), client=demo.client, retry=demo.retry,
        subagent_tables=demo.subagent_tables(), parent_base_url=demo.client.urls["server"],
        prompt_transform=demo.before_turn, probe=Probe(demo.server.url, KEY_NOT_NEEDED), controls=_Controls(demo),
    )


def demo_config(scenario: str | None, config: Config) -> Config:
    """The config a demo scenario runs with: ``--scenario budget-stop`` caps the run (its own cap when none is set)."""
    if scenario == "budget-stop" and config.max_cost is None:
        return dataclasses.replace(config, max_cost=BUDGET_DEMO_CAP)
    return config


class _DemoOpener:
    """The demo's checks at start, and its endpoint (an :class:`~dsh.repl.endpoint.EndpointOpener`)."""

    def check(self, options: LaunchOptions, config: Config) -> tuple[LaunchOptions, Config]:
        if config.record and config.sources.get("record", "").endswith("(flag)"):
            raise ConfigError("--record records a real endpoint or a --replay; the demo's scenarios are scripted")
        if config.record:  # the config file's: the demo still starts, and says it records nothing
            config = dataclasses.replace(config, record=None, warnings=(
                *config.warnings, f"record in {config.config_path} is not used by --demo: its scenarios are scripted"))
        if options.scenario and options.scenario not in SCENARIOS:
            raise ConfigError(f"no demo scenario {options.scenario!r} (known: {', '.join(SCENARIOS)})")
        return options, demo_config(options.scenario, config)

    async def open(self, stack: contextlib.AsyncExitStack, options: LaunchOptions, config: Config) -> Endpoint:
        return demo_endpoint(await start_demo(stack, options.scenario or "text"))


OPENER = _DemoOpener()
