"""The agent's own words: every failed run leaves /why a record, with what the agent said kept host-side only.

docs/contracts.md: the diagnostic is built from closed facts; an error's message and data, Codex's message and
``codexErrorInfo``, and the last lines of a failing child's stderr go to ``SubagentResult.cause`` (a
``SubagentFailure``: what ``/why`` shows) and dsh.log, masked and bounded — never to the model's tool result.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.agent_loop.subagent import acp
from dsh.agent_loop.subagent.codex import CodexRun
from dsh.agent_loop.subagent.result import (
    STDERR_TAIL_BYTES,
    STDERR_TAIL_LINES,
    WORDS_LIMIT_BYTES,
    AgentWords,
    SubagentFailure,
    SubagentResult,
)
from dsh.agent_loop.subagent.tool import foreground_output
from dsh.llm import chain_links
from dsh.llm.redact import Redactor
from tests.agent_loop.subagent.product_support import (
    STDERR_CANARY,
    assert_no_canary,
    codex_failure,
    fake_codex,
    request,
    run_once,
)

pytestmark = pytest.mark.anyio

SECRET = "tokenValue-5b1e77c2d9"  # the value of a secret-named variable in the subagent's env
BIDI = "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
WORDS_HEAD = "the agent's own words (host-side only, masked):"


def _record(result: SubagentResult) -> SubagentFailure:
    assert isinstance(result.cause, SubagentFailure), result.cause
    assert result.cause.message == result.diagnostic  # the record's line is the diagnostic, closed facts only
    return result.cause


def _model_sees(result: SubagentResult) -> str:
    """Everything of the run the model gets: the tool result's text (the diagnostic field is display only)."""
    return foreground_output(result).text


def _start_up_failure(stderr_script: str, **table: object) -> acp.AcpRun:
    """An "agent" that writes ``stderr_script``'s lines to stderr and exits 1 at once (a bad flag, a missing module)."""
    code = f"import sys; sys.stderr.write({stderr_script!r}); sys.exit(1)"
    provider = acp.from_config("probe", {"command": [sys.executable, "-c", code], "env": {"AGENT_TOKEN": SECRET},
                                         "eof_grace": 0.5, "term_grace": 0.5, **table})  # fmt: skip
    run = provider.run(request(Path.cwd()))
    assert isinstance(run, acp.AcpRun)
    return run


# -- Codex: its error message and codexErrorInfo ----------------------------------------------------------


@pytest.mark.parametrize("scenario", ["fail", "error_then_fail"])
async def test_codex_error_message_and_info_are_kept_for_why_never_for_the_model(
    tmp_path: Path, scenario: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        result = await run_once(fake_codex(scenario, error_info="other"), request(tmp_path))
    assert result.diagnostic == codex_failure("turn", "other")
    words = _record(result).words
    assert words == AgentWords(
        said=(
            ("error message", f"upstream said: {STDERR_CANARY}"),
            ("codexErrorInfo", '"other"'),
            ("additionalDetails", STDERR_CANARY),
        ),
        stderr=(f"fake codex app-server: {STDERR_CANARY}",),
    )
    assert STDERR_CANARY not in _model_sees(result)
    assert_no_canary(result)
    logged = [r for r in caplog.records if WORDS_HEAD in r.getMessage()]
    assert [r.levelno for r in logged] == [logging.WARNING]
    assert f"  error message: upstream said: {STDERR_CANARY}" in logged[0].getMessage()


async def test_codex_structured_error_info_is_kept_as_raw_json(tmp_path: Path) -> None:
    info = {"responseStreamConnectionFailed": {"httpStatusCode": 502}}
    result = await run_once(fake_codex("fail", error_info=info), request(tmp_path))
    assert result.diagnostic == codex_failure("turn", "responseStreamConnectionFailed", "; HTTP status: 502")
    assert ("codexErrorInfo", json.dumps(info, separators=(",", ":"))) in _record(result).words.said


# -- a child that fails at start-up: the last lines of its stderr -----------------------------------------


async def test_an_agent_that_exits_at_start_leaves_its_reason_in_the_record_masked() -> None:
    stderr = (
        "node:internal/modules/cjs/loader:1228\n"
        "  throw err;\n"
        "\n"
        "Error: Cannot find module '/opt/agent/dist/index.js'\n"
        f"  token {SECRET} key sk-ant-api03-abcdefghijklmnopqrstuvwx\n"
        "\x1b[31mred\x1b[0m \u202eevil\n"
    )
    async with _start_up_failure(stderr) as run:
        result = await run.result()
    assert result.diagnostic == (
        "Subagent failure (provider: probe; stage: initialize; category: process-exit; exit code: 1)"
    )
    words = _record(result).words
    assert words.stderr == (
        "node:internal/modules/cjs/loader:1228",
        "  throw err;",
        "Error: Cannot find module '/opt/agent/dist/index.js'",
        "  token *** key sk-***",
        "\\x1b[31mred\\x1b[0m \\u202eevil",  # escape sequences and bidi controls kept inert
    )
    assert words.lines()[:2] == [WORDS_HEAD, "  stderr (last 5 lines):"]
    assert "Cannot find module" not in _model_sees(result) and "Cannot find module" not in str(result.diagnostic)


async def test_only_the_last_lines_of_a_long_stderr_are_kept() -> None:
    noise = "".join(f"line {n:04} " + "x" * 300 + "\n" for n in range(400))  # 120 KiB: past the 64 KiB ring
    async with _start_up_failure(noise + "the reason at the end\n") as run:
        result = await run.result()
    tail = _record(result).words.stderr
    assert tail[-1] == "the reason at the end"
    assert len(tail) <= STDERR_TAIL_LINES and sum(len(line.encode()) + 1 for line in tail) <= STDERR_TAIL_BYTES
    assert tail[0].startswith("line ") and tail[0] == f"line {399 - len(tail) + 2:04} " + "x" * 300


# -- every failure leaves a record, exception or not -----------------------------------------------------


async def test_a_timeout_without_any_exception_still_leaves_a_record(tmp_path: Path) -> None:
    agent = str(Path(acp.__file__).parents[2] / "repl" / "demo" / "acp_agent.py")
    provider = acp.from_config("probe", {"command": [sys.executable, agent], "startup_timeout": 2,
                                         "env": {"ACP_FAKE_HANG": "initialize", "ACP_FAKE_STDERR_TEXT": "stuck"},
                                         "eof_grace": 0.5, "term_grace": 0.5})  # fmt: skip
    result = await run_once(provider, request(tmp_path))
    assert result.diagnostic == "Subagent failure (provider: probe; stage: initialize; category: timeout)"
    record = _record(result)
    assert [link.type_name for link in chain_links(record)] == ["dsh.agent_loop.subagent.result.SubagentFailure"]
    # At start-up (before the agent imports its SDK), and when initialize arrived, if it did within the 2 s
    # (a loaded machine can spend them importing the SDK): the words before the timeout, whichever they are.
    assert record.words.stderr in (("stuck",), ("stuck", "stuck"))


async def test_a_stop_reason_without_a_failure_line_leaves_a_record_named_by_its_headline(tmp_path: Path) -> None:
    result = await run_once(fake_codex("partial_then_context"), request(tmp_path))
    assert result.stop_reason == "max-tokens"
    assert _record(result).code == "SUBAGENT"


async def test_success_and_a_local_cancel_leave_no_record(tmp_path: Path) -> None:
    assert (await run_once(fake_codex("success"), request(tmp_path))).cause is None
    async with fake_codex("hang_turn").run(request(tmp_path)) as run:
        assert isinstance(run, CodexRun)
        await run.turn_started.wait()
        await run.cancel()
        assert (await run.result()).cause is None


# -- Codex Ctrl-C: settles at once even when the interrupt is never confirmed -----------------------------


async def test_a_cancelled_codex_run_does_not_wait_for_an_interrupt_that_never_comes(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    # interrupt_grace is the turn deadline's wait; a local cancel must not use it (30 s would outlast the bound).
    provider = fake_codex("deaf_to_interrupt", interrupt_grace=30, env={"FAKE_CODEX_RECORD": str(record)})
    async with provider.run(request(tmp_path)) as run:
        assert isinstance(run, CodexRun)
        await run.turn_started.wait()
        with anyio.fail_after(10):
            await run.dispose()  # what the turn's cancel scope does: returns once the app-server is gone
    assert (await run.result()).stop_reason == "aborted"
    assert run.teardown is not None and run.teardown.tier == "eof"  # stdin closed, then it exited: no signal
    sent = [frame.get("method") for frame in json.loads(record.read_text())["received"]]
    assert sent[-1] == "turn/interrupt"


# -- the bounds and the mask, for any input ----------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), max_size=6000)


@settings(max_examples=200, deadline=None)
@given(before=_TEXT, after=_TEXT, data=st.one_of(st.none(), st.integers(), _TEXT, st.lists(_TEXT, max_size=3)))
def test_words_are_masked_bounded_and_inert_for_any_input(before: str, after: str, data: object) -> None:
    words = AgentWords.gather(
        (("error message", before + SECRET + after), ("error data", data)),
        before + "\n" + SECRET + "\n" + after,
        Redactor([SECRET]),
    )
    for _label, text in words.said:
        assert len(text.encode("utf-8")) <= WORDS_LIMIT_BYTES
    assert len(words.stderr) <= STDERR_TAIL_LINES
    assert sum(len(line.encode("utf-8")) + 1 for line in words.stderr) <= STDERR_TAIL_BYTES
    for line in words.lines():
        assert SECRET not in line
        assert not any((ord(c) < 0x20 and c != "\t") or 0x7F <= ord(c) <= 0x9F or c in BIDI for c in line)


async def test_a_stderr_ring_that_was_cut_never_shows_its_first_fragment() -> None:
    from dsh.agent_loop.process import ManagedProcess

    code = "import sys; sys.stderr.write('sk-secret-start-ABCDEFGH\\nkept line\\n' + 'y' * 10)"
    async with ManagedProcess([sys.executable, "-c", code], stderr_limit=32) as child:
        await child.wait_exit()
    assert child.stderr_tail().startswith("rt-ABCDEFGH")  # where the ring begins: inside the first line
    assert child.stderr_lines() == "kept line\n" + "y" * 10


async def test_a_failed_background_job_keeps_the_same_record(tmp_path: Path) -> None:
    from dsh.agent_loop.subagent.jobs import JobManager

    async with JobManager() as jobs:
        job = await jobs.spawn(fake_codex("fail", error_info="unauthorized"), request(tmp_path))
        await job.wait()
    assert job.status == "failed" and job.result is not None
    record = _record(job.result)
    assert ("error message", f"upstream said: {STDERR_CANARY}") in record.words.said
