"""The launch options every mode reads: argv parsed once by :mod:`dsh.repl.launch` (or ``dsh acp``), frozen.

What start-up computes (the demo implied by ``--scenario``, the ``-p`` prompt read from stdin, the ``--replay``
recording, the ``--report`` path with ``~`` expanded, the first prompt already drawn) is a field set when the
options are built; a later value is a derived copy (``dataclasses.replace``), never a write onto a shared bag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.llm.loopback.replay_server import Trace
    from dsh.repl.first_prompt import FirstPrompt

__all__ = ["LaunchOptions"]


@dataclass(frozen=True)
class LaunchOptions:
    """What the terminal, piped, ``-p`` and ACP modes read of the command line (the endpoint's flags went
    into the :class:`~dsh.repl.config.Config`)."""

    print_prompt: str | None = None  # -p's prompt (read from stdin already for `-p -`); None: not -p
    output_format: str | None = None  # -p's --output-format
    report: str | None = None  # -p's --report path, ~ expanded
    resume: str | None = None  # --resume ID|last
    demo: bool = False  # --demo, or implied by --scenario
    scenario: str | None = None
    allow_mcp: bool = False
    replay: str | None = None  # --replay's path
    replay_speed: float = 1.0
    trace: Trace | None = None  # the recording --replay serves, loaded at start
    first_prompt: FirstPrompt | None = None  # the prompt drawn before the app's import (dsh.repl.first_prompt)
