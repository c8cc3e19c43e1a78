"""Loading by name what start-up does not need: a subcommand's or a mode's entry point, the demo or replay
opener, a command's module, imported when it is picked (docs/architecture.md, "Start-up and lazy imports").

The one way dsh imports late besides a commented function-local import: each name loaded here imports what it
needs at its own top, and none is loaded before it is asked for. The caller's annotation gives the entry its type.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["entry", "module"]


def module(name: str) -> ModuleType:
    """The module ``name``, imported now."""
    return importlib.import_module(name)


def entry(module_name: str, name: str) -> Any:
    """``name`` of the module ``module_name``, imported now."""
    return vars(importlib.import_module(module_name))[name]
