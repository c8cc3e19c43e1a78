"""One MCP tool round trip: dsh's MCP client beside the raw ``mcp`` SDK client, in the same run.

``mcp_roundtrip_raw_ms``  one ``tools/call echo`` and its answer, through the SDK's ``ClientSession``
                          over stdio, against ``python -m fixtures.mcp_servers ok`` (one server, started
                          once; the spawn and handshake are not timed). The baseline.
``mcp_vs_raw_sdk``        the same call through dsh's client over the raw SDK's, paired sample by sample.
``mcp_first_prompt_ms``   the first prompt with three servers configured, minus with none (:func:`mcp_first_prompt`).

The dsh side opens McpManager on the same command line (``stdio_command("ok")``, cwd the repository root)
and runs the ``mcp__ok__echo`` tool as the agent does (docs/performance.md).
"""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, paired_async, ratios, unavailable

__all__ = ["mcp_first_prompt", "mcp_vs_raw_sdk"]

Call = Callable[[], Awaitable[float | None]]
TEXT = "bench"
RATIO_TARGET = ("<=", 1.2)


def _expect_echo(texts: list[str], who: str) -> None:
    if texts != [TEXT]:
        raise RuntimeError(f"{who}: echo answered {texts!r}")


@asynccontextmanager
async def _raw_side() -> AsyncIterator[Call]:
    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from fixtures.mcp_servers import stdio_command

    argv = stdio_command("ok")
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=REPO_ROOT)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call() -> None:
            result = await session.call_tool("echo", {"text": TEXT})
            _expect_echo([b.text for b in result.content if isinstance(b, types.TextContent)], "raw SDK")

        yield call


@asynccontextmanager
async def _dsh_client() -> AsyncIterator[Call]:
    import os
    from pathlib import Path

    from dsh.agent_loop.mcp import McpManager, parse_servers
    from dsh.agent_loop.tools.registry import ToolContext
    from fixtures.mcp_servers import stdio_command

    def refuse(text: str) -> None:
        raise RuntimeError(f"dsh: the ok server failed: {text}")

    table = {"command": stdio_command("ok"), "cwd": str(REPO_ROOT)}
    async with McpManager(parse_servers({"ok": table}), environ=os.environ, mask=str, notice=refuse) as manager:
        await manager.wait_ready()
        # The tool the agent runs: approval check (echo is readOnlyHint: none), arguments cleaned, the
        # SDK call over dsh's stdio reader, the result formatted for the model.
        [echo] = [tool for tool in manager.tools() if tool.name == "mcp__ok__echo"]
        ctx = ToolContext(cwd=Path(REPO_ROOT), turn=1, notify=lambda event: None, approver=None)

        async def call() -> None:
            output = await echo.run({"text": TEXT}, ctx)
            _expect_echo([output.text], "dsh")

        yield call


def _dsh_side() -> AbstractAsyncContextManager[Call] | None:
    """dsh's MCP client (McpManager, ServerConnection) doing the same call through the tool the agent runs."""
    return _dsh_client()


async def mcp_vs_raw_sdk(settings: Settings, server: BenchServer) -> list[Figure]:
    async with AsyncExitStack() as stack:
        subjects = {"raw": await stack.enter_async_context(_raw_side())}
        dsh = _dsh_side()
        if dsh is not None:
            subjects["dsh"] = await stack.enter_async_context(dsh)
        samples = await paired_async(settings, subjects, repeat=settings.size(200, 40))
    raw_ms = [s * 1000 for s in samples["raw"]]
    figures = [Figure("mcp_roundtrip_raw_ms", "ms", Stats.of(raw_ms))]
    if "dsh" not in samples:
        reason = "dsh's MCP client has not landed (bench/mcp.py: _dsh_side)"
        return [*figures, unavailable("mcp_vs_raw_sdk", "x", reason, RATIO_TARGET)]
    details = {
        "dsh_ms": round(statistics.median(samples["dsh"]) * 1000, 3),
        "raw_sdk_ms": round(statistics.median(raw_ms), 3),
    }
    ratio = Stats.of(ratios(samples["dsh"], samples["raw"]))
    return [*figures, Figure("mcp_vs_raw_sdk", "x", ratio, target=RATIO_TARGET, details=details)]


# --- the first prompt with MCP servers configured ----------------------------------------------------------

FIRST_PROMPT_TARGET = ("<", 30.0)
SERVERS = 3


def _config_with_servers(root: Path, count: int) -> None:
    """``root/config/dsh/config.toml`` with ``count`` ``ok`` fixture servers: with none, the same file without
    them, so what differs is the servers alone (reading a config file costs its parser either way)."""
    import json

    from fixtures.mcp_servers import stdio_command

    folder = root / "config" / "dsh"
    folder.mkdir(parents=True, exist_ok=True)
    command = json.dumps(stdio_command("ok"))  # a JSON array of strings is a TOML array
    tables = "".join(f'[mcp_servers.s{i}]\ncommand = {command}\ncwd = {json.dumps(str(REPO_ROOT))}\n\n'
                     for i in range(count))
    (folder / "config.toml").write_text(f"max_retries = 2\n\n{tables}", encoding="utf-8")


async def mcp_first_prompt(settings: Settings, server: BenchServer) -> list[Figure]:
    """``mcp_first_prompt_ms``: the first prompt in a pty with three ``ok`` servers configured, minus with none,
    paired run by run. The servers start in the background (docs/mcp.md): what this costs is the SDK import
    and the spawns that happen before the prompt is drawn. Timed until the prompt is live (a key typed at it
    is drawn, bench.startup): the banner and ``>`` alone are drawn before any of that starts."""
    from bench.loop import temp_root
    from bench.render import interactive_env
    from bench.startup import first_prompt, with_bytecode

    with temp_root("mcp-first-prompt") as none_root, temp_root("mcp-first-prompt-3") as three_root:
        _config_with_servers(three_root, SERVERS)
        _config_with_servers(none_root, 0)
        live: dict[str, list[float]] = {"three": [], "none": []}
        subjects = {
            "three": first_prompt(with_bytecode(interactive_env(server, "text", three_root)), live["three"]),
            "none": first_prompt(with_bytecode(interactive_env(server, "text", none_root)), live["none"]),
        }
        repeat = settings.size(10, 3)
        await paired_async(settings, subjects, repeat=repeat)
        samples = {name: times[len(times) - repeat :] for name, times in live.items()}  # not the warm-ups'
    deltas = [(a - b) * 1000 for a, b in zip(samples["three"], samples["none"], strict=True)]
    details = {
        "first_prompt_3_servers_ms": round(statistics.median(samples["three"]) * 1000, 1),
        "first_prompt_no_servers_ms": round(statistics.median(samples["none"]) * 1000, 1),
    }
    return [Figure("mcp_first_prompt_ms", "ms", Stats.of(deltas), target=FIRST_PROMPT_TARGET, details=details)]
