"""The shell core and slash commands, in-process, against a real loopback fault server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from dsh.agent_loop import events as ev
from dsh.agent_loop.reasons import Aborted, Completed, EndReason, Failed, MaxTokens, OtherEnd, Rejected
from dsh.agent_loop.session import Session
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.tools import Tool, ToolOutput
from dsh.llm.loopback.fault_server import FaultServer, closed_port
from dsh.repl import commands
from dsh.repl.config import Config
from dsh.repl.frontend import PlainFrontEnd
from dsh.repl.shell import Shell
from tests.waiting import async_wait_until

pytestmark = pytest.mark.anyio

KEY = "sk-shellTestKey0000000000000000"


class ListSink:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def take(self) -> str:
        text = self.text
        self.parts.clear()
        return text


class ListFrontEnd(PlainFrontEnd):
    """A front end that keeps what it is given, answers approvals with ``answer`` and counts wake-ups."""

    def __init__(self, sink: ListSink, answer: str | None = None) -> None:
        super().__init__(sink)
        self.can_approve = answer is not None
        self.answer = answer
        self.asked: list[object] = []
        self.woken = 0

    async def ask_approval(self, request: object) -> str | None:  # type: ignore[override]
        self.asked.append(request)
        return self.answer

    def wake(self) -> None:
        self.woken += 1


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


async def make_shell(env: dict[str, str], base_url: str, **config: object) -> tuple[Shell, ListSink]:
    sink = ListSink()
    config_ = Config(api_key=KEY, base_url=base_url, **config)  # type: ignore[arg-type]
    shell = Shell(config_, ListFrontEnd(sink), color=False, env=env)
    await shell.start()
    return shell, sink


def user_messages(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


async def test_a_turn_renders_and_returns_its_reason(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        reason = await shell.handle_line("hello")
        assert reason == Completed() and reason.exit_code == 0
        assert sink.text == "[main turn 1] Hello! How can I help you today?\n"
        assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    finally:
        await shell.aclose()


async def test_help_lists_every_command(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        assert await shell.handle_line("/help") is None
        text = sink.text
        for name in ("help", "exit", "new", "retry", "model [name]", "why", "sessions", "resume ID|last", "jobs"):
            assert f"  /{name} " in text
        assert "/scenario" not in text  # demo only
        assert "Esc Enter" in text and "Ctrl-D" in text
        assert not server.requests
    finally:
        await shell.aclose()


async def test_unknown_command_is_one_line_and_the_next_prompt_starts_empty(
    env: dict[str, str], server: FaultServer
) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        assert await shell.handle_line("/frobnicate now") is None
        assert sink.text == "unknown command /frobnicate (/help lists the commands)\n"
        assert shell.prefill == ""  # the next words are not glued to it; ↑ recalls the line
        assert not server.requests
        sink.take()
        await shell.handle_line("/hepl")
        assert sink.text == "unknown command /hepl: did you mean /help? (/help lists the commands)\n"
        sink.take()
        await shell.handle_line("/scenari")  # demo only: not offered outside the demo
        assert sink.text == "unknown command /scenari (/help lists the commands)\n"
        sink.take()
        await shell.handle_line("/scenario text")
        assert sink.text == "/scenario works in demo mode only (dsh --demo)\n"
    finally:
        await shell.aclose()


async def test_double_slash_sends_a_slash_prompt(env: dict[str, str], server: FaultServer) -> None:
    shell, _ = await make_shell(env, server.url)
    try:
        await shell.handle_line("//etc/hosts is a file?")
        assert user_messages(server.requests[-1].json)[-1] == "/etc/hosts is a file?"
    finally:
        await shell.aclose()


async def test_model_shows_and_switches(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        await shell.handle_line("/model")
        assert sink.take() == (f"models listed by GET /models at {server.url}:\n* deepseek-flash\n  deepseek-v4-pro\n"
                               "/model NAME switches from the next turn\n")
        await shell.handle_line("/model deepseek-v4-pro")
        assert sink.take() == "model set to deepseek-v4-pro (from the next turn)\n"
        await shell.handle_line("/model bad name!")
        assert sink.take() == "not a model name: 'bad name!'\n"
        await shell.handle_line("hi")
        assert server.requests[-1].json["model"] == "deepseek-v4-pro"
    finally:
        await shell.aclose()


async def test_why_shows_the_full_chain_with_types(env: dict[str, str]) -> None:
    with closed_port() as port:
        shell, sink = await make_shell(env, f"http://127.0.0.1:{port}", max_retries=0)
        try:
            await shell.handle_line("/why")
            assert sink.take() == "no failure yet\n"
            reason = await shell.handle_line("hello")
            assert isinstance(reason, Failed) and reason.exit_code == 1
            line = sink.take()
            assert line == (
                f"[main turn 1] [turn failed TRANSPORT] request to the endpoint at http://127.0.0.1:{port} failed: "
                f"All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', {port})\n"
                f"  fix: nothing is listening at 127.0.0.1:{port} — check base_url (--base-url, DEEPSEEK_BASE_URL "
                "or config.toml)\n"
            )
            await shell.handle_line("/why")
            assert sink.take().splitlines() == [
                "last failure (TRANSPORT):",
                f"  dsh.llm.errors.LlmError: request to the endpoint at http://127.0.0.1:{port} failed",
                "  httpx.ConnectError: All connection attempts failed",
                "  httpcore.ConnectError: All connection attempts failed",
                "  OSError: All connection attempts failed",
                f"  ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', {port})",
            ]
        finally:
            await shell.aclose()


async def test_why_after_http_error_has_status_and_request_id(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        server.push("http_401")
        await shell.handle_line("hello")
        assert sink.take().splitlines() == [
            "[main turn 1] [turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid",
            "  fix: check your API key (DEEPSEEK_API_KEY, or api_key in config.toml)",
        ]
        await shell.handle_line("/why")
        lines = sink.take().splitlines()
        assert lines[0].startswith("last failure (AUTH, HTTP 401, request id ")
        assert lines[1] == "  dsh.llm.errors.LlmError: Authentication Fails, Your api key: ****abcd is invalid"
    finally:
        await shell.aclose()


async def test_new_sessions_and_resume(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        first = shell.session.id
        await shell.handle_line("first prompt")
        await shell.handle_line("/new")
        second = shell.session.id
        assert second != first and sink.text.endswith(f"new session {second}\n")
        sink.take()
        await shell.handle_line("again")
        assert sink.take().startswith("[main turn 1] ")  # turn numbers restart in a new session
        await shell.handle_line("/sessions")
        listing = sink.take().splitlines()
        assert listing[-1] == "resume one with /resume ID (or dsh --resume ID)"
        assert listing[0] == f"sessions of {shell.session.project} (newest last; --all for every project):"
        date = r"\d{4}-\d\d-\d\d \d\d:\d\d"
        assert re.fullmatch(rf"  {date}  {first}  1 turn     first prompt", listing[1]), listing
        assert re.fullmatch(rf"\* {date}  {second}  1 turn     again", listing[2]), listing
        await shell.handle_line("/sessions --all")
        listing = sink.take().splitlines()
        assert listing[0] == "sessions of every project (newest last):"
        project = re.escape(shell.session.project)
        assert re.fullmatch(rf"  {date}  {first}  1 turn     {project}  first prompt", listing[1])
        await shell.handle_line(f"/resume {first}")
        assert sink.take() == (
            f"resumed session {first} (1 turn)\n"
            "  turn 1 > first prompt\n"
            "         < Hello! How can I help you today?\n"
        )
        await shell.handle_line("continue")
        assert sink.take().startswith("[main turn 2] ")
        assert user_messages(server.requests[-1].json) == ["first prompt", "continue"]
        await shell.handle_line("/resume no-such-session")
        assert sink.take().startswith("/resume failed: no session 'no-such-session' in ")
    finally:
        await shell.aclose()


async def test_resume_reports_the_repaired_turn_first(env: dict[str, str], server: FaultServer) -> None:
    root = Path(env["XDG_STATE_HOME"]) / "dsh" / "sessions"
    elsewhere = SessionLog.create(root=root, cwd="/")  # another project's, written later: not "last" here
    log = SessionLog.create(root=root)
    log.append(ev.TurnStart(1, "was running"))
    log.append(ev.StepStart(1, 1))
    log.close()  # the process "died" mid-turn
    elsewhere.append(ev.TurnStart(1, "other project"))
    elsewhere.close()
    sink = ListSink()
    shell = Shell(Config(api_key=KEY, base_url=server.url), ListFrontEnd(sink), color=False, env=env)
    try:
        await shell.start(resume="last")
        assert sink.take() == "[main turn 1] [turn interrupted by a previous process exit]\n"
        shell.report_resumed()
        assert sink.take() == (
            f"resumed session {log.id} (1 turn)\n"
            "  turn 1 > was running\n"
            "           (turn interrupted by a previous process exit)\n"
            "turn 1 was interrupted; /retry sends its prompt again: was running\n"
        )
        await shell.handle_line("/retry")
        assert sink.take().startswith("[main turn 2] ")
        assert user_messages(server.requests[-1].json) == ["was running"]  # the interrupted turn left no trace
    finally:
        await shell.aclose()


async def test_retry_resends_the_last_prompt(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        await shell.handle_line("/retry")
        assert sink.take() == "nothing to retry yet\n"
        server.push("http_400")
        await shell.handle_line("say it")
        sink.take()
        reason = await shell.handle_line("/retry")
        assert reason == Completed()
        assert sink.take() == "[main turn 2] Hello! How can I help you today?\n"
        assert user_messages(server.requests[-1].json) == ["say it"]  # the failed turn left no trace
    finally:
        await shell.aclose()


async def test_jobs_without_subagents_lists_none(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        await shell.handle_line("/jobs")
        assert sink.take() == "(no jobs)\n"
    finally:
        await shell.aclose()


async def test_exit_command(env: dict[str, str], server: FaultServer) -> None:
    shell, _ = await make_shell(env, server.url)
    try:
        await shell.handle_line("/exit")
        assert shell.exit_code == 0
    finally:
        await shell.aclose()


async def test_tool_factories_add_tools(env: dict[str, str], server: FaultServer) -> None:
    async def echo(args: dict, ctx: object) -> ToolOutput:
        return ToolOutput("echoed")

    def factory(session: Session) -> list[Tool]:
        return [Tool("echo", "echo back", {"type": "object", "properties": {}}, echo)]

    shell = Shell(Config(api_key=KEY, base_url=server.url), ListFrontEnd(ListSink()), color=False, env=env,
                  extra_tools=factory)
    await shell.start()
    try:
        await shell.handle_line("hi")
        names = [tool["function"]["name"] for tool in server.requests[-1].json["tools"]]
        assert names == ["read_file", "list_dir", "glob", "search_text", "write_file", "edit_file", "run_shell",
                         "todo_write", "echo"]
    finally:
        await shell.aclose()


async def test_shell_approval_without_a_terminal_says_nobody_can_approve(
    env: dict[str, str], server: FaultServer
) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        server.push(_shell_call())
        await shell.handle_line("run it")
        expected = "Error: shell commands need approval and no one is available to approve them here"
        assert f"  [tool result] {expected}\n" in sink.text
    finally:
        await shell.aclose()


async def test_shell_approval_answers_reach_the_tool(env: dict[str, str], server: FaultServer) -> None:
    sink = ListSink()
    frontend = ListFrontEnd(sink, answer="yes")
    shell = Shell(Config(api_key=KEY, base_url=server.url), frontend, color=False, env=env)
    await shell.start()
    try:
        server.push(_shell_call())
        await shell.handle_line("run it")
        assert frontend.asked == ["echo approved-output"]
        assert "  [tool result] approved-output\n    [exit code: 0]\n" in sink.text
    finally:
        await shell.aclose()


def _shell_call():  # type: ignore[no-untyped-def]
    from dsh.llm.loopback.fault_server import Behaviour

    return Behaviour("tool_call", name="run_shell", arguments=json.dumps({"command": "echo approved-output"}))


async def test_cancel_turn_ends_aborted(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    try:
        server.push("stall_after_headers")
        async with anyio.create_task_group() as tasks:
            result: list[EndReason] = []

            async def run() -> None:
                reason = await shell.handle_line("wait")
                assert reason is not None
                result.append(reason)

            tasks.start_soon(run)
            await async_wait_until(lambda: server.requests, 5, "the stalled request")
            shell.cancel_turn()
        assert result == [Aborted("cancelled")] and result[0].exit_code == 130
        assert sink.text == "[main turn 1] [turn aborted] cancelled\n"
    finally:
        await shell.aclose()


def test_each_turn_end_carries_the_exit_code_of_dsh_p() -> None:
    ends = (Completed(), Failed(), Rejected("no"), MaxTokens(), Aborted())
    assert [end.exit_code for end in ends] == [0, 1, 3, 4, 130]
    assert OtherEnd("future-kind").exit_code == 0  # a kind this version does not know is an ordinary end


def test_help_text_in_demo_lists_scenario() -> None:
    assert "  /scenario [name]" in commands.help_text(demo=True)


async def test_an_idle_notice_wakes_the_owner_for_a_turn(env: dict[str, str], server: FaultServer) -> None:
    shell, sink = await make_shell(env, server.url)
    assert isinstance(shell.frontend, ListFrontEnd)
    try:
        assert await shell.deliver_notices() is None  # nothing queued
        notice = "background job subagent-1 (subagent: probe) finished [status: completed]. Read its output."
        shell.session.ensure_agent().post_notice(notice, "subagent-1")
        assert shell.frontend.woken == 1
        assert sink.take() == f"[job] {notice}\n"
        reason = await shell.deliver_notices()
        assert reason == Completed()
        assert sink.take() == "[main turn 1] Hello! How can I help you today?\n"
        assert user_messages(server.requests[-1].json)[-1] == notice
    finally:
        await shell.aclose()
