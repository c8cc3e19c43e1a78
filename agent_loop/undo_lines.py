"""What ``/undo`` and ``/rewind N`` do and say: the files of the last turns that changed files reverted, newest
first, and the lines that tell what happened (agent_loop/journal.py, docs/safety.md)."""

from __future__ import annotations

import anyio.to_thread

from dsh.agent_loop.journal import Journal
from dsh.agent_loop.undo import TextAccess, undo_turn

__all__ = ["undo_lines"]


async def undo_lines(journal: Journal | None, turns: int, files: TextAccess | None) -> list[str]:
    """Revert the files of the last ``turns`` turns of ``journal`` that changed files (through an editor's
    ``files`` when it has them); the lines that say what happened."""
    if journal is None:
        return ["nothing to undo: this session keeps no log, so no journal of its edits"]
    available = await anyio.to_thread.run_sync(journal.undoable_turns)
    dropped = journal.dropped_turns()
    untrusted = journal.untrusted_entries
    past_cap = (f"; turn{'s' if len(dropped) != 1 else ''} {_turn_list(dropped)} changed files but "
                f"{'are' if len(dropped) != 1 else 'is'} past the journal's cap, so "
                f"{'their' if len(dropped) != 1 else 'its'} changes cannot be undone") if dropped else ""
    if not available and untrusted:
        return [f"nothing to undo: this session's undo journal was not written by this dsh ({_unsigned(untrusted)}"
                f": copied from elsewhere, or written by a dsh before journals were signed); nothing reverted"]
    if not available:
        return [f"nothing to undo: no turn of this session has file changes left to undo{past_cap}"]
    lines: list[str] = []
    chosen = available[:turns]
    for turn in chosen:
        report = await undo_turn(journal, turn, files, anyio.to_thread.run_sync)
        lines.append(f"undo turn {turn}:")
        lines += [f"  {line}" for line in report.lines]
    if len(chosen) < turns:
        lines.append(f"only {len(chosen)} turn{'s' if len(chosen) != 1 else ''} had file changes left to undo"
                     + past_cap)
    if untrusted:
        lines.append(f"the undo journal also holds {_unsigned(untrusted)}, not written by this dsh: ignored")
    return lines


def _unsigned(entries: int) -> str:
    return f"{entries} entr{'ies' if entries != 1 else 'y'} without a valid signature"


def _turn_list(turns: list[int]) -> str:
    """``3``, ``1-4``, ``1, 3``: the turns as a short phrase."""
    if len(turns) > 1 and turns == list(range(turns[0], turns[-1] + 1)):
        return f"{turns[0]}-{turns[-1]}"
    return ", ".join(map(str, turns))
