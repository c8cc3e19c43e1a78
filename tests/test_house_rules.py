"""The house-rules check (tests/house_rules.py, run by `make lint`) names each kind of breach."""

from __future__ import annotations

from pathlib import Path

from tests import house_rules


def _tree(tmp_path: Path, source: str) -> list[house_rules.Module]:
    for package in house_rules.PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "repl" / "mode.py").write_text(source, encoding="utf-8")
    return list(house_rules.product_modules(tmp_path))


def test_a_long_function_and_an_import_without_a_why_are_named(tmp_path: Path) -> None:
    body = "".join(f"    x{n} = {n}\n" for n in range(61))
    source = f"def long() -> None:\n    import json\n    import csv  # only -p writes CSV\n{body}"
    assert house_rules.breaches(_tree(tmp_path, source)) == [
        "repl/mode.py:1: long is 64 lines",
        "repl/mode.py:2: a function-local import without a comment saying why",
    ]


def test_a_module_over_the_limit_is_named(tmp_path: Path) -> None:
    source = "x = 1\n" * 601
    assert house_rules.breaches(_tree(tmp_path, source)) == [
        "repl/mode.py is 601 lines (at most 600): split it by concern",
    ]


def test_too_many_getattr_calls_are_counted_with_their_places(tmp_path: Path) -> None:
    source = "".join(f"a{n} = getattr(object, 'x', None)\n" for n in range(16))
    (message,) = house_rules.breaches(_tree(tmp_path, source))
    assert message.startswith("16 getattr/hasattr calls (at most 15): repl/mode.py:1, repl/mode.py:2,")

