"""The model repeats the key in an interactive session: a real dsh in a pseudo-terminal shows ``***``
where the key stood, split across chunks or cut off by Ctrl-C mid-key, and the session log keeps the same
(docs/reliability.md, "Attacks: the model repeats the key")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_pty import Dsh, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries

pytestmark = pytest.mark.timeout(60)

KEY = canaries.API_KEY


def _pieces(text: str) -> set[str]:
    """Every 8-character piece of the key found in ``text``."""
    return {KEY[at : at + 8] for at in range(len(KEY) - 7) if KEY[at : at + 8] in text}


def test_an_echoed_key_shows_masked_and_ctrl_c_mid_key_keeps_it_masked(home: Path, spawn) -> None:  # noqa: F811
    answer = Behaviour("text", text=f"Your key is {KEY[:7]}|{KEY[7:]}, as asked.\n", cut="|")
    cut_off = Behaviour("keepalive_only", text=f"Here it is: {KEY[:20]}")  # then only keep-alives
    with FaultServer(script=[answer, cut_off]) as server:
        dsh: Dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("what is my key?")
        dsh.expect_exact("[main turn 1] Your key is ***, as asked.\r\n")
        dsh.prompt()
        dsh.send("again")
        dsh.wait_screen("[main turn 2] Here it is:")
        # Keep-alives come after the key's first 20 characters: once the toolbar counts them, dsh holds those.
        dsh.wait_screen("no content for", timeout=15)
        assert "keep-alive" in dsh.screen.text()
        dsh.child.sendintr()
        dsh.expect_exact("[main turn 2] Here it is: ***\r\n[turn aborted] cancelled\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    [log] = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    messages = [record["data"] for record in map(json.loads, log.read_text().splitlines()[1:])
                if record["type"] == "assistant/message"]
    assert [(m["content"], m["interrupted"]) for m in messages] == [
        ("Your key is ***, as asked.\n", False), ("Here it is: ***", True)]
    assert _pieces(dsh.raw) == set() and _pieces(log.read_text()) == set()
