"""The cache-drop line kept (issue 37 part 3): it is written to the session log as a ``cache/drop`` record after the
turn's end, so ``dsh sessions show`` prints it where it happened; and a turn run for background-job notices counts
as a turn for it (its rate is the next turn's previous one, and its own drop gets the line). Real dsh processes and
a real in-process shell against the fault server's prompt cache (llm/loopback/prompt_cache.py); exact lines."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.agent_loop import events as ev
from dsh.agent_loop.cache_watch import cache_percent
from dsh.agent_loop.reasons import Completed
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.session_read import load_session_file
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.loopback.prompt_cache import PromptCache
from dsh.repl.config import Config
from dsh.repl.shell import Shell
from tests.repl.test_shell_commands import ListFrontEnd, ListSink
from tests.session_log_invariants import assert_well_formed, read_log

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-cacheDropLogTestKey00000000000000"
NOTICE = "background job subagent-1 (subagent: probe) finished [status: completed]. Read its output."


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config" / "dsh").mkdir(parents=True)
    (tmp_path / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done"), prompt_cache=True).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def _env(home: Path, server: FaultServer) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
            "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url}


def dsh(home: Path, server: FaultServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home, env=_env(home, server), input=stdin,
                          capture_output=True, text=True, timeout=120)


def _rates(server: FaultServer) -> list[float]:
    """Each request's hit rate, as the server's cache counted it (replayed over the bodies dsh sent)."""
    cache = PromptCache()
    usages = [cache.usage(request.json) for request in server.requests]
    return [usage["prompt_cache_hit_tokens"] / usage["prompt_tokens"] for usage in usages]


def _records(home: Path, kind: str) -> list[dict[str, object]]:
    (path,) = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return [record for record in records if record["type"] == kind]


def test_sessions_show_prints_the_drop_after_the_turn_it_followed(home: Path, server: FaultServer) -> None:
    # Turns 1 and 2 on deepseek-flash (cold, then the prefix cached), turn 3 on another model: nothing cached.
    result = dsh(home, server, stdin="one\ntwo\n/model deepseek-v4-pro\nthree\n")
    assert (result.returncode, result.stderr) == (0, "")
    _, second, third = _rates(server)
    assert third == 0 and second > 0.9
    drop = f"cache 0% (was {cache_percent(second)}): the model changed (deepseek-flash to deepseek-v4-pro)"
    assert result.stdout.splitlines()[-2:] == ["[main turn 3] done", drop]
    [record] = _records(home, "cache/drop")
    assert record["data"] == {"turn": 3, "rate": 0.0, "previous": second,
                              "change": "the model changed (deepseek-flash to deepseek-v4-pro)"}
    _, records = read_log(next((home / "state" / "dsh" / "sessions").glob("*.jsonl")))
    assert_well_formed(records)
    assert [record["type"] for record in records[-2:]] == ["turn/end", "cache/drop"]  # after the turn's end
    shown = dsh(home, server, "sessions", "show", "last")
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout.splitlines()[1:] == ["> one", "[main turn 1] done", "> two", "[main turn 2] done",
                                             "model set to deepseek-v4-pro",  # the model/set record
                                             "> three", "[main turn 3] done", drop]
    # The session resumes as before: the record changes nothing in the conversation.
    again = dsh(home, server, "-p", "four", "--resume", "last")
    assert (again.returncode, again.stdout) == (0, "done\n")
    messages = server.requests[-1].json["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["one", "two", "three", "four"]


def test_a_hostile_cache_drop_record_is_shown_inert_and_an_unknown_reader_skips_it(home: Path,
                                                                                    server: FaultServer) -> None:
    sessions = home / "state" / "dsh" / "sessions"
    log = SessionLog.create(sessions, cwd=str(home))
    log.append(ev.TurnStart(1, "hi"))
    log.append(ev.TurnEnd(1, Completed()))
    log.append(ev.CacheDrop(1, math.nan, 7.5, f"\x1b]0;pwned\x07{KEY} changed\n\ud800" + "x" * 10))
    log.close()
    shown = dsh(home, server, "sessions", "show", "last")
    assert (shown.returncode, shown.stderr) == (0, "")
    line = shown.stdout.splitlines()[-1]
    assert line == "cache 0% (was 100%): ␛]0;pwned␇*** changed \ufffdxxxxxxxxxx", line  # rates held to 0-1
    # A version that does not know the type reads it as unknown (events.py: UnknownEvent) and goes on.
    _, records, warnings = load_session_file(log.path)
    assert warnings == [] and isinstance(ev.from_wire(records[-1]), ev.CacheDrop)
    unknown = ev.from_wire({"type": "cache/dropped-later", "data": {"turn": 1}})
    assert isinstance(unknown, ev.UnknownEvent)


async def _shell(home: Path, server: FaultServer) -> tuple[Shell, ListSink]:
    sink = ListSink()
    env = {"HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    shell = Shell(Config(api_key=KEY, base_url=server.url), ListFrontEnd(sink), color=False, env=env)
    await shell.start()
    return shell, sink


@pytest.mark.anyio
async def test_a_job_notice_turn_is_the_next_turn_s_previous_and_gets_its_own_drop_line(
        home: Path, server: FaultServer) -> None:
    shell, sink = await _shell(home, server)
    try:
        assert await shell.handle_line("one") == Completed()  # cold
        agent = shell.session.ensure_agent()
        agent.post_notice(NOTICE, "subagent-1")
        assert await shell.deliver_notices() == Completed()  # turn 1's prefix again: cached
        assert await shell.handle_line("/model deepseek-v4-pro") is None
        assert await shell.handle_line("two") == Completed()  # another model: nothing cached
        assert await shell.handle_line("three") == Completed()  # cached again
        shell.session.set_model("model-x")
        agent.post_notice(NOTICE, "subagent-2")
        assert await shell.deliver_notices() == Completed()  # another model again: nothing cached
    finally:
        await shell.aclose()
    first, notice, two, three, last = _rates(server)
    assert (first, two, last) == (0, 0, 0) and min(notice, three) > 0.5
    lines = sink.text.splitlines()
    # Turn 2's previous is the notice turn's rate (not turn 1's 0%, which would be no drop at all).
    assert lines[lines.index("[main turn 3] done") + 1] == (
        f"cache 0% (was {cache_percent(notice)}): the model changed (deepseek-flash to deepseek-v4-pro)")
    assert lines[-2:] == ["[main turn 5] done",
                          f"cache 0% (was {cache_percent(three)}): the model changed (deepseek-v4-pro to model-x)"]
    assert [record["data"]["turn"] for record in _records(home, "cache/drop")] == [3, 5]
    assert_well_formed(read_log(next((home / "state" / "dsh" / "sessions").glob("*.jsonl")))[1])
