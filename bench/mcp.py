"""One MCP tool round trip: dsh's MCP client beside the raw ``mcp`` SDK client, in the same run.

``mcp_roundtrip_raw_ms``  one ``tools/call echo`` and its answer, through the SDK's ``ClientSession``
                          over stdio, against ``python -m fixtures.mcp_servers ok`` (one server, started
                          once; the spawn and handshake are not timed). The baseline.
``mcp_vs_raw_sdk``        the same call through dsh's client over the raw SDK's, paired sample by sample.

The dsh side is a hook: :func:`_dsh_side` answers ``None`` until the client (agent_loop/mcp/, issue 24)
lands, and the ratio then reports "unavailable" with that reason. When it lands, make ``_dsh_side``
open dsh's client on the same command line (``stdio_command("ok")``, cwd the repository root) and return
a callable doing one ``echo`` call; nothing else here changes.
"""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, paired_async, ratios, unavailable

__all__ = ["mcp_vs_raw_sdk"]

Call = Callable[[], Awaitable[float | None]]
TEXT = "bench"
RATIO_TARGET = ("<=", 1.1)


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


def _dsh_side() -> AbstractAsyncContextManager[Call] | None:
    """dsh's MCP client doing the same call; ``None`` until agent_loop/mcp/ lands (the module docstring)."""
    return None


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
