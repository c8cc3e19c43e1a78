"""Every demo scenario prints its expected line, through the real DeepSeek client and real sockets.

Each scenario is its own test, with its own fault server, closed port and shell.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest

from dsh.agent_loop.reasons import Completed
from dsh.llm.loopback.fault_server import FaultServer, closed_port
from dsh.repl.config import Config
from dsh.repl.demo.catalogue import CORE_SCENARIOS, SCENARIOS, Demo, DemoClient, demo_retry_policy, register_scenario
from dsh.repl.demo.endpoint import demo_config, demo_endpoint
from dsh.repl.frontend import PlainFrontEnd
from dsh.repl.shell import Shell
from tests.repl.test_shell_commands import ListSink
from tests.waiting import async_wait_until

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def demo_shell(tmp_path: Path, scenario: str):  # type: ignore[no-untyped-def]
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    async with FaultServer(default="text", tls=True) as server:
        with closed_port() as port:
            client = DemoClient(server.url, f"http://127.0.0.1:{port}")
            client.urls.update(plain_https=server.plain_url_for_https, tls=server.tls_url)
            retry = demo_retry_policy()
            demo = Demo(server, client, retry, scenario)
            sink = ListSink()
            shell = Shell(demo_config(scenario, Config()), PlainFrontEnd(sink), color=False, env=env,
                          endpoint=demo_endpoint(demo))
            await shell.start()
            try:
                yield shell, sink, server
            finally:
                await shell.aclose()


async def run_scenario(tmp_path: Path, name: str) -> tuple[dict | None, str]:
    async with demo_shell(tmp_path, name) as (shell, sink, server):
        scenario = SCENARIOS[name]
        if not scenario.cancel:
            with anyio.fail_after(20):
                return await shell.handle_line("show me"), sink.text
        result: list[dict | None] = []
        async with anyio.create_task_group() as tasks:

            async def run() -> None:
                result.append(await shell.handle_line("show me"))

            tasks.start_soon(run)
            await async_wait_until(lambda: server.requests, 10, "the stalled request")
            shell.cancel_turn()
        return result[0], sink.text


# The subagent scenarios registered by dsh.agent_loop.subagent are pinned by that package's tests.
PINNED = [name for name in CORE_SCENARIOS if SCENARIOS[name].expect]


def test_the_core_catalogue_pins_a_line_for_every_failure() -> None:
    assert len(PINNED) >= 20


@pytest.mark.parametrize("name", PINNED)
async def test_the_scenario_prints_its_expected_line(tmp_path: Path, name: str) -> None:
    reason, text = await run_scenario(tmp_path, name)
    expect = SCENARIOS[name].expect
    assert expect is not None
    lines = text.splitlines()
    assert any(line.startswith(expect) or line.startswith("[main turn 1] " + expect) for line in lines), text
    assert reason is not None  # the turn ended


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("text", "completed"),
        ("http-401", "error"),
        ("prompt-rejected", "rejected"),
        ("max-tokens", "max-tokens"),
        ("keepalive-stall", "error"),
        ("stream-closed", "error"),
        ("no-done", "completed"),
        ("no-headers", "error"),
        ("stall", "aborted"),
    ],
)
async def test_the_turn_ends_with_the_expected_reason(tmp_path: Path, name: str, kind: str) -> None:
    reason, _ = await run_scenario(tmp_path, name)
    assert reason is not None and reason.kind == kind


async def test_refused_is_the_exact_transport_line_after_five_retries(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "refused") as (shell, sink, _):
        client = shell.session.client
        port = int(client.urls["refused"].rsplit(":", 1)[1])
        await shell.handle_line("hi")
        lines = sink.text.splitlines()
        root = f"request to the endpoint at http://127.0.0.1:{port} failed: All connection attempts failed: " \
               f"[Errno 111] Connect call failed ('127.0.0.1', {port})"
        assert lines == [
            f"[main turn 1] [retry 1/5 in 0.1s] TRANSPORT: {root}",
            f"[retry 2/5 in 0.2s] TRANSPORT: {root}",
            f"[retry 3/5 in 0.4s] TRANSPORT: {root}",
            f"[retry 4/5 in 0.4s] TRANSPORT: {root}",
            f"[retry 5/5 in 0.4s] TRANSPORT: {root}",
            f"[turn failed TRANSPORT] {root}",
            f"  fix: nothing is listening at 127.0.0.1:{port} — check the demo scenario",
        ]


async def test_http_401_prints_the_fix_line(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "http-401") as (shell, sink, _):
        await shell.handle_line("hi")
        assert sink.text == (
            "[main turn 1] [turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid\n"
            "  fix: check your API key (DEEPSEEK_API_KEY, or api_key in config.toml)\n"
        )


async def test_a_gateway_upstream_401_names_the_gateways_credential(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "gateway-upstream-401") as (shell, sink, _):
        await shell.handle_line("hi")
        assert sink.text == (
            "[main turn 1] [turn failed AUTH] litellm.AuthenticationError: AuthenticationError: DeepseekException - "
            "Authentication Fails, Your api key: ****abcd is invalid\n"
            "  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own credential — check the "
            "upstream key in LiteLLM's configuration\n"
        )


async def test_a_relay_error_event_is_retried_then_shown_in_the_relays_words(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "relay-error") as (shell, sink, server):
        await shell.handle_line("hi")
        lines = sink.text.splitlines()
        assert lines[-2:] == ["[turn failed SERVER] litellm.InternalServerError: upstream connection lost",
                              "  fix: the LiteLLM server is having trouble; retry later"]
        assert len(server.requests) == 6  # a SERVER before any content: retried as an HTTP 500 would be
        await shell.handle_line("/why")
        assert "  dsh.llm.errors.Evidence: error event: {\"error\": {\"message\": \"litellm.InternalServerError: " \
               "upstream connection lost\", \"type\": \"internal_server_error\", \"param\": null, \"code\": \"500\"}}" \
               in sink.text.splitlines()


async def test_tool_call_is_a_real_round_trip(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "tool-call") as (shell, sink, server):
        (tmp_path / "marker-file.txt").write_text("x")
        reason = await shell.handle_line("what is here?")
        assert reason == Completed()
        assert '  [tool call] list_dir({"path": "."})\n  [tool result] ' in sink.text
        assert len(server.requests) == 2
        tool_messages = [m for m in server.requests[1].json["messages"] if m["role"] == "tool"]
        assert len(tool_messages) == 1 and tool_messages[0]["tool_call_id"] == "call_demo_1"


async def test_scenario_selection_and_listing(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "text") as (shell, sink, server):
        await shell.handle_line("/scenario")
        listing = sink.text.splitlines()
        assert listing[0].startswith("* text ")
        assert len(listing) == len(SCENARIOS) + 1
        assert "needs the" not in sink.text  # every extra is installed here (tests/agent_loop/subagent/test_extras.py
        # hides them)
        sink.parts.clear()
        await shell.handle_line("/scenario http-402")
        assert sink.text == "scenario http-402: HTTP 402 insufficient balance, with the fix line\n"
        sink.parts.clear()
        await shell.handle_line("hi")
        assert sink.text == (
            "[main turn 1] [turn failed QUOTA] Insufficient Balance\n"
            f"  fix: the endpoint at 127.0.0.1:{server.port} refused the request for quota or credit — check the "
            "account of the key in DEEPSEEK_API_KEY (or api_key in config.toml)\n"
        )  # the demo's server is not DeepSeek: no top-up page
        sink.parts.clear()
        await shell.handle_line("/scenario nope")
        assert sink.text == "no scenario 'nope' (/scenario lists them)\n" and shell.prefill == ""
        sink.parts.clear()
        await shell.handle_line("/scenario retry-then-sucess")  # a typo: the nearest name is offered, nothing is kept
        assert sink.text == "no scenario 'retry-then-sucess': did you mean retry-then-success? (/scenario lists them)\n"
        assert shell.prefill == ""


async def test_a_cancelled_multi_request_scenario_does_not_leak_into_the_next_turn(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "retry-then-success") as (shell, sink, server):
        server.push("http_500", "http_500")  # leftovers, as if a previous turn was cut short
        await shell.handle_line("/scenario text")
        assert await shell.handle_line("hi") == Completed()
        assert "Hello from the dsh demo!" in sink.text


async def test_register_scenario_from_another_package(tmp_path: Path) -> None:
    def setup(turn) -> None:  # type: ignore[no-untyped-def]
        turn.script("http_413")

    register_scenario("custom-413", "added by a test", setup, expect="[turn failed INVALID_REQUEST]")
    try:
        async with demo_shell(tmp_path, "custom-413") as (shell, sink, _):
            await shell.handle_line("hi")
            assert sink.text.startswith("[main turn 1] [turn failed INVALID_REQUEST] Request body too large")
    finally:
        del SCENARIOS["custom-413"]


async def test_why_after_a_failed_subagent_shows_its_host_side_cause(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "acp-agent-error") as (shell, sink, _server):
        with anyio.fail_after(30):
            reason = await shell.handle_line("delegate it")
        assert reason == Completed()  # the turn went on after the failure
        assert "category: agent-error; error code: -32603 (internal error))" in sink.text
        sink.parts.clear()
        await shell.handle_line("/why")
        # The run's record, then the raw cause and the agent's own words, which the model never got.
        assert sink.text.splitlines() == [
            "last failure (SUBAGENT):",
            "  dsh.agent_loop.subagent.result.SubagentFailure: Subagent failure (provider: acp-error; stage: prompt;"
            " category: agent-error; error code: -32603 (internal error))",
            "  acp.exceptions.RequestError: Internal error",
            "  the agent's own words (host-side only, masked):",
            "    error message: Internal error",
            '    error data: {"details":"scripted failure at prompt"}',
        ]


async def test_why_after_a_subagent_failure_without_an_exception_shows_it_not_an_older_failure(tmp_path: Path) -> None:
    async with demo_shell(tmp_path, "http-402") as (shell, sink, _server):
        await shell.handle_line("hi")  # the turn fails: /why's failure until something fails later
        await shell.handle_line("/scenario acp-remote-limit")
        with anyio.fail_after(30):
            assert await shell.handle_line("delegate it") == Completed()
        sink.parts.clear()
        await shell.handle_line("/why")
        # max_turn_requests is a protocol stop reason: no exception anywhere, still the latest failure.
        assert sink.text.splitlines() == [
            "last failure (SUBAGENT):",
            "  dsh.agent_loop.subagent.result.SubagentFailure: Subagent failure (provider: acp-limit; stage: prompt;"
            " category: remote-limit; stop reason: max_turn_requests)",
        ]
