"""``--replay FILE``: a recording (``--record``, or a failure capsule) served by the embedded replay server as the
run's endpoint (docs/record-replay.md). Registered in :data:`dsh.repl.options.OPENERS`: imported by name only
when ``--replay`` picks it, with the server and the HTTP client it brings.
"""

from __future__ import annotations

import contextlib
import dataclasses

from dsh.agent_loop.session_config import client_settings
from dsh.llm.deepseek import open_client
from dsh.llm.endpoint import default_dialect
from dsh.llm.loopback.replay_server import MAX_REPLAY_RETRIES, ReplayError, ReplayServer, Trace, load_trace
from dsh.repl.config import Config, ConfigError
from dsh.repl.endpoint import ConfiguredLabel, Endpoint
from dsh.repl.options import LaunchOptions

__all__ = ["OPENER"]


def _load(path: str) -> Trace:
    """The recording; ConfigError (one line, no chain beneath) when it cannot be read."""
    try:
        return load_trace(path)
    except ReplayError as exc:
        message = exc.message
    raise ConfigError(message)  # outside the handler: one line, no chain beneath


def _retries(path: str, recorded: int | None, config: Config) -> Config:
    """A capsule's run retried ``recorded`` times: so does its replay, up to the retry policy's default (a crafted
    capsule must not retry for minutes: one warning says so), unless this run sets max_retries itself."""
    if recorded is None or "max_retries" in config.sources:
        return config
    retries, warnings = min(recorded, MAX_REPLAY_RETRIES), config.warnings
    if retries < recorded:
        warnings = (*warnings, f"replay file {path} recorded max_retries = {recorded}; a replay retries at most "
                               f"{retries} times")
    return dataclasses.replace(config, max_retries=retries, warnings=warnings)


async def _open(stack: contextlib.AsyncExitStack, trace: Trace, options: LaunchOptions, config: Config) -> Endpoint:
    """The embedded replay server and a client that names the recorded endpoint in its messages."""
    stack.callback(trace.close)  # the recording is read as it is served
    server = await stack.enter_async_context(ReplayServer(trace, speed=options.replay_speed))
    # The recorded deadlines, so a recorded timeout fires again; one set on this run wins.
    idle, first = config.stream_idle_timeout, config.first_token_timeout
    if "stream_idle_timeout" not in config.sources:
        idle = trace.timeouts.get("stream_idle_timeout", idle)
    if "first_token_timeout" not in config.sources:
        first = trace.timeouts.get("first_token_timeout", first)
    # The recorded run's dialect (by its host in files that do not say), so its answers read and a cut answer is
    # continued as in the live run; one set on this run wins.
    dialect = config.dialect if "dialect" in config.sources else (
        trace.dialect or default_dialect(trace.base_url or server.url))
    client = open_client(dataclasses.replace(
        client_settings(config, {}), base_url=server.url, api_key=None, proxy=None, dialect=dialect,
        shown_as=(trace.base_url or server.url, trace.proxy), stream_idle_timeout=idle, first_token_timeout=first))
    stack.push_async_callback(client.aclose)
    replaying = f" · replaying {len(trace.exchanges)} recorded exchange(s) from {options.replay}"
    return Endpoint(sources=config.sources, label=ConfiguredLabel(replaying), client=client)


class _ReplayOpener:
    """The recording loaded at start (``options.trace``), and its server opened (an EndpointOpener)."""

    def check(self, options: LaunchOptions, config: Config) -> tuple[LaunchOptions, Config]:
        path = options.replay or ""
        trace = _load(path)
        return dataclasses.replace(options, trace=trace), _retries(path, trace.max_retries, config)

    async def open(self, stack: contextlib.AsyncExitStack, options: LaunchOptions, config: Config) -> Endpoint:
        assert options.trace is not None  # loaded by check() at start (dsh.repl.launch)
        return await _open(stack, options.trace, options, config)


OPENER = _ReplayOpener()
