"""Fixtures for the agent-loop tests: agents pointed at a fault server (tests/conftest.py), session roots."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop import Agent, RetryPolicy, SessionLog, ToolRegistry
from dsh.llm import DeepSeekClient
from tests import canaries
from tests.agent_loop.agent_support import Recorder


@pytest.fixture
def session_root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


AgentFactory = Callable[..., tuple[Agent, Recorder]]


@pytest.fixture
async def make_agent(anyio_backend: str, session_root: Path, tmp_path: Path) -> AsyncIterator[AgentFactory]:
    """``make_agent(base_url, **agent_options)`` -> (agent with a fresh session log, event recorder).

    Retries wait about a millisecond (the policy's base delay is injectable) so tests stay fast.
    """
    made: list[tuple[Agent, DeepSeekClient]] = []

    def factory(base_url: str, *, client_options: dict[str, Any] | None = None, **options: Any):
        client_kwargs: dict[str, Any] = {
            "api_key": canaries.API_KEY,
            "stream_idle_timeout": 10.0,
            "first_token_timeout": 20.0,
            "connect_timeout": 5.0,
        }
        client_kwargs.update(client_options or {})
        client = DeepSeekClient(base_url=base_url, **client_kwargs)
        options.setdefault("retry", RetryPolicy(base_delay=0.001, jitter=0.0))
        options.setdefault("tools", ToolRegistry())
        options.setdefault("cwd", tmp_path)
        if "session" not in options:
            options["session"] = SessionLog.create(session_root, cwd=tmp_path)
        agent = Agent(client, **options)
        recorder = Recorder()
        agent.subscribe(recorder)
        made.append((agent, client))
        return agent, recorder

    yield factory
    for agent, client in made:
        await agent.aclose()
        await client.aclose()
