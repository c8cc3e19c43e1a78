"""One error vocabulary: every code is spelled once, in dsh.llm.codes, in one casing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dsh.llm import ErrorCode

REPO = Path(__file__).resolve().parents[2]
CODES_MODULE = REPO / "llm" / "codes.py"
PRODUCT = [REPO / "llm", REPO / "agent_loop", REPO / "repl"]


def test_codes_are_upper_snake_and_their_own_text() -> None:
    for code in ErrorCode:
        assert re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*", code.value), code
        assert code == code.name == str(code) == f"{code}"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _export_lists(tree: ast.AST) -> set[int]:
    """String constants inside ``__all__ = [...]``: names, not codes."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            ids.update(id(item) for item in ast.walk(node.value))
    return ids


def spelled_codes(source: str) -> list[str]:
    """String literals in ``source`` that spell an error code (docstrings and ``__all__`` aside)."""
    values = {code.value for code in ErrorCode}
    tree = ast.parse(source)
    skip = _docstrings(tree) | _export_lists(tree)
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values
        and id(node) not in skip
    ]


def test_the_enum_is_the_only_place_codes_are_spelled() -> None:
    found = [
        f"{path.relative_to(REPO)}:{hit}"
        for root in PRODUCT
        for path in sorted(root.rglob("*.py"))
        if path != CODES_MODULE
        for hit in spelled_codes(path.read_text())
    ]
    assert found == []


def test_the_checker_sees_a_spelled_code() -> None:
    source = '"""TRANSPORT in a docstring is prose."""\n__all__ = ["SERVER"]\nraise X("m", "TRANSPORT")\n'
    assert spelled_codes(source) == ["3: 'TRANSPORT'"]
