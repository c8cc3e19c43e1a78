"""What ``dsh acp`` sends, without a child: hostile text becomes frames that encode and hold no secret; a failed
turn's error carries the REPL's line; and the command's own edges (``--help``, the missing extra, stdout)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.events import ReasoningDelta, TextDelta, ToolCallStart, ToolResult, TurnStart
from dsh.agent_loop.reasons import Aborted, Completed, Disposed, Failed, MaxTokens, Rejected
from dsh.llm import ErrorCode, LlmError, Redactor
from dsh.repl.acp_updates import Translator, coalesced, history_updates, stop_reason, turn_error
from tests import canaries

REPO = str(Path(__file__).resolve().parents[2])
SECRETS = (canaries.API_KEY, canaries.CHILD_ENV)
hostile = st.text(alphabet=st.characters(codec=None, categories=None), max_size=60).map(
    lambda text: text + "\ud800" + canaries.API_KEY + "\x1b]0;x\x07\u202e")


def _frame(update: object) -> bytes:
    # The update as UTF-8 JSON, not escaped to ASCII: a lone surrogate would fail here.
    return json.dumps(update, ensure_ascii=False).encode("utf-8")


@given(text=hostile, name=hostile)
def test_hostile_tool_text_becomes_frames_that_encode_and_hold_no_secret(text: str, name: str) -> None:
    translator = Translator(Redactor(SECRETS), "/tree")
    arguments = json.dumps({"command": text, "path": name}, ensure_ascii=False)
    updates = coalesced([
        *translator.updates(TurnStart(1, text)),
        *translator.updates(TextDelta(text.replace(canaries.API_KEY, "***"))),  # the agent masks deltas itself
        *translator.updates(ReasoningDelta("\udc00" + name.replace(canaries.API_KEY, "***"))),
        *translator.updates(ToolCallStart(1, "c\ud8001", "run_shell", arguments)),
        *translator.updates(ToolResult(1, "c\ud8001", "run_shell", text, is_error=True)),
    ])
    assert len(updates) == 4
    for update in updates:
        data = _frame(update)
        assert canaries.API_KEY.encode() not in data


@given(words=hostile)
def test_history_replay_frames_encode_and_hold_no_secret(words: str) -> None:
    records = [
        {"type": "turn/start", "data": {"turn": 1, "prompt": words}},
        {"type": "assistant/message", "data": {"turn": 1, "step": 1, "content": words, "reasoning_content": words,
                                               "tool_calls": []}},
        {"type": "tool/call", "data": {"turn": 1, "id": "c1", "name": "read_file", "arguments": "{bad json"}},
        {"type": "tool/result", "data": {"turn": 1, "id": "c1", "name": "read_file", "output": words}},
    ]
    updates = history_updates(records, Redactor(SECRETS), "/tree")
    assert [u["sessionUpdate"] for u in updates] == ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk",
                                                     "tool_call", "tool_call_update"]
    for update in updates:
        assert canaries.API_KEY.encode() not in _frame(update)


def test_stop_reasons() -> None:
    assert stop_reason(Completed()) == "end_turn"
    assert stop_reason(MaxTokens()) == "max_tokens"
    assert stop_reason(Aborted("cancelled")) == "cancelled"
    assert stop_reason(Disposed()) == "cancelled"
    assert stop_reason(Rejected("the prompt hook said no")) == "refusal"
    assert stop_reason(Failed(code="CONTENT_FILTER", message="filtered")) == "refusal"
    assert stop_reason(Failed(code="TRANSPORT", message="x")) is None  # answered as an error


def test_a_failed_turn_is_the_turn_end_line_with_code_fix_and_chain_masked() -> None:
    cause = ConnectionRefusedError(111, f"Connect call failed ('127.0.0.1', 9) {canaries.API_KEY}")
    failure = LlmError("cannot connect to http://127.0.0.1:9", ErrorCode.TRANSPORT, cause=cause)
    reason = Failed(code="TRANSPORT", message=f"cannot connect: {canaries.API_KEY}", detail="refused",
                    endpoint="http://127.0.0.1:9")
    message, data = turn_error(reason, failure, secrets=SECRETS, sources={})
    assert data["code"] == "TRANSPORT"
    assert data["fix"] is not None and "127.0.0.1:9" in data["fix"]
    assert message == f"[turn failed TRANSPORT] cannot connect: ***\n{data['fix']}"  # the REPL's two lines
    assert data["chain"][0] == "dsh.llm.errors.LlmError: cannot connect to http://127.0.0.1:9"
    assert canaries.API_KEY not in json.dumps([message, data])


def _dsh(*args: str, launcher: tuple[str, ...] = ("-m", "dsh.repl"),
         stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": REPO, "PATH": "/usr/bin:/bin", "HOME": "/nonexistent-home"}
    return subprocess.run([sys.executable, *launcher, *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_help_exits_0() -> None:
    result = _dsh("acp", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: dsh acp")


def test_dsh_acp_serves_without_the_acp_extra() -> None:
    # ``sys.modules["acp"] = None`` makes the SDK unimportable, as in an install without the extra: dsh acp speaks
    # the protocol itself (repl/acp_wire.py), so an editor needs nothing more than dsh.
    without_sdk = ("-c", "import runpy, sys; sys.modules['acp'] = None; "
                         "runpy.run_module('dsh.repl', run_name='__main__', alter_sys=True)")
    initialize = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    result = _dsh("acp", "--demo", launcher=without_sdk, stdin=initialize + "\n")
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["result"]["protocolVersion"] == 1


def test_stdout_carries_nothing_but_frames(tmp_path: Path) -> None:
    initialize = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    process = subprocess.Popen(
        [sys.executable, "-m", "dsh.repl", "acp", "--demo"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env={"PYTHONPATH": REPO, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)},
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(initialize + "\n")
    process.stdin.flush()
    line = process.stdout.readline()  # the answer, while stdin stays open (as every client keeps it)
    stdout, stderr = process.communicate(timeout=60)  # then the end of input ends the agent
    assert process.returncode == 0, stderr
    assert stdout == ""  # nothing but the one frame
    answer = json.loads(line)["result"]
    assert answer["protocolVersion"] == 1
    assert answer["agentInfo"]["name"] == "dsh"
    assert answer["agentCapabilities"]["loadSession"] is True
    assert answer["agentCapabilities"]["promptCapabilities"] == {"audio": False, "embeddedContext": True,
                                                                 "image": True}
    assert answer["agentCapabilities"]["mcpCapabilities"]["http"] is True


_pieces = st.lists(st.tuples(st.sampled_from(["answer", "thought", "tool"]), st.text(min_size=1, max_size=5)),
                   max_size=40)


@given(_pieces)
def test_coalescing_merges_runs_of_text_and_keeps_order_and_text(pieces: list[tuple[str, str]]) -> None:
    translator = Translator(Redactor(), "/tmp")
    updates: list[object] = []
    expected: list[tuple[str, str]] = []  # (update kind, its text or the tool call's id), runs of text merged
    for number, (kind, text) in enumerate(pieces):
        if kind == "tool":
            updates += translator.updates(ToolCallStart(1, f"call_{number}", "list_dir", "{}"))
            expected.append(("tool_call", f"1:call_{number}"))
            continue
        updates += translator.updates(TextDelta(text) if kind == "answer" else ReasoningDelta(text))
        name = "agent_message_chunk" if kind == "answer" else "agent_thought_chunk"
        if expected and expected[-1][0] == name:
            expected[-1] = (name, expected[-1][1] + text)
        else:
            expected.append((name, text))
    merged = coalesced(updates)
    seen = [(u["sessionUpdate"], u["toolCallId"] if u["sessionUpdate"] == "tool_call" else u["content"]["text"])
            for u in merged]
    assert seen == expected  # one frame per run, the same text in the same order around the same tool calls


def test_a_continuation_is_the_repl_s_line_as_a_thought() -> None:
    from dsh.agent_loop.events import LlmContinue

    translator = Translator(Redactor(SECRETS), "/tree")
    (update,) = translator.updates(LlmContinue(1, 1, 1, 2, "TRANSPORT", 1214, message=canaries.API_KEY))
    assert update["sessionUpdate"] == "agent_thought_chunk"
    assert update["content"]["text"] == "[continuing after TRANSPORT: 1 214 chars kept (prefix completion)]\n"
    assert canaries.API_KEY.encode() not in _frame(update)
