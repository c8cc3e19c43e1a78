"""The fault matrix end to end through the real REPL (rows and runner in fault_matrix.py).

For every transport fault and every fault-server behaviour: exactly one correct turn-end line (code and
root cause), the next turn works, and the session log holds the matching ``turn/end``. The rows run once
per module, concurrently; the tests below assert one property of one row each. The README table is
written from the same outcomes (``DSH_FAULT_TABLE=path`` also copies it there).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from dsh_harness import COUNTS, assert_well_formed
from fault_matrix import FAULTS, HELLO, Outcome, markdown_table, run_all

pytestmark = pytest.mark.timeout(300)

NAMES = [fault.name for fault in FAULTS]
_END_LINE = re.compile(r"^\[turn (failed|aborted|rejected|hit the output-token limit|interrupted)", re.M)
_EXPECTED_END_LINES = {"error": 1, "aborted": 1, "rejected": 1, "max-tokens": 1, "completed": 0}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    results = run_all(tmp_path_factory.mktemp("fault-matrix"))
    COUNTS["faults tried (fault matrix rows)"] += len(results)
    COUNTS["dsh processes in the fault matrix"] += len({run.transcript for o in results for run in o.runs})
    return {outcome.fault.name: outcome for outcome in results}


@pytest.mark.parametrize("name", NAMES)
def test_the_turn_prints_the_expected_line(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.matches(), (
        f"{name}: expected\n{outcome.expected()!r}\ngot\n{outcome.fault_output!r}\n"
        f"(transcript {outcome.runs[0].transcript})"
    )


@pytest.mark.parametrize("name", NAMES)
def test_exactly_one_turn_end_line(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    if outcome.fault.end == "startup":
        assert outcome.runs[0].returncode == 2 and outcome.runs[0].stdout == ""
        assert outcome.runs[0].stderr.count("\n") == 1 and outcome.sessions == 0
        return
    lines = _END_LINE.findall(outcome.fault_output)
    assert len(lines) == _EXPECTED_END_LINES[outcome.fault.end], outcome.fault_output


@pytest.mark.parametrize("name", NAMES)
def test_the_next_turn_works(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    fault = outcome.fault
    if fault.end == "startup":
        pytest.skip("dsh did not start: there is no next turn (exit 2 is the answer)")
    if fault.endpoint != "server" and fault.mode == "piped":
        # The endpoint stays broken: the second line fails the same way, numbered, and the loop goes on.
        from fault_matrix import turn_outputs

        outputs = turn_outputs(outcome.runs[0].stdout)
        assert sorted(outputs) == [1, 2] and outputs[2] == outputs[1], outcome.runs[0].stdout
    assert outcome.next_output == HELLO, (outcome.next_output, [str(run.transcript) for run in outcome.runs])
    for run in outcome.runs[1:]:
        assert run.returncode == 0, run.transcript


@pytest.mark.parametrize("name", NAMES)
def test_the_session_log_holds_the_matching_turn_end(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
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


@pytest.mark.parametrize("name", [f.name for f in FAULTS if f.mode == "print" or f.end == "startup"])
def test_print_mode_exit_status(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.runs[0].returncode == outcome.fault.exit_code, outcome.runs[0].transcript


@pytest.mark.parametrize("name", [f.name for f in FAULTS if f.fast is not None])
def test_endpoint_failures_are_fast(outcomes: dict[str, Outcome], name: str) -> None:
    # Two failing turns (DNS included: .invalid fails offline at once) plus start-up, on a loaded box.
    outcome = outcomes[name]
    assert outcome.fault.fast is not None
    assert outcome.seconds < outcome.fault.fast, outcome.seconds


@pytest.mark.parametrize("name", NAMES)
def test_nothing_else_on_stderr(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    runs = outcome.runs[1:] if outcome.fault.end == "startup" else outcome.runs
    for run in runs:
        assert run.stderr == "", (run.transcript, run.stderr[-500:])


def test_the_readme_table(outcomes: dict[str, Outcome], tmp_path: Path) -> None:
    table = markdown_table([outcomes[name] for name in NAMES])
    assert table.count("\n") == len(NAMES) + 2
    assert "<port>" in table and "| ? |" not in table
    (tmp_path / "fault-table.md").write_text(table, encoding="utf-8")
    target = os.environ.get("DSH_FAULT_TABLE")
    if target:
        Path(target).write_text(table, encoding="utf-8")
