"""``masking_vs_plain``: an agent turn whose answer is masked for known secrets, over the same turn masking none.

The model's answer and reasoning pass through :class:`dsh.llm.redact.KnownValueStream` before anything
keeps or shows them (docs/reliability.md, "Attacks: the model repeats the key"). Both sides of each sample
run a fresh agent with its own session log over the tiny-delta stream (200 000 deltas of one to three
characters, 20 000 with --quick); only the agent's redactor differs. Parts:

``key``         the key and two URL credentials: what a session usually knows;
``26_values``   26 known values, one starting with each letter, so almost every delta ends in what could
                be the start of one and is held back until the next: the worst ordinary text.

The details add the masker's own CPU time per delta over the same deltas (``process_time``, the best of
the repetitions), which a busy machine disturbs less than the turn's wall time.
"""

from __future__ import annotations

import contextlib
import statistics
import string
import time

from bench import subjects
from bench.harness import BenchServer, Figure, Settings, Stats, paired_async, ratios
from bench.loop import agent_turn, temp_root
from bench.stream import tiny_stream

__all__ = ["masking_vs_plain"]

_SECRETS = {
    "key": (subjects.BENCH_KEY, "benchUrlUser01", "benchUrlPassword02"),
    "26_values": tuple(f"{letter}-bench-secret-{n:04d}" for n, letter in enumerate(string.ascii_lowercase)),
}


def _feed_ns(secrets: tuple[str, ...], pieces: list[str], repeat: int) -> float:
    """CPU nanoseconds per delta of one KnownValueStream fed ``pieces`` (the best of ``repeat`` runs)."""
    from dsh.llm import Redactor
    from dsh.llm.redact import KnownValueStream

    redactor = Redactor(secrets)
    best = float("inf")
    for _ in range(repeat):
        stream = KnownValueStream(redactor)
        started = time.process_time()
        for piece in pieces:
            stream.feed(piece)
        stream.flush()
        best = min(best, time.process_time() - started)
    return round(best / len(pieces) * 1e9)


async def masking_vs_plain(settings: Settings, server: BenchServer) -> list[Figure]:
    from dsh.llm import Redactor
    from dsh.llm.loopback.streams import huge_text_pieces

    stream = tiny_stream(settings)
    base = server.base_url(stream)
    pieces = huge_text_pieces(settings.size(200_000, 20_000))
    parts: dict[str, Stats] = {}
    details: dict[str, object] = {"stream": stream, "no_values": {"feed_ns_per_delta": _feed_ns((), pieces, 3)}}
    with temp_root("masking") as root:
        for label, secrets in _SECRETS.items():
            async with contextlib.AsyncExitStack() as stack:
                samples = await paired_async(settings, {
                    "masked": agent_turn(stack, base, root, redactor=Redactor(secrets)),
                    "plain": agent_turn(stack, base, root, redactor=Redactor(())),
                })
            parts[label] = Stats.of(ratios(samples["masked"], samples["plain"]))
            details[label] = {
                "masked_ms": round(statistics.median(samples["masked"]) * 1000, 1),
                "plain_ms": round(statistics.median(samples["plain"]) * 1000, 1),
                "feed_ns_per_delta": _feed_ns(secrets, pieces, 3),
            }
    return [Figure("masking_vs_plain", "x", parts=parts, details=details)]
