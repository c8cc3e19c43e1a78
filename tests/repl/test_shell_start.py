"""Shell.start(defer_agent=True): the session is named at once; its log, the client and the agent come on first need."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.agent_loop.reasons import Completed
from dsh.agent_loop.session import Session
from dsh.llm.loopback.fault_server import FaultServer
from dsh.repl.config import Config
from dsh.repl.frontend import PlainFrontEnd
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
        shell = Shell(Config(api_key=KEY, base_url=server.url + "/"), PlainFrontEnd(sink), color=False, env=env)
        session = shell.session
        root = session.sessions_root
        assert root is not None
        try:
            await shell.start(defer_agent=True)
            assert session.log is None and session.agent is None and session.client is None
            named = session.id
            assert named is not None and not list(root.glob("*.jsonl"))
            # What the banner and toolbar show before the client exists is what the client will show.
            shown = session.endpoint
            assert await shell.handle_line("hello") == Completed()
            assert session.agent is not None and session.agent.session is session.log
            assert session.log is not None and session.log.id == session.id == named
            assert [path.stem for path in root.glob("*.jsonl")] == [named]
            assert session.endpoint == shown == server.url
            assert session.ensure_agent() is session.agent
        finally:
            await shell.aclose()


async def test_an_agent_that_cannot_be_built_is_a_startup_error(env: dict[str, str]) -> None:
    def broken(session: Session) -> list[object]:
        raise OSError("no tools today")

    shell = Shell(Config(api_key=KEY, base_url="http://127.0.0.1:9"), PlainFrontEnd(ListSink()), color=False,
                  env=env, extra_tools=broken)  # type: ignore[arg-type]
    try:
        await shell.start(defer_agent=True)  # nothing here needs the tools yet
        with pytest.raises(StartupError) as caught:
            shell.session.ensure_agent()
        assert isinstance(caught.value.__cause__, OSError) and "no tools today" in str(caught.value)
    finally:
        await shell.aclose()
