"""Hostile markdown: what a reply built to be slow costs the REPL (docs/markdown.md, "Hostile replies").

``markdown_line_ms``    for each highlighted language (``HIGHLIGHTED_LANGUAGES``), the worst of some 12 000
                        hostile code lines of ``HIGHLIGHT_MAX_CHARS``: every printable ASCII character and
                        every pair of them repeated, and each character after an opener that puts a lexer in
                        another state (a string, a comment, a heredoc ...). CPU time of one line, ms. A
                        language whose worst line costs more than the target does not belong in the list.
``markdown_inline_4x``  a line of N and of 4N hostile markup characters (``[`` runs, ``[a](`` runs, ``*``,
                        backticks, blanks in a heading ...): the time ratio, paired per repetition; linear
                        is 4, quadratic 16.
``markdown_answer_ms``  whole hostile answers through the real renderer and sanitizer, chunked as the fault
                        server streams them: 600 lines of 3 999 ``[``, a lilypond fence with one line of
                        2 000 ``a``, 2.8 MB of ordinary markdown in one delta. CPU ms.
``markdown_packed_read_ms``  what a server that packs one 64 KiB read with code lines, each its own delta,
                        costs: 320 of the worst C line of 200 characters in a ``c`` fence. CPU ms; no target,
                        it is the bound docs/markdown.md states (the event loop renders a read at a time).
``ctrl_c_hostile_ms``   the real interactive dsh in a pty while the fault server streams the hostile answer:
                        Ctrl-C to ``[turn aborted] cancelled``, ms; the child's peak RSS in the details.
"""

from __future__ import annotations

import contextlib
import os
import string
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.harness import REPO_ROOT, BenchServer, Figure, Settings, Stats, child_env
from bench.loop import temp_root

__all__ = ["ctrl_c_hostile", "hostile_answer", "hostile_answer_cost", "inline_growth", "line_cost", "packed_read"]

_PRINTABLE = [c for c in string.printable if c not in "\n\r\x0b\x0c"]
# Openers that put a lexer in another state before the run that follows them.
_PREFIXES = ('"', "'", "`", "/*", "<", "#", "$(", "${", '"""', "<!--", "{", "[", "(", "@", "%", "\\", "--", "//",
             "<<", 'r#"', "0x", "1e", "a:", "- ", "$", "=", "::", "$ ", "+", "\t")
_QUICK_PAIRS = "\t \"#$'()*-/<[\\`{a1"  # --quick: the openers and a letter and a digit, paired

LILYPOND_LINE = "a" * 2000
BRACKET_LINE = "[" * 3999


def hostile_answer(bracket_lines: int = 600) -> str:
    """The reply of docs/reliability.md: a lilypond fence with one line of 2 000 ``a``, then ``[`` runs."""
    return f"```lilypond\n{LILYPOND_LINE}\n```\n" + f"{BRACKET_LINE}\n" * bracket_lines


def _hostile_lines(length: int, quick: bool) -> Iterator[tuple[str, str]]:
    pairs = _QUICK_PAIRS if quick else "".join(_PRINTABLE)
    units = [*_PRINTABLE, *(a + b for a in pairs for b in pairs)]
    for unit in units:
        yield repr(unit), (unit * (length // len(unit) + 1))[:length]
    for prefix in _PREFIXES:
        for char in pairs if quick else _PRINTABLE:
            yield f"{prefix!r}+{char!r}", prefix + char * (length - len(prefix))


def _code_line_seconds(language: str, line: str, loops: int = 1) -> float:
    """CPU seconds of the product's code-line path (a fence of ``language`` open) for ``line``."""
    from dsh.repl.markdown import MarkdownLines

    best = float("inf")
    for _ in range(loops):
        lines = MarkdownLines()
        lines.line(f"```{language}")  # a run of backticks would close the fence: a fresh one per line
        started = time.thread_time()
        lines.line(line)
        best = min(best, time.thread_time() - started)
    return best


def _worst_lines(language: str, length: int, quick: bool, keep: int = 20) -> list[tuple[str, str]]:
    timed = sorted(((_code_line_seconds(language, line), label, line) for label, line in _hostile_lines(length, quick)),
                   reverse=True)
    return [(label, line) for _, label, line in timed[:keep]]


async def line_cost(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.repl.markdown import HIGHLIGHT_MAX_CHARS, HIGHLIGHTED_LANGUAGES

    cap = HIGHLIGHT_MAX_CHARS
    parts: dict[str, Stats] = {}
    details: dict[str, Any] = {"cap_chars": cap}
    for language in sorted(set(HIGHLIGHTED_LANGUAGES.values())):
        worst = max(_worst_lines(language, cap, settings.quick),
                    key=lambda item: _code_line_seconds(language, item[1], loops=3))
        label, line = worst
        samples = [_code_line_seconds(language, line, loops=3) * 1000 for _ in range(settings.repeat)]
        parts[language] = Stats.of(samples)
        quarter = _code_line_seconds(language, line[: cap // 4], loops=5)
        details[language] = {"worst_line": label, "growth_4x": round(min(samples) / 1000 / max(quarter, 1e-7), 1)}
    return [Figure("markdown_line_ms", "ms", target=("<", 10.0), parts=parts, details=details)]


# --- inline markup -----------------------------------------------------------------------------------

_INLINE_CASES: dict[str, Callable[[int], str]] = {
    "[": lambda n: "[" * n,
    "[a](": lambda n: ("[a](" * n)[:n],
    "(": lambda n: "(" * n,
    "*": lambda n: "*" * n,
    "**a": lambda n: ("**a" * n)[:n],
    "_": lambda n: "_" * n,
    "__a": lambda n: ("__a" * n)[:n],
    "`": lambda n: "`" * n,
    "`a": lambda n: ("`a" * n)[:n],
    "heading blanks": lambda n: "# a" + " " * (n - 4) + "b",
    "rule dashes": lambda n: ("- " * n)[: n - 1] + "x",
    "quote of [": lambda n: "> " + "[" * (n - 2),
    "bullet of [": lambda n: "- " + "[" * (n - 2),
}


def _markup_seconds(line: str, loops: int) -> float:
    from dsh.repl.markdown import MarkdownLines

    lines = MarkdownLines()
    started = time.thread_time()
    for _ in range(loops):
        lines.line(line)
    return time.thread_time() - started


async def inline_growth(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.repl.markdown import MAX_MARKUP_CHARS

    big = MAX_MARKUP_CHARS  # the longest line that markup is parsed in
    small = big // 4
    parts: dict[str, Stats] = {}
    for label, build in _INLINE_CASES.items():
        short, long = build(small), build(big)
        _markup_seconds(long, 2)  # warm-up
        samples = [_markup_seconds(long, 20) / max(_markup_seconds(short, 20), 1e-7) for _ in range(settings.repeat)]
        parts[label] = Stats.of(samples)
    return [Figure("markdown_inline_4x", "x", target=("<=", 6.0), parts=parts,
                   details={"short_chars": small, "long_chars": big})]


# --- whole answers -------------------------------------------------------------------------------------


def _render_seconds(pieces: list[str]) -> float:
    from dsh.agent_loop.events import TextDelta, TurnEnd, TurnStart
    from dsh.agent_loop.reasons import Completed
    from dsh.repl.renderer import Renderer
    from dsh.repl.styles import terminal_text

    renderer = Renderer(color=True, markdown="live")
    started = time.thread_time()
    terminal_text(renderer.render(TurnStart(1, "q")))
    for piece in pieces:
        terminal_text(renderer.render(TextDelta(piece)))
    terminal_text(renderer.render(TurnEnd(1, Completed())))
    return time.thread_time() - started


async def hostile_answer_cost(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.llm.loopback.streams import split_pieces

    bulk = "The quick brown fox jumps over the lazy dog, **again** `jumps` over [the](x) log.\n" * 32_000
    answers = {
        "brackets_600x3999": split_pieces("\n".join([BRACKET_LINE] * settings.size(600, 150)) + "\n"),
        "lilypond_2000a": split_pieces(f"```lilypond\n{LILYPOND_LINE}\n```\n"),
        "bulk_delta_2.8MB": [bulk],
    }
    parts = {name: Stats.of([_render_seconds(pieces) * 1000 for _ in range(settings.repeat)])
             for name, pieces in answers.items()}
    return [Figure("markdown_answer_ms", "ms", target=("<", 2000.0), parts=parts)]


WORST_C_LINE = "::" + "\t" * 198  # the C lexer's function-definition rule backtracks over the blank run


async def packed_read(settings: Settings, server: BenchServer) -> list[Figure]:
    pieces = ["```c\n", *[WORST_C_LINE + "\n"] * (64 * 1024 // (len(WORST_C_LINE) + 1))]
    samples = [_render_seconds(pieces) * 1000 for _ in range(settings.repeat)]
    return [Figure("markdown_packed_read_ms", "ms", stats=Stats.of(samples), details={"lines": len(pieces) - 1})]


# --- Ctrl-C in the real REPL ---------------------------------------------------------------------------


def _vm_hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def _spawn_repl(base_url: str, root: Any) -> Any:
    import pexpect

    from bench.subjects import BENCH_KEY

    (root / "config" / "dsh").mkdir(parents=True, exist_ok=True)
    (root / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    env = child_env(DEEPSEEK_API_KEY=BENCH_KEY, DEEPSEEK_BASE_URL=base_url, XDG_STATE_HOME=str(root / "state"),
                    XDG_CONFIG_HOME=str(root / "config"), PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    return pexpect.spawn(sys.executable, ["-m", "dsh.repl"], env=env, cwd=str(REPO_ROOT), encoding="utf-8",
                         maxread=1 << 20, dimensions=(40, 200), timeout=120)


async def ctrl_c_hostile(settings: Settings, server: BenchServer) -> list[Figure]:
    import anyio

    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    answer = hostile_answer()
    latencies: list[float] = []
    fault = FaultServer().start_in_thread()
    try:
        with temp_root("ctrl-c") as root:
            child = _spawn_repl(fault.url, root)
            try:
                child.expect_exact(">")
                for turn in range(1, settings.repeat + 1):
                    fault.push(Behaviour("slow_text", text=answer, delay=0.005))
                    await anyio.sleep(0.3)  # keys typed before the prompt is in raw mode are flushed away
                    child.send(f"go {turn}\r")
                    child.expect_exact(f"\x1b[36m{LILYPOND_LINE}\x1b[0m")  # the lilypond line, rendered
                    child.expect_exact(f"{BRACKET_LINE}\r\n")  # and a first line of [ runs
                    started = time.perf_counter()
                    child.sendintr()
                    child.expect_exact("[turn aborted] cancelled")
                    latencies.append((time.perf_counter() - started) * 1000)
                    child.expect_exact(">")
                peak = _vm_hwm_mb(child.pid)
            finally:
                with contextlib.suppress(Exception):
                    child.sendeof()
                child.close(force=True)
    finally:
        fault.stop()
    details = {"peak_rss_mb": round(peak, 1), "answer_chars": len(answer), "load_average": os.getloadavg()[0]}
    return [Figure("ctrl_c_hostile_ms", "ms", stats=Stats.of(latencies), target=("<", 100.0), details=details)]


if __name__ == "__main__":  # a quick look at one language: python -m bench.markdown_hostile LANGUAGE
    from dsh.repl.markdown import HIGHLIGHT_MAX_CHARS

    for found_label, found_line in _worst_lines(sys.argv[1], HIGHLIGHT_MAX_CHARS, quick=False):
        print(f"{_code_line_seconds(sys.argv[1], found_line, loops=3) * 1000:8.2f} ms  {found_label}")
