"""``extensions_first_prompt_ms``: the first prompt in a repository with 50 skills and 50 custom commands
(docs/extending.md), minus in one with none, paired run by run (target: at most 10 ms, issue 38).

Both are git repositories laid out as Claude Code's (``.claude/skills/NAME/SKILL.md``, ``.claude/commands/NAME.md``,
about 2 KB each). The folders are listed when the session builds its agent, behind the first prompt: what this
measures is that nothing of it moved before the prompt is live (a key typed at it is drawn, bench.startup). The
discovery itself is timed in process as a detail (``discovery_ms``).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from bench.harness import BenchServer, Figure, Settings, Stats, paired_async

__all__ = ["extensions_first_prompt"]

COUNT = 50
TARGET = ("<=", 10.0)
_BODY = "Follow these steps with care; each one is a line of the instructions.\n" * 28  # about 2 KB


def _repository(root: Path, count: int) -> Path:
    project = root / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    for n in range(count):
        skill = project / ".claude" / "skills" / f"skill-{n:02d}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: skill-{n:02d}\ndescription: Skill number {n} for the bench; use "
                                        f"when asked for {n}.\n---\n{_BODY}", encoding="utf-8")
        commands = project / ".claude" / "commands"
        commands.mkdir(parents=True, exist_ok=True)
        (commands / f"cmd-{n:02d}.md").write_text(f"---\ndescription: Command {n}\n---\nDo {n} with $ARGUMENTS.\n"
                                                  f"{_BODY}", encoding="utf-8")
    return project


def _discovery_ms(project: Path) -> float:
    from dsh.agent_loop.extensions import discover_extensions
    from dsh.llm.redact import Redactor

    start = time.perf_counter()
    found = discover_extensions(project, None, Redactor(()))
    took = (time.perf_counter() - start) * 1000
    if len(found.skills) != COUNT or len(found.commands) != COUNT:
        raise RuntimeError(f"found {len(found.skills)} skills and {len(found.commands)} commands, not {COUNT} each")
    return took


async def extensions_first_prompt(settings: Settings, server: BenchServer) -> list[Figure]:
    from bench.loop import temp_root
    from bench.render import interactive_env
    from bench.startup import first_prompt, with_bytecode

    with temp_root("extensions-50") as many_root, temp_root("extensions-0") as none_root:
        many, none = _repository(many_root, COUNT), _repository(none_root, 0)
        live: dict[str, list[float]] = {"many": [], "none": []}
        subjects = {
            "many": first_prompt(with_bytecode(interactive_env(server, "text", many_root)), live["many"],
                                 cwd=str(many)),
            "none": first_prompt(with_bytecode(interactive_env(server, "text", none_root)), live["none"],
                                 cwd=str(none)),
        }
        repeat = settings.size(10, 3)
        await paired_async(settings, subjects, repeat=repeat)
        samples = {name: times[len(times) - repeat:] for name, times in live.items()}  # not the warm-ups'
        discovery = [_discovery_ms(many) for _ in range(5)]
    deltas = [(a - b) * 1000 for a, b in zip(samples["many"], samples["none"], strict=True)]
    details = {
        "first_prompt_50_each_ms": round(statistics.median(samples["many"]) * 1000, 1),
        "first_prompt_none_ms": round(statistics.median(samples["none"]) * 1000, 1),
        "discovery_ms": round(statistics.median(discovery), 1),
    }
    return [Figure("extensions_first_prompt_ms", "ms", Stats.of(deltas), target=TARGET, details=details)]
