"""``dsh acp`` runs a prompt as every front end does: one call to ``Session.run_turn``, its preamble included — a
compaction first when the window is nearly full (``auto_compact``), and the demo's scenario set up by the prompt
transform the session was given."""

from __future__ import annotations

from pathlib import Path

import acp
import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.repl.test_acp_agent import Client, _dsh_acp
from tests.repl.test_serve_preamble import MODEL, SUMMARY, _nearly_full

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]


async def test_a_prompt_sent_past_90_percent_is_preceded_by_a_compaction(tmp_path: Path) -> None:
    config = tmp_path / "config" / "dsh" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'model = "{MODEL}"\nauto_compact = true\n', encoding="utf-8")
    script = [Behaviour("text", text="Hello!", usage=_nearly_full()), Behaviour("text", text=SUMMARY),
              Behaviour("text", text="Hi again.")]
    async with FaultServer(script=script) as server:
        client = Client()
        async with _dsh_acp(tmp_path, client, "--base-url", server.url) as agent:
            session_id = await agent.start()
            assert (await agent.prompt(session_id, "hello")).stop_reason == "end_turn"
            assert (await agent.prompt(session_id, "again")).stop_reason == "end_turn"
    assert client.text() == "Hello!Hi again."
    assert len(server.requests) == 3
    sent = server.requests[2].json["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert SUMMARY in sent[1]["content"] and sent[2]["content"] == "again"


async def test_the_demo_scenario_is_set_up_before_each_prompt(tmp_path: Path) -> None:
    client = Client()
    async with _dsh_acp(tmp_path, client, "--scenario", "http-401", key=None) as agent:
        session_id = await agent.start()
        with pytest.raises(acp.RequestError) as failed:
            await agent.prompt(session_id, "hello")
    assert str(failed.value).startswith("[turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid")
