"""The fault matrix end to end through the real REPL (rows and runner in fault_matrix.py).

Each row is its own test: it runs the row (its own user, server and dsh processes) and checks every
property of it -- exactly one correct turn-end line (code and root cause), the next turn works, the
session log holds the matching ``turn/end``, the exit status, nothing on stderr, its README table row --
reporting every property that fails, not only the first. The README table comes from
``python tests/reliability/fault_matrix.py``, which runs the same rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from dsh_harness import COUNTS, assert_well_formed
from fault_matrix import FAULTS, HELLO, Fault, Outcome, markdown_table, run_fault, turn_outputs

pytestmark = pytest.mark.timeout(120)

_END_LINE = re.compile(r"^\[turn (failed|aborted|rejected|hit the output-token limit|interrupted)", re.M)
_EXPECTED_END_LINES = {"error": 1, "aborted": 1, "rejected": 1, "max-tokens": 1, "completed": 0}


def the_turn_prints_the_expected_line(outcome: Outcome) -> None:
    assert outcome.matches(), (
        f"expected\n{outcome.expected()!r}\ngot\n{outcome.fault_output!r}\n(transcript {outcome.runs[0].transcript})"
    )


def exactly_one_turn_end_line(outcome: Outcome) -> None:
    if outcome.fault.end == "startup":
        assert outcome.runs[0].returncode == 2 and outcome.runs[0].stdout == ""
        assert outcome.runs[0].stderr.count("\n") == 1 and outcome.sessions == 0
        return
    lines = _END_LINE.findall(outcome.fault_output)
    assert len(lines) == _EXPECTED_END_LINES[outcome.fault.end], outcome.fault_output


def the_next_turn_works(outcome: Outcome) -> None:
    fault = outcome.fault
    if fault.end == "startup":
        return  # dsh did not start: there is no next turn (exit 2 is the answer)
    if fault.endpoint != "server" and fault.mode == "piped":
        # The endpoint stays broken: the second line fails the same way, numbered, and the loop goes on.
        outputs = turn_outputs(outcome.runs[0].stdout)
        assert sorted(outputs) == [1, 2] and outputs[2] == outputs[1], outcome.runs[0].stdout
    assert outcome.next_output == HELLO, (outcome.next_output, [str(run.transcript) for run in outcome.runs])
    for run in outcome.runs[1:]:
        assert run.returncode == 0, run.transcript


def the_session_log_holds_the_matching_turn_end(outcome: Outcome) -> None:
    fault = outcome.fault
    if fault.end == "startup":
        assert outcome.sessions == 0
        return
    assert outcome.sessions == 1
    assert_well_formed(outcome.records)
    reason = outcome.turn_end()
    assert reason is not None, f"turn {outcome.fault_turn} has no single turn/end"
    assert reason["kind"] == fault.end
    if fault.end == "error":
        assert reason["code"] == fault.code
        shown = next(line for line in outcome.fault_output.split("\n") if line.startswith("[turn failed "))
        assert shown == f"[turn failed {reason['code']}] {reason['message']}"  # the log says what the user saw
        assert reason.get("status") == fault.status
        if fault.status is not None:
            assert re.fullmatch(r"fault-\d{4}", reason["request_id"])
    if fault.end == "aborted":
        assert reason["reason"] == "cancelled"


def the_exit_status(outcome: Outcome) -> None:
    if outcome.fault.mode == "print" or outcome.fault.end == "startup":
        assert outcome.runs[0].returncode == outcome.fault.exit_code, outcome.runs[0].transcript


def endpoint_failures_are_fast(outcome: Outcome) -> None:
    # Two failing turns (DNS included: .invalid fails offline at once) plus start-up, on a loaded box.
    if outcome.fault.fast is not None:
        assert outcome.seconds < outcome.fault.fast, outcome.seconds


def nothing_else_on_stderr(outcome: Outcome) -> None:
    runs = outcome.runs[1:] if outcome.fault.end == "startup" else outcome.runs
    if outcome.fault.mode == "print" and outcome.fault.end != "startup":
        # -p puts the turn's own diagnostics (the end line, retries, fix lines) on stderr, and nothing else.
        first, *runs = runs
        assert outcome.fault_output.endswith(first.stderr.removesuffix("\n")), (first.transcript, first.stderr)
        assert not any(line in first.stderr for line in first.stdout.splitlines() if line), first.transcript
    for run in runs:
        assert run.stderr == "", (run.transcript, run.stderr[-500:])


def the_readme_table_row(outcome: Outcome) -> None:
    header, rule, row = markdown_table([outcome]).splitlines()
    assert header.startswith("| fault |") and rule.startswith("|---|")
    assert "| ? |" not in row, row
    if outcome.port is not None and f":{outcome.port}" in outcome.fault_output:
        assert ":<port>" in row and f":{outcome.port}" not in row, row


CHECKS: tuple[Callable[[Outcome], None], ...] = (
    the_turn_prints_the_expected_line,
    exactly_one_turn_end_line,
    the_next_turn_works,
    the_session_log_holds_the_matching_turn_end,
    the_exit_status,
    endpoint_failures_are_fast,
    nothing_else_on_stderr,
    the_readme_table_row,
)


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
def test_the_fault_row(fault: Fault, tmp_path: Path) -> None:
    outcome = run_fault(fault, tmp_path)
    COUNTS["faults tried (fault matrix rows)"] += 1
    COUNTS["dsh processes in the fault matrix"] += len({run.transcript for run in outcome.runs})
    failed: list[str] = []
    for check in CHECKS:
        try:
            check(outcome)
        except AssertionError as exc:
            failed.append(f"{check.__name__}: {exc}")
    assert failed == [], "\n\n".join(failed)
