"""``startup_ms``: ``dsh --version`` and the time to the first prompt in a pty, minus ``python -c pass``.

Two moments of the first prompt are timed in the same run. ``first_prompt``: the banner and ``>`` are on
the screen (dsh draws them before prompt_toolkit is imported; keys typed from then on are kept). ``live``:
a key typed the moment the prompt appears is drawn after it, i.e. prompt_toolkit runs the line. The target
applies to the first; the second is reported beside it (``prompt_live_ms``) so that the early draw cannot
hide what start-up still costs. Its floor is measured in the same runs: a bare prompt_toolkit prompt spawned
the same way, the time until a key typed at it is drawn, minus ``python -c pass`` (``bare_prompt_live_ms``
in the details): what asyncio and prompt_toolkit cost before any prompt takes keys.

The children may write bytecode even when this process was told not to (``PYTHONDONTWRITEBYTECODE``):
an installed dsh has its ``.pyc`` files (pip compiles them), so the warm-up run writes them here and
the measured runs time start-up rather than compiling every module from source.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env, paired_async
from bench.loop import temp_root
from bench.render import interactive_env

__all__ = ["first_prompt", "startup", "with_bytecode"]


def with_bytecode(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _process(argv: list[str], env: dict[str, str]) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        start = time.perf_counter()
        subprocess.run(argv, env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - start

    return run


# Typed at the first prompt for the ``live`` time: drawn by prompt_toolkit once it runs the line (no banner,
# toolbar or escape sequence holds this pair), then erased before the Ctrl-D that ends the run.
_PROBE = "zq"


def first_prompt(env: dict[str, str], live: list[float] | None = None, *, cwd: str = str(REPO_ROOT),
                 args: tuple[str, ...] = ("-m", "dsh.repl")) -> Callable[[], Awaitable[float]]:
    """Spawn the interactive REPL (``python ARGS``) in a pty in ``cwd``; seconds until its prompt is drawn (then
    Ctrl-D).

    With ``live``, a key pair is typed as soon as the prompt shows and the seconds until it is drawn
    (prompt_toolkit running the line) are appended there.
    """
    import pexpect

    async def run() -> float:
        start = time.perf_counter()
        child = pexpect.spawn(sys.executable, list(args), env=env, cwd=cwd, timeout=60)
        child.delaybeforesend = None  # pexpect sleeps 50 ms before each send by default
        try:
            child.expect_exact(">")
            elapsed = time.perf_counter() - start
            if live is not None:
                child.send(_PROBE)
                child.expect_exact(_PROBE)
                live.append(time.perf_counter() - start)
                child.send("\x7f" * len(_PROBE))
            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        return elapsed

    return run


# The floor under ``live``: Python with asyncio and prompt_toolkit, a bare PromptSession taking keys at ``> ``.
_BARE_PROMPT = ("-c", "from prompt_toolkit import PromptSession\nPromptSession().prompt('> ')")


def _pty_python_pass(env: dict[str, str]) -> Callable[[], Awaitable[float]]:
    """The floor under the pty measurement: ``python -c pass`` spawned the same way, until EOF."""
    import pexpect

    async def run() -> float:
        start = time.perf_counter()
        child = pexpect.spawn(sys.executable, ["-c", "pass"], env=env, cwd=str(REPO_ROOT), timeout=60)
        try:
            child.expect(pexpect.EOF)
            elapsed = time.perf_counter() - start
        finally:
            child.close(force=True)
        return elapsed

    return run


def _differences_ms(samples: dict[str, list[float]], subject: str, floor: str) -> list[float]:
    return [(a - b) * 1000 for a, b in zip(samples[subject], samples[floor], strict=True)]


async def startup(settings: Settings, server: BenchServer) -> list[Figure]:
    repeat = settings.size(10, 5)
    parts: dict[str, Stats] = {}
    details: dict[str, float] = {}
    with temp_root("startup") as root:
        env = with_bytecode(child_env())
        samples = await paired_async(
            settings,
            {"dsh": _process([sys.executable, "-m", "dsh.repl", "--version"], env),
             "python": _process([sys.executable, "-c", "pass"], env)},
            repeat=repeat,
        )
        parts["version"] = Stats.of(_differences_ms(samples, "dsh", "python"))
        details["python_c_pass_ms"] = round(statistics.median(samples["python"]) * 1000, 1)
        details["dsh_version_ms"] = round(statistics.median(samples["dsh"]) * 1000, 1)

        pty_env = with_bytecode(interactive_env(server, "text", root))
        live: list[float] = []
        bare: list[float] = []
        samples = await paired_async(
            settings,
            {"dsh": first_prompt(pty_env, live), "python": _pty_python_pass(pty_env),
             "bare": first_prompt(pty_env, bare, args=_BARE_PROMPT)},
            repeat=repeat,
        )
        del live[: len(live) - len(samples["dsh"])]  # the warm-up runs'
        del bare[: len(bare) - len(samples["bare"])]
        details["bare_prompt_live_ms"] = round(statistics.median(
            _differences_ms({**samples, "bare": bare}, "bare", "python")), 1)
        parts["first_prompt"] = Stats.of(_differences_ms(samples, "dsh", "python"))
        details["pty_python_c_pass_ms"] = round(statistics.median(samples["python"]) * 1000, 1)
        details["dsh_first_prompt_ms"] = round(statistics.median(samples["dsh"]) * 1000, 1)
        details["dsh_prompt_live_ms"] = round(statistics.median(live) * 1000, 1)
        live_parts = {"live": Stats.of(_differences_ms({"live": live, **samples}, "live", "python"))}
    return [
        Figure("startup_ms", "ms", target=("<", 160.0), parts=parts, details=details),
        Figure("prompt_live_ms", "ms", parts=live_parts),
    ]
