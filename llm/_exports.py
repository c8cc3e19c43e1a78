"""Lazy re-exports for a package root (PEP 562): a public name is imported from its module on first use.

``dsh.llm`` and ``dsh.agent_loop`` both re-export their submodules' public names this way, so that importing
one module (``dsh.llm._version`` for ``dsh --version``, the session log) does not load the whole package.
Kept free of ``typing`` at run time: every ``dsh`` start-up imports it.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing.TYPE_CHECKING, which would cost every importer `typing`
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_getattr(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` for a package whose ``exports`` map a module to its names (space-separated).

    ``namespace`` is the package's ``globals()``: a name, once imported, is stored there, so the next
    lookup does not come back here.
    """
    package = namespace["__name__"]
    module_of = {name: module for module, names in exports.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = vars(importlib.import_module(module))[name]  # the table names the module that defines it
        namespace[name] = value
        return value

    return __getattr__

