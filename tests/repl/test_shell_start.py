"""Shell.start(defer_agent=True): the session is named at once; its log, the client and the agent come on first need."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import FaultServer
from dsh.repl import shell as shell_module
from dsh.repl.config import Config
from dsh.repl.shell import Shell, StartupError
from tests.repl.test_shell_commands import ListSink

pytestmark = pytest.mark.anyio

KEY = "sk-shellStartKey000000000000000"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


async def test_a_deferred_agent_is_built_by_the_first_turn(env: dict[str, str]) -> None:
    async with FaultServer(default="text") as server:
        sink = ListSink()
        shell = Shell(Config(api_key=KEY, base_url=server.url + "/"), sink, color=False, env=env)
        try:
            await shell.start(defer_agent=True)
            assert shell.session is None and shell.agent is None and shell.client is None
            named = shell.session_id
            assert named is not None and not list(shell.root.glob("*.jsonl"))
            # What the banner and toolbar show before the client exists is what the client will show.
            shown = shell.endpoint
            assert await shell.handle_line("hello") == {"kind": "completed"}
            assert shell.agent is not None and shell.agent.session is shell.session
            assert shell.session is not None and shell.session.id == shell.session_id == named
            assert [path.stem for path in shell.root.glob("*.jsonl")] == [named]
            assert shell.endpoint == shown == server.url
            assert shell.ensure_agent() is shell.agent
        finally:
            await shell.aclose()


async def test_an_agent_that_cannot_be_built_is_a_startup_error(env: dict[str, str]) -> None:
    def broken(config: Config, shell: Shell) -> list[object]:
        raise OSError("no tools today")

    shell = Shell(Config(api_key=KEY, base_url="http://127.0.0.1:9"), ListSink(), color=False, env=env)
    shell_module.register_tool_factory(broken)  # type: ignore[arg-type]
    try:
        await shell.start(defer_agent=True)  # nothing here needs the tools yet
        with pytest.raises(StartupError) as caught:
            shell.ensure_agent()
        assert isinstance(caught.value.__cause__, OSError) and "no tools today" in str(caught.value)
    finally:
        shell_module._tool_factories.remove(broken)  # type: ignore[arg-type]
        await shell.aclose()
