"""What every mode does before its first line: the endpoint it talks to, and its shell over a session.

The endpoint is the configured one, the demo's embedded fault server (``--demo``) or an embedded
replay server (``--replay``); each is held open by the mode's exit stack and closed with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from dsh.agent_loop.session import StartupError
from dsh.agent_loop.session_config import EndpointClient, client_settings
from dsh.repl import __version__
from dsh.repl.config import Config
from dsh.repl.first_prompt import banner_line
from dsh.repl.frontend import FrontEnd, Sink
from dsh.repl.options import LaunchOptions
from dsh.repl.shell import Shell

if TYPE_CHECKING:
    from dsh.agent_loop.retry import RetryPolicy
    from dsh.llm.loopback.replay_server import Trace
    from dsh.repl.demo.catalogue import Demo

__all__ = ["banner", "color", "open_shell"]


def color(env: Mapping[str, str], stream: TextIO) -> bool:
    return stream.isatty() and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


async def open_shell(
    stack: contextlib.AsyncExitStack,
    options: LaunchOptions,
    config: Config,
    env: dict[str, str],
    frontend: FrontEnd,
    *,
    color: bool,
    show_usage: bool = False,
    answer: Sink | None = None,
    answer_markdown: bool = False,
    defer_agent: bool = False,
    session_id: str | None = None,
) -> Shell:
    """A started shell on ``frontend`` over the endpoint ``options`` pick, closed by ``stack``; StartupError if not.

    With ``defer_agent`` the agent is built behind the first prompt (the interactive mode sees to it), and a
    new session is named ``session_id`` if given (the id the early banner showed, dsh.repl.first_prompt).
    """
    client: EndpointClient | None = None
    demo: Demo | None = None
    retry: RetryPolicy | None = None
    try:
        if options.demo:
            from dsh.repl.demo.catalogue import start_demo  # only the demo

            demo = await start_demo(stack, options.scenario or "text")
            client, retry = demo.client, demo.retry
        elif options.trace is not None:  # --replay's recording, loaded at start (dsh.repl.launch)
            client = await _start_replay(stack, options.trace, options.replay_speed, config)
    except Exception as exc:
        raise StartupError(exc)
    shell = Shell(config, frontend, color=color, env=env, client=client, demo=demo, retry=retry,
                  show_usage=show_usage, answer=answer, answer_markdown=answer_markdown, allow_mcp=options.allow_mcp)
    stack.push_async_callback(shell.aclose)
    await shell.start(resume=options.resume, defer_agent=defer_agent, session_id=session_id)
    return shell


def banner(shell: Shell, options: LaunchOptions) -> str:
    """The interactive REPL's first line."""
    session = shell.session
    if shell.demo is not None:
        return (
            f"dsh {__version__} demo · no key, no network: scripted endpoint {session.endpoint} · "
            f"scenario {shell.demo.scenario.name} · /scenario lists the failure kit · /help"
        )
    text = banner_line(__version__, session.model, session.endpoint, session.id or "?")
    if options.trace is not None:
        text += f" · replaying {len(options.trace.exchanges)} recorded exchange(s) from {options.replay}"
    return text


async def _start_replay(stack: contextlib.AsyncExitStack, trace: Trace, speed: float, config: Config) -> EndpointClient:
    """The embedded replay server and a client that names the recorded endpoint in its messages."""
    from dsh.llm.deepseek import open_client  # only a replay
    from dsh.llm.loopback.replay_server import ReplayServer  # only a replay

    stack.callback(trace.close)  # the recording is read as it is served
    server = await stack.enter_async_context(ReplayServer(trace, speed=speed))
    # The recorded deadlines, so a recorded timeout fires again; one set on this run wins.
    idle, first = config.stream_idle_timeout, config.first_token_timeout
    if "stream_idle_timeout" not in config.sources:
        idle = trace.timeouts.get("stream_idle_timeout", idle)
    if "first_token_timeout" not in config.sources:
        first = trace.timeouts.get("first_token_timeout", first)
    client = open_client(dataclasses.replace(
        client_settings(config, {}), base_url=server.url, api_key=None, proxy=None,
        shown_as=(trace.base_url or server.url, trace.proxy), stream_idle_timeout=idle, first_token_timeout=first))
    stack.push_async_callback(client.aclose)
    return client
