"""dsh's terminal front end: the prompt_toolkit REPL, rendering, slash commands, modes, the demo.

Deliberately import-free: ``dsh --version`` must not pay for prompt_toolkit or httpx.
"""

__version__ = "0.1.0"  # kept equal to llm.__version__ and pyproject by tests/repl/test_cli.py
