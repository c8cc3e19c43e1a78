"""The house rules of the product code (llm/, agent_loop/, repl/), run by `make lint` and `make test`.

Each rule is a number the code must stay within, so a newcomer can still navigate it in an hour
(docs/architecture.md, "House rules"). Import cycles are import-linter's job (pyproject.toml), and
citations of documents outside the repository tests/test_contracts.py's; this checks the rest: sizes,
function-local imports and dynamic attribute access.

    python -m tests.house_rules          # exits 1 and names every place that breaks a rule
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("llm", "agent_loop", "repl")
MAX_FUNCTION_LINES = 60  # constructors included
MAX_MODULE_LINES = 600
MODULE_SIZE_EXEMPT = ("llm/loopback/fault_server.py",)  # test and demo equipment: one scripted server
MAX_LOCAL_IMPORTS = 40  # each with a comment saying why it is not at the top
MAX_DYNAMIC_ATTRIBUTES = 15  # getattr/hasattr calls: a declared attribute or a protocol says more


@dataclass(frozen=True)
class Module:
    path: str  # relative to the repository root
    lines: list[str]
    tree: ast.Module


def product_modules(root: Path = ROOT) -> Iterator[Module]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            yield Module(path.relative_to(root).as_posix(), text.splitlines(), ast.parse(text, str(path)))


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def long_functions(module: Module) -> list[str]:
    out = []
    for function in _functions(module.tree):
        length = (function.end_lineno or function.lineno) - function.lineno + 1
        if length > MAX_FUNCTION_LINES:
            out.append(f"{module.path}:{function.lineno}: {function.name} is {length} lines")
    return out


def local_imports(module: Module) -> list[tuple[str, bool]]:
    """Every import inside a function, and whether a comment says why (on its lines or the line above)."""
    found: dict[int, bool] = {}
    for function in _functions(module.tree):
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in found:
                span = module.lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
                above = module.lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                found[node.lineno] = any("#" in line for line in span) or above.startswith("#")
    return [(f"{module.path}:{line}", why) for line, why in sorted(found.items())]


def dynamic_attributes(module: Module) -> list[str]:
    return [
        f"{module.path}:{node.lineno}"
        for node in ast.walk(module.tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
    ]


def breaches(modules: list[Module]) -> list[str]:
    """One line per broken rule (empty when the house holds)."""
    out: list[str] = []
    imports: list[tuple[str, bool]] = []
    dynamic: list[str] = []
    for module in modules:
        if len(module.lines) > MAX_MODULE_LINES and module.path not in MODULE_SIZE_EXEMPT:
            out.append(f"{module.path} is {len(module.lines)} lines (at most {MAX_MODULE_LINES}): split it by concern")
        out += long_functions(module)
        imports += local_imports(module)
        dynamic += dynamic_attributes(module)
    out += [f"{place}: a function-local import without a comment saying why" for place, why in imports if not why]
    if len(imports) > MAX_LOCAL_IMPORTS:
        out.append(f"{len(imports)} function-local imports (at most {MAX_LOCAL_IMPORTS}): import at the top")
    if len(dynamic) > MAX_DYNAMIC_ATTRIBUTES:
        out.append(f"{len(dynamic)} getattr/hasattr calls (at most {MAX_DYNAMIC_ATTRIBUTES}): " + ", ".join(dynamic))
    return out


def main() -> int:
    found = breaches(list(product_modules()))
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
