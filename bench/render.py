"""``render_vs_loop``: the REPL drawing a turn on a pseudo-terminal, over the agent loop alone.

Two parts, each paired with the bare loop (a fresh agent running the same turn in this process):

``pty_sink``     in process: the REPL's :class:`~dsh.repl.shell.Shell` (renderer, colour on) writing
                 through the ``-p``/piped sink to a real pty whose other end a ``cat`` child drains.
``interactive``  the real interactive ``dsh`` (prompt_toolkit, live view, toolbar) in a pty driven by
                 pexpect: time from Enter to the next prompt.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio

from bench import subjects
from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env, paired_async, ratios
from bench.loop import PROMPT, agent_turn, temp_root
from bench.stream import tiny_stream

__all__ = ["interactive_env", "render_vs_loop"]

_TYPE_DELAY = 0.3  # seconds between the prompt appearing and typing into it


@contextlib.contextmanager
def _drained_pty() -> Iterator[Any]:
    """A text file on a pty slave; a ``cat`` child reads the master side as a terminal would."""
    master, slave = os.openpty()
    drain = subprocess.Popen(["cat"], stdin=master, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(master)
    tty = open(slave, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    try:
        yield tty
    finally:
        tty.close()  # the slave's last close gives cat EOF (EIO) on the master
        try:
            drain.wait(timeout=5)
        except subprocess.TimeoutExpired:
            drain.kill()
            drain.wait()


def _shell_turn(
    stack: contextlib.AsyncExitStack, base_url: str, root: Path, tty: Any
) -> Callable[[], Awaitable[float]]:
    from dsh.llm import DeepSeekClient
    from dsh.repl.config import Config
    from dsh.repl.endpoint import configured_endpoint
    from dsh.repl.frontend import PlainFrontEnd, StreamSink
    from dsh.repl.shell import Shell

    client = DeepSeekClient(base_url=base_url, api_key=subjects.BENCH_KEY)
    config = Config(api_key=subjects.BENCH_KEY, base_url=base_url)
    sink = StreamSink(tty)
    shell = Shell(config, PlainFrontEnd(sink, flush=sink.flush), color=True, env={"XDG_STATE_HOME": str(root)},
                  endpoint=configured_endpoint(config, client))
    stack.push_async_callback(shell.aclose)  # closes the client too
    started = False

    async def run() -> float:
        nonlocal started
        if not started:
            await shell.start()
            started = True
        else:
            await shell.session.new_session()  # a fresh conversation, so every turn sends the same request
        start = time.perf_counter()
        reason = await shell.run_turn(PROMPT)
        elapsed = time.perf_counter() - start
        if reason.kind != "completed":
            raise RuntimeError(f"the REPL turn ended {reason}")
        return elapsed

    return run


def interactive_env(server: BenchServer, stream: str, root: Path) -> dict[str, str]:
    return child_env(
        DEEPSEEK_API_KEY=subjects.BENCH_KEY,
        DEEPSEEK_BASE_URL=server.base_url(stream),
        XDG_STATE_HOME=str(root / "state"),
        XDG_CONFIG_HOME=str(root / "config"),
        PROMPT_TOOLKIT_NO_CPR="1",
        TERM="xterm",
    )


class _InteractiveRepl:
    """A real ``dsh`` in a pty; each call types a prompt and waits for the next ``>``."""

    def __init__(self, env: dict[str, str]) -> None:
        import pexpect

        self._child = pexpect.spawn(
            sys.executable, ["-m", "dsh.repl"], env=env, cwd=str(REPO_ROOT), maxread=65536,
            dimensions=(40, 120), timeout=120,
        )
        self._child.expect_exact(">")
        self._turn = 0

    async def run(self) -> float:
        self._turn += 1
        # Keys typed before prompt_toolkit has switched the tty to raw mode are flushed away; the
        # prompt is drawn a moment before that, so give it a beat (untimed).
        await anyio.sleep(_TYPE_DELAY)
        # The streamed text has no ">" and neither has the toolbar, so the next ">" is the prompt.
        # (No searchwindowsize: the turn header can sit further back than the window in one read.)
        start = time.perf_counter()
        self._child.send(PROMPT + "\r")
        self._child.expect_exact(f"[main turn {self._turn}]")
        self._child.expect_exact(">")
        return time.perf_counter() - start

    def close(self) -> None:
        import pexpect

        with contextlib.suppress(Exception):
            self._child.sendeof()
            self._child.expect(pexpect.EOF, timeout=10)
        self._child.close(force=True)


async def render_vs_loop(settings: Settings, server: BenchServer) -> list[Figure]:
    stream = tiny_stream(settings)
    base = server.base_url(stream)
    parts: dict[str, Stats] = {}
    details: dict[str, Any] = {"stream": stream}
    with temp_root("render") as root:
        async with contextlib.AsyncExitStack() as stack:
            tty = stack.enter_context(_drained_pty())
            loop = agent_turn(stack, base, root / "loop", tools=True)
            samples = await paired_async(settings, {"render": _shell_turn(stack, base, root, tty), "loop": loop})
            parts["pty_sink"] = Stats.of(ratios(samples["render"], samples["loop"]))
            details["pty_sink_ms"] = round(statistics.median(samples["render"]) * 1000, 1)
            details["loop_ms"] = round(statistics.median(samples["loop"]) * 1000, 1)

            repl = _InteractiveRepl(interactive_env(server, stream, root))
            stack.callback(repl.close)
            samples = await paired_async(settings, {"interactive": repl.run, "loop": loop})
            parts["interactive"] = Stats.of(ratios(samples["interactive"], samples["loop"]))
            details["interactive_ms"] = round(statistics.median(samples["interactive"]) * 1000, 1)
            details["interactive_loop_ms"] = round(statistics.median(samples["loop"]) * 1000, 1)
    return [Figure("render_vs_loop", "x", parts=parts, details=details)]
