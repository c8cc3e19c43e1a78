"""The hook points of a session's own life (agent_loop/session_extensions.py; docs/hooks.md), with real scripts and
a real Session against the fault server: SessionStart before a session's first turn, UserPromptSubmit's printed
context joining the prompt, Stop after a completed turn
(a hook that exits 2 has the turn go on with its reason, told ``stop_hook_active`` from then on), PreCompact before
/compact and before dsh's own compaction, and Notification when dsh asks for an approval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.conversation import Conversation
from dsh.agent_loop.hooks import parse_hooks
from dsh.agent_loop.reasons import Completed
from dsh.agent_loop.session import Session
from dsh.agent_loop.session_extensions import MAX_STOP_CONTINUATIONS
from dsh.llm.loopback.fault_server import Behaviour
from tests.agent_loop.session_configs import StubConfig
from tests.session_log_invariants import read_log

pytestmark = pytest.mark.anyio

# Appends each event's JSON to a file: what the hook was told, in order.
RECORD = """#!/bin/sh
cat >> "{out}"
echo >> "{out}"
"""

# Blocks the first Stop (exit 2, its reason on stderr); lets the turn end once told stop_hook_active.
STOP_UNTIL_TOLD = """#!/bin/sh
payload=$(cat)
echo "$payload" >> "{out}"
case "$payload" in
  *'"stop_hook_active": true'*) exit 0 ;;
esac
echo "the tests still fail: run them again" >&2
exit 2
"""


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def _told(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _session(tmp_path: Path, server: Any, hooks: dict[str, list[dict[str, Any]]], **kwargs: Any) -> Session:
    config = StubConfig(base_url=server.url, hooks=parse_hooks(hooks, "config file test.toml"))
    return Session(config, sessions_root=tmp_path / "sessions", project_context=False, cwd=str(tmp_path), **kwargs)


async def test_session_start_runs_once_before_the_first_turn_and_again_after_new(tmp_path: Path, server: Any):
    out = tmp_path / "told.jsonl"
    hook = _script(tmp_path, "start.sh", RECORD.format(out=out))
    session = _session(tmp_path, server, {"SessionStart": [{"command": str(hook)}]})
    await session.start()
    try:
        await session.run_turn("one")
        await session.run_turn("two")
        await session.new_session()
        await session.run_turn("three")
    finally:
        await session.aclose()
    assert [(e["hook_event_name"], e["source"]) for e in _told(out)] == [("SessionStart", "startup"),
                                                                         ("SessionStart", "clear")]


async def test_a_stop_hook_that_blocks_has_the_turn_go_on_with_its_reason(tmp_path: Path, server: Any):
    out = tmp_path / "told.jsonl"
    hook = _script(tmp_path, "stop.sh", STOP_UNTIL_TOLD.format(out=out))
    server.default = Behaviour("text", text="Done.")
    session = _session(tmp_path, server, {"Stop": [{"command": str(hook)}]})
    await session.start()
    try:
        assert await session.run_turn("fix the tests") == Completed()
        log_path = session.log.path if session.log is not None else None
    finally:
        await session.aclose()
    assert [e["stop_hook_active"] for e in _told(out)] == [False, True]
    assert len(server.requests) == 2
    last = server.requests[1].json["messages"]
    assert last[-1] == {"role": "user", "content": "[Stop hook] the tests still fail: run them again"}
    _, records = read_log(log_path)
    starts = [r["data"] for r in records if r["type"] == "turn/start"]
    assert [(s["prompt"], s.get("source")) for s in starts] == [
        ("fix the tests", None), ("[Stop hook] the tests still fail: run them again", "hook")]
    assert [(r["data"]["event"], r["data"]["outcome"]) for r in records if r["type"] == "hook/run"] == [
        ("Stop", "block"), ("Stop", "go")]


async def test_a_stop_hook_that_always_blocks_is_held_to_the_limit(tmp_path: Path, server: Any):
    hook = _script(tmp_path, "never.sh", "#!/bin/sh\ncat >/dev/null\necho 'not yet' >&2\nexit 2\n")
    session = _session(tmp_path, server, {"Stop": [{"command": str(hook)}]})
    await session.start()
    try:
        assert await session.run_turn("go") == Completed()
    finally:
        await session.aclose()
    assert len(server.requests) == 1 + MAX_STOP_CONTINUATIONS


async def test_what_prompt_hooks_print_joins_the_prompt_masked_and_a_resume_sends_it_again(tmp_path: Path,
                                                                                            server: Any):
    plain = _script(tmp_path, "plain.sh", "#!/bin/sh\ncat >/dev/null\necho 'The release freeze starts today.'\n")
    answer = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                     "additionalContext": "deploy key sk-stub-config-key-000000"}}
    shaped = _script(tmp_path, "json.sh", f"#!/bin/sh\ncat >/dev/null\necho '{json.dumps(answer)}'\n")
    server.default = Behaviour("text", text="Noted.")
    hooks = {"UserPromptSubmit": [{"command": str(plain)}, {"command": str(shaped)}]}
    session = _session(tmp_path, server, hooks)
    await session.start()
    try:
        await session.run_turn("hello")
        await session.run_turn("again")
        log_path = session.log.path if session.log is not None else None
    finally:
        await session.aclose()
    added = "[UserPromptSubmit hook]\nThe release freeze starts today.\ndeploy key ***"
    first, second = (request.json["messages"] for request in server.requests)
    assert first[-1] == {"role": "user", "content": f"hello\n\n{added}"}
    assert second[-1] == {"role": "user", "content": f"again\n\n{added}"}
    _, records = read_log(log_path)
    assert [r["data"] for r in records if r["type"] == "hook/context"] == [
        {"turn": turn, "event": "UserPromptSubmit", "text": added.split("\n", 1)[1]} for turn in (1, 2)]
    assert "sk-stub-config-key-000000" not in json.dumps(records)
    rebuilt = Conversation()
    for record in records:
        rebuilt.apply_record(record["type"], record.get("data"))
    assert [m.content for m in rebuilt.messages if m.role == "user"] == [f"hello\n\n{added}", f"again\n\n{added}"]


async def test_pre_compact_is_told_the_focus_before_compact(tmp_path: Path, server: Any):
    out = tmp_path / "told.jsonl"
    hook = _script(tmp_path, "compact.sh", RECORD.format(out=out))
    server.default = Behaviour("text", text="A summary.")
    session = _session(tmp_path, server, {"PreCompact": [{"command": str(hook)}]})
    await session.start()
    try:
        await session.run_turn("hello")
        await session.compact("the parser")
    finally:
        await session.aclose()
    (told,) = _told(out)
    assert (told["hook_event_name"], told["trigger"], told["custom_instructions"]) == (
        "PreCompact", "manual", "the parser")


async def test_pre_compact_is_told_auto_when_dsh_compacts_on_its_own(tmp_path: Path, server: Any):
    out = tmp_path / "told.jsonl"
    hook = _script(tmp_path, "compact.sh", RECORD.format(out=out))
    server.push("text", "http_400_context", Behaviour("text", text="A summary."), "text")
    config = StubConfig(base_url=server.url, auto_compact=True,
                        hooks=parse_hooks({"PreCompact": [{"command": str(hook)}]}, "config file test.toml"))
    session = Session(config, sessions_root=tmp_path / "sessions", project_context=False, cwd=str(tmp_path))
    await session.start()
    try:
        await session.run_turn("hello")
        assert await session.run_turn("more") == Completed()  # refused for its size: compacted, sent again
    finally:
        await session.aclose()
    (told,) = _told(out)
    assert (told["hook_event_name"], told["trigger"], told["custom_instructions"]) == ("PreCompact", "auto", "")
    assert len(server.requests) == 4


async def test_notification_is_told_when_dsh_asks_for_an_approval(tmp_path: Path, server: Any):
    out = tmp_path / "told.jsonl"
    hook = _script(tmp_path, "notify.sh", RECORD.format(out=out))
    server.push(Behaviour("parallel_tool_calls", calls=[["s1", "run_shell", {"command": "echo hi"}]]))
    asked: list[object] = []

    async def approve(request: object) -> None:
        asked.append(request)
        return None  # nobody answers: the call is denied

    session = _session(tmp_path, server, {"Notification": [{"command": str(hook)}]}, approve=approve)
    await session.start()
    try:
        await session.run_turn("say hi")
    finally:
        await session.aclose()
    assert len(asked) == 1
    (told,) = _told(out)
    assert (told["hook_event_name"], told["message"]) == ("Notification", "dsh needs your permission to use run_shell")


async def test_what_a_session_start_hook_prints_goes_with_the_first_prompt_masked(tmp_path: Path, server: Any):
    hook = _script(tmp_path, "context.sh",
                   "#!/bin/sh\ncat >/dev/null\necho 'branch main; token sk-stub-config-key-000000'\n")
    session = _session(tmp_path, server, {"SessionStart": [{"command": str(hook)}]})
    await session.start()
    try:
        await session.run_turn("hello")
        await session.run_turn("again")
    finally:
        await session.aclose()
    first, second = ([m["content"] for m in r.json["messages"] if m["role"] == "user"][-1] for r in server.requests)
    assert first.startswith("[SessionStart hook]\nbranch main; token ") and first.endswith("\n\nhello")
    assert "sk-stub-config-key-000000" not in first  # the session's key, masked
    assert second == "again"
