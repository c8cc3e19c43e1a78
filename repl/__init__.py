"""dsh's terminal front end: the prompt_toolkit REPL, rendering, slash commands, modes, the demo.

Deliberately import-free: ``dsh --version`` must not pay for prompt_toolkit or httpx.
"""

from dsh.llm._version import __version__

__all__ = ["__version__"]
