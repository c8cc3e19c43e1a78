"""/why's lines: a failure's whole cause chain, one link per line, masked.

``/why`` prints them, a failure capsule (:mod:`dsh.repl.capsule`) holds them, and ``dsh acp`` sends the chain's
lines with a failed turn (:mod:`dsh.repl.acp_updates`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.agent_loop.child_words import ChildFailure
from dsh.llm import HarnessError, LlmError, chain_links, redact_text

if TYPE_CHECKING:
    from dsh.agent_loop.session import Session
    from dsh.llm import ChainLink

__all__ = ["link_lines", "why_lines"]


def link_lines(links: list[ChainLink], depth: int, secrets: tuple[str, ...]) -> list[str]:
    """/why's lines for a cause chain, masked: one per link, a group's members indented (dsh acp sends them too)."""
    lines: list[str] = []
    indent = "  " * depth
    for link in links:
        label = link.type_name or "…"
        text = redact_text(link.text, secrets).replace("\n", " ")
        lines.append(f"{indent}{label}: {text}" if link.type_name else f"{indent}{text}")
        for number, member in enumerate(link.members, 1):
            lines.append(f"{indent}  [{number}]")
            lines.extend(link_lines(member, depth + 2, secrets))
    return lines


def why_lines(session: Session) -> list[str]:
    """What /why prints for ``session``'s last failure, masked (a failure capsule holds them too)."""
    failure = session.last_failure
    if failure is None:
        return ["no failure yet"]
    secrets = session.secrets
    head = "last failure"
    if isinstance(failure, HarnessError):
        head += f" ({failure.code}"
        if isinstance(failure, LlmError) and failure.status is not None:
            head += f", HTTP {failure.status}"
        if isinstance(failure, LlmError) and failure.request_id is not None:
            head += f", request id {redact_text(failure.request_id, secrets)}"
        head += ")"
    lines = [head + ":", *(f"  {line}" for line in link_lines(chain_links(failure), 0, secrets))]
    # A subagent's or an MCP server's own words (agent_loop/child_words.py): masked by its run, and again here.
    if isinstance(failure, ChildFailure):
        lines += [f"  {redact_text(line, secrets)}" for line in failure.word_lines()]
    return lines
