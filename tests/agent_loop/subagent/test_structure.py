"""The one design, checked where it is cheap to check: the registry's factories, and no detached tasks."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from dsh.agent_loop.subagent import PROVIDER_MODULES, Provider, Run, build_provider

AGENT_LOOP = Path(__file__).resolve().parents[3] / "agent_loop"


@pytest.mark.parametrize("kind", sorted(PROVIDER_MODULES))
def test_every_registered_module_has_the_one_factory_and_builds_a_provider(kind: str) -> None:
    module = importlib.import_module(PROVIDER_MODULES[kind])
    for retired in ("provider_from_config", "build_provider"):
        assert not hasattr(module, retired), f"{module.__name__}.{retired}"
    provider = build_provider("probe", {"provider": kind, "command": ["agent"]})
    assert isinstance(provider, Provider) and issubclass(provider.run_type, Run)
    assert provider.run_type.execute is not Run.execute


def test_no_detached_task_anywhere_in_the_agent_loop() -> None:
    # Every task runs in a task group someone holds (``async with`` or a group passed in).
    detached = re.compile(r"\b(create_task|ensure_future)\(")
    offenders = [
        f"{path.relative_to(AGENT_LOOP)}:{number}"
        for path in sorted(AGENT_LOOP.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if detached.search(line)
    ]
    assert offenders == []
