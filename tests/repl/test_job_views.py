"""What the user sees of background jobs: bounded output tails, ages, and the completion notice."""

from __future__ import annotations

from dsh.agent_loop.subagent.jobs import Job, age_text, notice_text, user_notice
from dsh.agent_loop.subagent.result import SubagentResult
from dsh.repl.commands import JOB_OUTPUT_CHARS, JOB_OUTPUT_LINES, _output_tail


def test_the_output_tail_is_bounded_in_lines_and_characters() -> None:
    assert _output_tail("") == ([], False)
    assert _output_tail("one\r\ntwo\n\n") == (["one", "two"], False)
    lines = [f"line {n}" for n in range(100)]
    body, cut = _output_tail("\n".join(lines))
    assert cut and body == lines[-JOB_OUTPUT_LINES:]
    body, cut = _output_tail("x" * (JOB_OUTPUT_CHARS * 3))  # one huge line: its tail, never nothing
    assert cut and body == ["x" * JOB_OUTPUT_CHARS]
    body, cut = _output_tail("head\n" + "y" * JOB_OUTPUT_CHARS + "\nlast")
    assert cut and body == ["last"]  # starts on a whole line, not in the middle of one


def test_ages_are_short() -> None:
    assert [age_text(s) for s in (0, 4.9, 59, 60, 125, 3599, 3600, 3725)] == [
        "0s", "4s", "59s", "1m00s", "2m05s", "59m59s", "1h00m", "1h02m"]


def test_the_users_notice_is_not_the_models() -> None:
    job = Job(id="subagent-2", label="helper", status="failed",
              result=SubagentResult("partial", "error", "Subagent failure (provider: helper; stage: prompt; "
                                    "category: transport)\nSubagent permission decision (policy: reject; …)"))
    assert user_notice(job) == ("subagent-2 (helper) failed: Subagent failure (provider: helper; stage: prompt; "
                                "category: transport) · /job subagent-2 shows its output")
    assert notice_text(job.id, job.label, job.status, job.result).startswith("background job subagent-2 (subagent: ")
    done = Job(id="subagent-3", label="helper", status="completed", result=SubagentResult("ok", "completed"))
    assert user_notice(done) == "subagent-3 (helper) completed · /job subagent-3 shows its output"
    bare = Job(id="subagent-4", label="helper", status="failed", result=SubagentResult("", "refusal"))
    assert user_notice(bare) == "subagent-4 (helper) failed: stop reason refusal · /job subagent-4 shows its output"
