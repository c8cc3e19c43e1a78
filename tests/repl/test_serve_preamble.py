"""``dsh serve --stdio`` runs a turn as the REPL does: one call to ``Session.run_turn``, its preamble included.

A prompt sent with the window nearly full (90 % or more, ``auto_compact`` on) is preceded by a compaction:
the child sends its ``context/compact`` event, then the turn's, and the model gets the summary instead of the
long conversation (tests/repl/test_compact_shell.py checks the same in the REPL).
"""

from __future__ import annotations

import anyio
import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.models import model_info
from tests import canaries
from tests.repl.test_serve import REPO, _serve, _types

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

MODEL = "deepseek-v4-flash"
SUMMARY = "The user said hello and was greeted."


def _nearly_full() -> dict[str, int]:
    """Usage numbers that fill the model's window to 95 %."""
    info = model_info(MODEL)
    assert info is not None and info.context_window is not None
    prompt = int(info.context_window * 0.95)
    return {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}


async def test_a_prompt_sent_past_90_percent_is_preceded_by_a_compaction() -> None:
    script = [Behaviour("text", text="Hello!", usage=_nearly_full()), Behaviour("text", text=SUMMARY),
              Behaviour("text", text="Hi again.")]
    async with FaultServer(script=script) as server, _serve(env={"DEEPSEEK_API_KEY": canaries.API_KEY}) as child:
        await child.conn.request("initialize", {"model": MODEL, "base_url": server.url, "cwd": REPO,
                                                "auto_compact": True})
        with anyio.fail_after(30):
            assert await child.conn.request("session/prompt", {"prompt": "hello"}) == {"reason": {"kind": "completed"}}
        first = len(child.events)
        with anyio.fail_after(30):
            assert await child.conn.request("session/prompt", {"prompt": "again"}) == {"reason": {"kind": "completed"}}
        second = [note["event"] for note in child.events[first:]]
        assert second[0]["type"] == "context/compact"
        assert second[0]["data"]["summary"] == SUMMARY and second[0]["data"]["replaced"] == 2
        assert second[1]["type"] == "turn/start" and _types(child)[-1] == "turn/end"
        assert len(server.requests) == 3
        sent = server.requests[2].json["messages"]
        assert [m["role"] for m in sent] == ["user", "user"]
        assert SUMMARY in sent[0]["content"] and sent[1]["content"] == "again"
        await child.conn.request("shutdown")


async def test_without_auto_compact_a_full_window_is_sent_as_is() -> None:
    script = [Behaviour("text", text="Hello!", usage=_nearly_full()), Behaviour("text", text="Hi again.")]
    async with FaultServer(script=script) as server, _serve(env={"DEEPSEEK_API_KEY": canaries.API_KEY}) as child:
        await child.conn.request("initialize", {"model": MODEL, "base_url": server.url, "cwd": REPO})
        with anyio.fail_after(30):
            await child.conn.request("session/prompt", {"prompt": "hello"})
            await child.conn.request("session/prompt", {"prompt": "again"})
        assert "context/compact" not in _types(child)
        assert [m["role"] for m in server.requests[1].json["messages"]] == ["user", "assistant", "user"]
        await child.conn.request("shutdown")
