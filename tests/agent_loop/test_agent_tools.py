"""Tool calls through the whole loop (fault server -> agent -> tools) and the built-in tools themselves."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from dsh.agent_loop import Aborted, Agent, Completed, Tool, ToolContext, ToolOutput, ToolRegistry, default_tools
from dsh.agent_loop.tools import plan_batches, run_tool_call
from dsh.agent_loop.tools.shell import SHELL_DENIED, SHELL_NO_APPROVER, run_command, run_shell_tool
from dsh.llm import DeepSeekClient, ToolCall
from dsh.llm.loopback.fault_server import Behaviour
from tests import canaries
from tests.agent_loop.agent_support import assert_well_formed, echo_tool, read_log
from tests.waiting import PROMPTLY, async_wait_until

pytestmark = pytest.mark.anyio


def calls_behaviour(*calls: tuple[str, str, Any]) -> Behaviour:
    return Behaviour("parallel_tool_calls", calls=[list(call) for call in calls], interleave=True)


def results(records: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    return [(r["data"]["id"], r["data"]["output"], r["data"]["is_error"]) for r in records
            if r["type"] == "tool/result"]


async def test_calls_run_in_model_order_and_results_are_committed_in_model_order(server, make_agent):
    order: list[str] = []

    def recording(name: str, safe: bool) -> Tool:
        async def run(args: dict[str, Any], ctx: ToolContext) -> str:
            order.append(f"{name}:{args['n']}")
            return f"{name} {args['n']}"

        return Tool(name, name, {"type": "object"}, run, concurrency_safe=safe)

    tools = ToolRegistry([recording("safe", True), recording("serial", False)])
    server.push(calls_behaviour(("c1", "serial", {"n": 1}), ("c2", "safe", {"n": 2}), ("c3", "safe", {"n": 3}),
                                ("c4", "serial", {"n": 4})))
    agent, seen = make_agent(server.url, tools=tools)
    assert await agent.run_turn("go") == Completed()
    assert order[0] == "serial:1" and order[-1] == "serial:4" and sorted(order[1:3]) == ["safe:2", "safe:3"]
    _, records = read_log(agent.session.path)
    assert results(records) == [("c1", "serial 1", False), ("c2", "safe 2", False), ("c3", "safe 3", False),
                                ("c4", "serial 4", False)]
    # the model sees the results in its own order, after its tool-call message
    sent = server.requests[-1].json["messages"]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["c1", "c2", "c3", "c4"]
    assert [e.type for e in seen.events if e.type.startswith("tool/")] == [
        "tool/call", "tool/result", "tool/call", "tool/call", "tool/result", "tool/result", "tool/call",
        "tool/result"]
    assert_well_formed(records)


async def test_a_concurrency_safe_batch_runs_in_parallel(server, make_agent):
    """Proof without timing: A cannot finish until B has started, and B finishes first, yet the
    results are committed A then B. Run one after the other, A would wait forever."""
    b_started = anyio.Event()
    finished: list[str] = []

    async def tool_a(args: dict[str, Any], ctx: ToolContext) -> str:
        with anyio.fail_after(5):
            await b_started.wait()
        finished.append("A")
        return "A done"

    async def tool_b(args: dict[str, Any], ctx: ToolContext) -> str:
        b_started.set()
        finished.append("B")
        return "B done"

    tools = ToolRegistry([Tool("tool_a", "a", {"type": "object"}, tool_a, concurrency_safe=True),
                          Tool("tool_b", "b", {"type": "object"}, tool_b, concurrency_safe=True)])
    server.push(calls_behaviour(("ca", "tool_a", {}), ("cb", "tool_b", {})))
    agent, _ = make_agent(server.url, tools=tools)
    assert await agent.run_turn("both") == Completed()
    assert finished == ["B", "A"]
    _, records = read_log(agent.session.path)
    assert results(records) == [("ca", "A done", False), ("cb", "B done", False)]


async def test_parallelism_is_bounded(server, make_agent):
    """Each call holds its slot until two are active at once: bounded, the peak is exactly 2."""
    active = 0
    peak = 0
    two_active = anyio.Event()

    async def counted(args: dict[str, Any], ctx: ToolContext) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 2:
            two_active.set()
        with anyio.fail_after(5):
            await two_active.wait()
        await anyio.lowlevel.checkpoint()  # let every task that can start, start
        active -= 1
        return "ok"

    tools = ToolRegistry([Tool("count", "c", {"type": "object"}, counted, concurrency_safe=True)],
                         max_parallel=2)
    server.push(calls_behaviour(*[(f"c{i}", "count", {}) for i in range(6)]))
    agent, _ = make_agent(server.url, tools=tools)
    assert await agent.run_turn("many") == Completed()
    assert peak == 2


async def test_unknown_tool_bad_json_and_exceptions_become_error_results_and_the_turn_goes_on(server, make_agent):
    async def explode(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ValueError("kaboom")

    tools = ToolRegistry([echo_tool("get_weather"), Tool("explode", "x", {"type": "object"}, explode)])
    server.push(
        calls_behaviour(("u1", "no_such_tool", {}), ("u2", "get_weather", '{"location": '),
                        ("u3", "explode", {}), ("u4", "get_weather", "[1, 2]"), ("u5", "get_weather", "")),
    )
    agent, _ = make_agent(server.url, tools=tools)
    assert await agent.run_turn("try things") == Completed()
    _, records = read_log(agent.session.path)
    got = results(records)
    assert got[0] == ("u1", 'Error: unknown tool "no_such_tool"', True)
    assert got[1][1].startswith('Error: invalid JSON arguments for tool "get_weather": Expecting value')
    assert got[1][2] is True
    assert got[2] == ("u3", "Error: kaboom", True)
    assert got[3] == ("u4", 'Error: arguments for tool "get_weather" must be a JSON object', True)
    assert got[4] == ("u5", "get_weather ok: {}", False)  # "" means no arguments
    assert len(server.requests) == 2  # the model saw the errors and answered


async def test_missing_required_argument(server, make_agent, tmp_path):
    server.push(calls_behaviour(("r1", "read_file", {})))
    agent, _ = make_agent(server.url, tools=default_tools())
    assert await agent.run_turn("read") == Completed()
    _, records = read_log(agent.session.path)
    assert results(records) == [("r1", 'Error: missing required argument "path" for tool "read_file"', True)]


# --- run_shell approval through the loop ------------------------------------------------------


def shell_call(call_id: str, command: str) -> tuple[str, str, dict[str, str]]:
    return (call_id, "run_shell", {"command": command})


async def test_shell_denied_when_no_one_can_approve(server, make_agent, tmp_path):
    marker = tmp_path / "ran"
    server.push(calls_behaviour(shell_call("s1", f"touch {marker}")))
    agent, _ = make_agent(server.url, tools=default_tools())
    assert await agent.run_turn("touch it") == Completed()
    _, records = read_log(agent.session.path)
    assert results(records) == [("s1", SHELL_NO_APPROVER, True)]
    assert not marker.exists()


async def test_shell_approval_no_yes_and_always(server, make_agent, tmp_path):
    asked: list[str] = []
    answers = iter(["no", "yes", "always"])

    async def approver(command: str) -> str:
        asked.append(command)
        return next(answers)

    server.push(calls_behaviour(shell_call("s1", "echo one"), shell_call("s2", "echo two"),
                                shell_call("s3", "echo three"), shell_call("s4", "echo four")))
    agent, _ = make_agent(server.url, tools=default_tools(approver))
    assert await agent.run_turn("echo") == Completed()
    assert asked == ["echo one", "echo two", "echo three"]  # "always" covers the rest of the session
    _, records = read_log(agent.session.path)
    assert results(records) == [
        ("s1", SHELL_DENIED, True),
        ("s2", "two\n[exit code: 0]", False),
        ("s3", "three\n[exit code: 0]", False),
        ("s4", "four\n[exit code: 0]", False),
    ]
    agent.new_session()  # /new forgets the "always"
    server.push(calls_behaviour(shell_call("s5", "echo five")))
    answers = iter(["no"])
    assert await agent.run_turn("again") == Completed()
    assert asked[-1] == "echo five"


async def test_the_agents_approver_is_used_by_default_tools(server, make_agent):
    async def approver(command: str) -> str:
        return "yes"

    server.push(calls_behaviour(shell_call("s1", "exit 3")))
    agent, _ = make_agent(server.url, tools=default_tools(), approver=approver)
    assert await agent.run_turn("fail") == Completed()
    _, records = read_log(agent.session.path)
    assert results(records) == [("s1", "(no output)\n[exit code: 3]", True)]


# --- run_shell as a real child process ----------------------------------------------------------


def context(tmp_path: Path, approver=None) -> ToolContext:
    async def yes(command: str) -> str:
        return "yes"

    return ToolContext(cwd=tmp_path, turn=1, notify=lambda event: None, approver=approver or yes)


async def run_shell(tmp_path: Path, command: str, **args: Any) -> ToolOutput:
    call = ToolCall("c", "run_shell", json.dumps({"command": command, **args}))
    return await run_tool_call(ToolRegistry([run_shell_tool()]), call, context(tmp_path))


async def test_shell_runs_in_the_working_directory_with_stderr_merged(tmp_path):
    out = await run_shell(tmp_path, "pwd; echo oops >&2")
    assert out == ToolOutput(f"{tmp_path}\noops\n[exit code: 0]")


async def test_shell_does_not_pass_api_keys_to_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", canaries.API_KEY)
    monkeypatch.setenv("DSH_TEST_PLAIN", "visible")
    out = await run_shell(tmp_path, 'echo "key=$DEEPSEEK_API_KEY plain=$DSH_TEST_PLAIN home=$HOME"')
    # One environment policy for every child: the allowlist (HOME, PATH, ...), nothing else.
    assert out.text == f"key= plain= home={os.environ['HOME']}\n[exit code: 0]"


async def test_shell_timeout_kills_the_command(tmp_path):
    with anyio.fail_after(10):
        out = await run_shell(tmp_path, "echo started; sleep 30", timeout_s=1)
    assert out == ToolOutput("started\n[timed out after 1s; the command was killed]", is_error=True)


async def test_shell_output_is_bounded_keeping_start_and_end(tmp_path):
    out = await run_shell(tmp_path, "printf 'START'; head -c 200000 /dev/zero | tr '\\0' x; printf 'END'")
    assert out.text.startswith("START") and out.text.endswith("END\n[exit code: 0]")
    assert "bytes of output omitted" in out.text
    assert len(out.text) < 40_000


async def test_a_signal_death_is_reported(tmp_path):
    out = await run_shell(tmp_path, "kill -TERM $$")
    assert out == ToolOutput("(no output)\n[killed by SIGTERM]", is_error=True)


async def test_cancelling_a_shell_command_kills_and_reaps_its_process_group(tmp_path):
    pids = tmp_path / "pids"
    command = f"sleep 60 & echo $$ $! > {pids}; wait"
    with anyio.move_on_after(PROMPTLY) as guard, anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(run_shell, tmp_path, command)
            await async_wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, PROMPTLY, "both pids")
            scope.cancel()
    assert not guard.cancelled_caught
    shell_pid, sleep_pid = map(int, pids.read_text().split())
    # The shell was reaped by us (no zombie left); the background sleep in its group was killed.
    assert not Path(f"/proc/{shell_pid}").exists()
    with anyio.fail_after(PROMPTLY):
        while Path(f"/proc/{sleep_pid}").exists():
            state = Path(f"/proc/{sleep_pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":  # killed; waiting for its new parent to reap it
                break
            await anyio.sleep(0.02)


async def test_run_command_feeds_stdin_and_reports_exit_and_signal(tmp_path):
    result = await run_command(["/bin/sh", "-c", "tr a-z A-Z; exit 4"], input=b"hello", timeout=10)
    assert (result.exit_code, result.signal, result.output, result.timed_out) == (4, None, "HELLO", False)
    killed = await run_command(["/bin/sh", "-c", "kill -KILL $$"], timeout=10)
    assert (killed.exit_code, killed.signal) == (None, "SIGKILL")


async def test_a_stray_background_job_does_not_hang_the_command(tmp_path):
    with anyio.fail_after(10):
        result = await run_command(["/bin/sh", "-c", "sleep 30 & echo done"], timeout=20, exit_grace=0.2)
    assert (result.exit_code, result.output, result.timed_out) == (0, "done\n", False)


# --- file tools -------------------------------------------------------------------------------


async def call_tool(tmp_path: Path, name: str, **args: Any) -> ToolOutput:
    return await run_tool_call(default_tools(), ToolCall("c", name, json.dumps(args)), context(tmp_path))


async def test_read_file(tmp_path):
    (tmp_path / "notes.txt").write_text("".join(f"line {n}\n" for n in range(1, 6)))
    assert (await call_tool(tmp_path, "read_file", path="notes.txt")).text == (
        "line 1\nline 2\nline 3\nline 4\nline 5\n")
    part = await call_tool(tmp_path, "read_file", path="notes.txt", offset=2, limit=2)
    assert part.text == "line 2\nline 3\n\n[file continues; read more with offset=4]"
    missing = await call_tool(tmp_path, "read_file", path="nope.txt")
    assert missing.is_error and missing.text.startswith("Error: [Errno 2] No such file or directory")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    binary = await call_tool(tmp_path, "read_file", path="blob.bin")
    assert binary == ToolOutput(f"Error: {tmp_path / 'blob.bin'} looks like a binary file", is_error=True)


async def test_list_dir(tmp_path):
    (tmp_path / "b.txt").write_text("")
    (tmp_path / "a").mkdir()
    assert (await call_tool(tmp_path, "list_dir")).text == "a/\nb.txt"
    assert (await call_tool(tmp_path, "list_dir", path="a")).text == "(empty directory)"


async def test_search_text(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("import os\ndef needle():\n    return 'needle'\n")
    (tmp_path / "src" / "n.txt").write_text("no match here\nNEEDLE upper\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".git" / "needle.txt").write_text("needle in git\n")
    found = await call_tool(tmp_path, "search_text", pattern="needle")
    assert found.text == "src/m.py:2: def needle():\nsrc/m.py:3:     return 'needle'"
    folded = await call_tool(tmp_path, "search_text", pattern="needle", ignore_case=True, glob="*.txt")
    assert folded.text == "src/n.txt:2: NEEDLE upper"
    assert (await call_tool(tmp_path, "search_text", pattern="zzz")).text == "no matches"
    bad = await call_tool(tmp_path, "search_text", pattern="(")
    assert bad.is_error and bad.text.startswith("Error: invalid regular expression")


async def test_file_tools_refuse_what_is_not_a_regular_file_and_never_block(tmp_path):
    import socket

    os.mkfifo(tmp_path / "pipe")  # no writer: a blocking open would wait forever
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        (tmp_path / "dir").mkdir()
        os.symlink(tmp_path / "pipe", tmp_path / "link-to-pipe")
        (tmp_path / "real.txt").write_text("needle\n")
        os.symlink(tmp_path / "real.txt", tmp_path / "link.txt")
        expected = {"pipe": "a FIFO", "link-to-pipe": "a FIFO", "sock": "a socket", "dir": "a directory"}
        for name, kind in expected.items():
            refused = await call_tool(tmp_path, "read_file", path=name)
            assert refused == ToolOutput(f"Error: {tmp_path / name} is {kind}, not a regular file", is_error=True)
        device = await call_tool(tmp_path, "read_file", path="/dev/zero")
        assert device == ToolOutput("Error: /dev/zero is a character device, not a regular file", is_error=True)
        # a symlink to a regular file is followed
        assert (await call_tool(tmp_path, "read_file", path="link.txt")).text == "needle\n"
        # search_text skips the FIFO and the socket without opening them, and ends
        found = await call_tool(tmp_path, "search_text", pattern="needle")
        assert found.text == "link.txt:1: needle\nreal.txt:1: needle"
        assert (await call_tool(tmp_path, "search_text", pattern="x", path="pipe")).text == "no matches"


async def test_a_path_longer_than_path_max_is_refused_before_it_is_copied(tmp_path):
    refused = await call_tool(tmp_path, "read_file", path="x" * 10_000_000)
    assert refused == ToolOutput("Error: path is longer than 4096 characters", is_error=True)


async def test_more_than_128_tool_calls_run_128_and_the_rest_get_one_error(server, make_agent, tmp_path):
    server.push(Behaviour("tool_call_flood", count=10_000, name="list_dir", arguments={"path": "."}))
    agent, _seen = make_agent(server.url, tools=default_tools())
    assert await agent.run_turn("go") == Completed()
    _, records = read_log(agent.session.path)
    message = next(r["data"] for r in records if r["type"] == "assistant/message")
    assert len(message["tool_calls"]) == 129
    outputs = [output for _, output, _ in results(records)]
    assert len(outputs) == 129
    assert outputs[-1] == ("Error: tool call dropped: more than 128 tool calls in one step; "
                           "this call and every later one in the response were not run")
    assert not any(output.startswith("Error") for output in outputs[:128])
    # the next request answers every call the model sees
    tool_messages = [m for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 129


async def test_long_arguments_are_logged_once(server, make_agent):
    server.push(Behaviour("huge_arguments", mb=2, name="read_file"))
    agent, _ = make_agent(server.url, tools=default_tools())
    assert await agent.run_turn("go") == Completed()
    _, records = read_log(agent.session.path)
    message = next(r["data"] for r in records if r["type"] == "assistant/message")
    announced = next(r["data"] for r in records if r["type"] == "tool/call")
    whole = message["tool_calls"][0]["arguments"]
    assert len(whole) == 2 * 1024 * 1024 + len('{"path": ""}')
    assert announced["arguments"] == whole[:4096] + "…"
    assert agent.session.path.stat().st_size < len(whole) * 1.1


def test_plan_batches_groups_consecutive_safe_calls():
    tools = ToolRegistry([echo_tool("s", safe=True), echo_tool("u", safe=False)])
    calls = [ToolCall(str(i), name, "{}") for i, name in enumerate(["s", "s", "u", "s", "nope", "s", "s"])]
    assert [[c.id for c in batch] for batch in plan_batches(tools, calls)] == [
        ["0", "1"], ["2"], ["3"], ["4"], ["5", "6"]]


async def test_tools_can_publish_events_through_the_context(server, make_agent):
    async def noisy(args: dict[str, Any], ctx: ToolContext) -> str:
        assert ctx.post_notice is not None
        ctx.post_notice("background job job-1 finished", "job-1")
        return f"turn {ctx.turn} call {ctx.call_id}"

    server.push(calls_behaviour(("n1", "noisy", {})))
    agent, seen = make_agent(server.url, tools=ToolRegistry([Tool("noisy", "n", {"type": "object"}, noisy)]))
    assert await agent.run_turn("go") == Completed()
    assert seen.of("job/notice") == [{"job_id": "job-1", "text": "background job job-1 finished"}]
    _, records = read_log(agent.session.path)
    assert results(records) == [("n1", "turn 1 call n1", False)]
    # the model saw the notice at the next step, after the tool result
    sent = server.requests[-1].json["messages"]
    assert sent[-1] == {"role": "user", "content": "background job job-1 finished"}


async def test_an_idle_owner_delivers_notices_with_a_turn(server, make_agent):
    agent, seen = make_agent(server.url)
    agent.post_notice("background job subagent-1 (subagent: probe) finished [status: completed]. Read its "
                      "output with job_output.", "subagent-1")
    assert agent.pending_notices == 1
    reason = await agent.deliver_notices()
    assert reason == Completed()
    assert agent.pending_notices == 0
    assert await agent.deliver_notices() is None
    assert seen.of("turn/start")[0]["source"] == "notice"
    assert server.requests[0].json["messages"][0]["content"].startswith("background job subagent-1")


async def test_cancel_signal_reaches_the_tool(server, make_agent):
    """A cancelled tool's finally blocks run (so real resources are released) before the turn ends."""
    cleaned: list[str] = []
    entered = anyio.Event()

    async def holds_resource(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            entered.set()
            await anyio.sleep_forever()
        finally:
            cleaned.append("released")
        return "unreachable"

    server.push(calls_behaviour(("h1", "hold", {})))
    agent, _ = make_agent(server.url, tools=ToolRegistry([Tool("hold", "h", {"type": "object"}, holds_resource)]))
    async with anyio.create_task_group() as group:
        async def cancel_when_entered() -> None:
            await entered.wait()
            agent.cancel()

        group.start_soon(cancel_when_entered)
        assert await agent.run_turn("hold") == Aborted("cancelled")
    assert cleaned == ["released"]


async def test_tool_output_is_masked_for_the_model_the_log_and_the_screen(server, make_agent):
    # A tool that prints what `cat config.toml` or `cat /proc/$PPID/environ` would: the key, a token.
    github = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    leaked = f'api_key = "{canaries.API_KEY}"\nGITHUB_TOKEN={github}\nAuthorization: Basic dXNlcjpwYXNzd29yZA=='
    server.push(calls_behaviour(("t1", "dump", {})))
    server.push(Behaviour("text", text="done"))
    agent, recorder = make_agent(server.url, tools=ToolRegistry([echo_tool("dump", text=leaked)]))
    assert await agent.run_turn("show me") == Completed()
    masked = 'api_key = "***"\nGITHUB_TOKEN=ghp_***\nAuthorization: ***'
    assert [data["output"] for data in recorder.of("tool/result")] == [masked]  # what the screen draws
    _, records = read_log(agent.session.path)
    assert results(records) == [("t1", masked, False)]
    sent = json.dumps(server.requests[-1].json)
    for secret in (canaries.API_KEY, github, "dXNlcjpwYXNzd29yZA"):
        assert secret not in sent and secret not in agent.session.path.read_text()


def test_the_agents_redactor_masks_what_its_client_names_secret_and_a_fake_client_names_nothing() -> None:
    client = DeepSeekClient(base_url="http://127.0.0.1:9/v1", api_key="plain-client-key-5d0e", trust_env=False)

    class NoSecrets:  # a test's fake: stream() only
        def stream(self, request: object) -> None: ...

    assert Agent(client).redactor("key plain-client-key-5d0e") == "key ***"
    assert Agent(NoSecrets()).redactor("key plain-client-key-5d0e") == "key plain-client-key-5d0e"
