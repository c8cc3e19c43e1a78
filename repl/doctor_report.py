"""``dsh doctor``'s report: each step's mark, line, fix and facts, as lines for the terminal and one JSON object
for ``--json`` (docs/doctor.md).

Its own module because the report is what the checks (repl/doctor.py, repl/doctor_environment.py) produce and
what its readers consume (``dsh doctor``, ``/doctor``, the capsule's ``doctor`` record, repl/capsule.py): its
shape is the promise, whichever check fills it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsh.llm import error_chain, redact_text
from dsh.repl.sanitize import one_line

__all__ = ["FAIL", "MARKS", "PASS", "SKIP", "STEPS", "Report", "Step", "config_failure", "milliseconds"]

PASS, FAIL, SKIP = "pass", "fail", "skip"
MARKS = {PASS: "✓", FAIL: "✗", SKIP: "–"}
STEPS = ("configuration", "proxy", "DNS", "TCP", "TLS", "HTTP", "balance", "stream", "environment")


@dataclass
class Step:
    """One checked step: its mark, its line, the fix under a failure, and its facts for ``--json``."""

    name: str
    status: str
    text: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)  # sub-lines (the environment's subagents)

    def lines(self) -> list[str]:
        out = [f"{MARKS[self.status]} {self.name}: {one_line(self.text)}"]  # a relayed message may hold blank lines
        out += [f"    {line}" for line in self.details]
        if self.fix:
            out.append(self.fix)
        return out

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"step": self.name, "status": self.status, "text": self.text}
        if self.fix:
            data["fix"] = self.fix.strip()
        if self.details:
            data["details"] = list(self.details)
        if self.facts:
            data["facts"] = self.facts
        return data


@dataclass
class Report:
    steps: list[Step]

    @property
    def ok(self) -> bool:
        return all(step.status != FAIL for step in self.steps)

    @property
    def failed(self) -> Step | None:
        return next((step for step in self.steps if step.status == FAIL), None)

    def lines(self) -> list[str]:
        out = [line for step in self.steps for line in step.lines()]
        failed = self.failed
        if failed is None:
            out.append("doctor: every step passed")
        else:
            out.append(f"doctor: failed at {failed.name}")
        return out

    def to_dict(self) -> dict[str, Any]:
        failed = self.failed
        return {"ok": self.ok, "failed_step": failed.name if failed else None,
                "steps": [step.to_dict() for step in self.steps]}


def config_failure(exc: BaseException, secrets: tuple[str, ...] = ()) -> Report:
    """The report when the configuration cannot even be read: that step fails, the path is skipped."""
    steps = [Step("configuration", FAIL, redact_text(error_chain(exc), secrets))]
    steps += [Step(name, SKIP, "skipped (an earlier step failed)") for name in STEPS[1:]]
    return Report(steps)


def milliseconds(seconds: float) -> str:
    """A step's duration as its line shows it: ``12.3 ms``."""
    return f"{max(seconds, 0.0) * 1000:.1f} ms"
