"""The launch options every mode reads: argv parsed once by :mod:`dsh.repl.launch` (or ``dsh acp``), frozen; and
the endpoint they pick.

What start-up computes (the demo implied by ``--scenario``, the ``-p`` prompt read from stdin, the ``--replay``
recording, the ``--report`` path with ``~`` expanded, the first prompt already drawn) is a field set when the
options are built; a later value is a derived copy (``dataclasses.replace``), never a write onto a shared bag.

The endpoints other than the configured one register themselves in :data:`OPENERS`: each module names its
:class:`~dsh.repl.endpoint.EndpointOpener` ``OPENER`` and is imported by name only when its flag picks it (the
demo's fault server and scenario catalogue, a replay's server and HTTP client are no part of a real run's
start-up: docs/architecture.md, "Start-up and lazy imports").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dsh.repl.config import Config, ConfigError
from dsh.repl.lazy import entry

if TYPE_CHECKING:
    from dsh.llm.loopback.replay_server import Trace

__all__ = ["OPENERS", "DrawnPrompt", "LaunchOptions", "check_endpoint", "endpoint_opener"]

OPENERS = {"demo": "dsh.repl.demo.endpoint", "replay": "dsh.repl.replay"}


class DrawnPrompt(Protocol):
    """The banner and prompt start-up drew before the app's import (dsh.repl.first_prompt.FirstPrompt): the app's
    prompt takes it over, or a start-up failure erases it. The options name only this, so that they stand on the
    ground floor of the house (docs/architecture.md)."""

    banner: str  # the line it drew, which the app's banner must match
    session_id: str  # the id its banner showed: the new session is named by it

    def take_over(self) -> None: ...

    def abandon(self) -> None: ...


@dataclass(frozen=True)
class LaunchOptions:
    """What the terminal, piped, ``-p`` and ACP modes read of the command line (the endpoint's flags went
    into the :class:`~dsh.repl.config.Config`)."""

    print_prompt: str | None = None  # -p's prompt (read from stdin already for `-p -`); None: not -p
    output_format: str | None = None  # -p's --output-format
    report: str | None = None  # -p's --report path, ~ expanded
    images: tuple[str, ...] = ()  # -p's --image files, ~ expanded (agent_loop/image_input.py)
    resume: str | None = None  # --resume ID|last
    demo: bool = False  # --demo, or implied by --scenario
    scenario: str | None = None
    allow_mcp: bool = False
    replay: str | None = None  # --replay's path
    replay_speed: float = 1.0
    trace: Trace | None = None  # the recording --replay serves, loaded at start
    first_prompt: DrawnPrompt | None = None  # the prompt drawn before the app's import

    @property
    def own_endpoint(self) -> bool:
        """Whether these options pick an endpoint dsh serves itself (the demo's, a replay's): it needs no key, and
        it starts before the first prompt can be drawn."""
        return self.demo or bool(self.replay)


def endpoint_opener(options: LaunchOptions) -> Any:
    """The registered opener ``options`` pick (a :class:`~dsh.repl.endpoint.EndpointOpener`, which the caller's
    annotation names), imported now; None for the configured endpoint."""
    if not options.own_endpoint:
        return None
    return entry(OPENERS["demo" if options.demo else "replay"], "OPENER")


def check_endpoint(options: LaunchOptions, config: Config) -> tuple[LaunchOptions, Config]:
    """The options and config of the endpoint ``options`` pick, checked at start (ConfigError, exit 2, for what
    cannot work): the demo checks its scenario; a replay loads its recording (``options.trace``)."""
    if options.demo and options.replay:
        raise ConfigError("--replay and --demo each pick the endpoint; give one of them")
    opener = endpoint_opener(options)
    if opener is None:
        return options, config
    check: Callable[[LaunchOptions, Config], tuple[LaunchOptions, Config]] = opener.check
    return check(options, config)
