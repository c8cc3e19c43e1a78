"""The `dsh` command as a user runs it: -p exit codes, piped stdin, startup failures, --version."""

from __future__ import annotations

import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop import events as ev
from dsh.agent_loop.session_log import SessionLog
from dsh.llm._version import DISTRIBUTION
from dsh.llm.loopback.fault_server import FaultServer, closed_port
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-cliTestKey00000000000000000000"


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default="text").start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config").mkdir()
    return tmp_path


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


def dsh(
    home: Path, *args: str, stdin: str | None = None, timeout: float = 30, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh.repl", *args],
        cwd=REPO,
        env=base_env(home, **env),
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_config(home: Path, text: str) -> None:
    path = home / "config" / "dsh" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# --- --help of every subcommand ------------------------------------------------------------------------


@pytest.mark.parametrize("subcommand", ["doctor", "sessions", "serve", "replay-server"])
def test_every_subcommand_answers_help_with_its_usage_and_exit_0(home: Path, subcommand: str) -> None:
    for flag in ("--help", "-h"):
        result = dsh(home, subcommand, flag)
        assert (result.returncode, result.stderr) == (0, ""), (flag, result)
        assert result.stdout.startswith(f"usage: dsh {subcommand}"), result.stdout


# --- --version --------------------------------------------------------------------------------------


def test_version_is_fast_and_imports_nothing_heavy(home: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dsh.repl", "--version"],
        cwd=REPO, env=base_env(home), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0 and result.stdout == "dsh 0.1.0\n"
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    for heavy in ("prompt_toolkit", "httpx", "anyio", "dsh.llm.deepseek", "dsh.agent_loop", "argparse"):
        assert heavy not in imported, heavy
    # Only the standard library's cheap corner and dsh's own entry modules: nothing a user waits for.
    foreign = {
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith("__editable__")
    }  # (an editable install's path finder is pip's, not ours)
    ours = {"dsh", "dsh.repl", "dsh.repl.cli", "dsh.repl.__main__", "dsh.llm", "dsh.llm._version", "dsh.llm._exports"}
    # ("imported package" is importtime's own header)
    assert foreign <= ours | {"_distutils_hack", "sitecustomize", "usercustomize", "imported package"}, foreign
    assert not {"typing", "asyncio", "ssl", "tomllib", "json", "socket"} & imported


def test_version_is_defined_once() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    import dsh.llm
    import dsh.repl

    assert dsh.repl.__version__ is dsh.llm.__version__ == importlib.metadata.version(DISTRIBUTION)
    assert pyproject["project"]["name"] == DISTRIBUTION  # the name every install line names


# --- -p exit codes --------------------------------------------------------------------------------------


DEMO_TEXT = "Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1.\n"


@pytest.mark.parametrize(
    ("scenario", "status", "out", "err"),
    [
        ("text", 0, DEMO_TEXT, ""),
        ("http-400", 1, "", "[turn failed INVALID_REQUEST] The `reasoning_content` in the thinking mode "
                            "must be passed back to the API.\n"),
        ("prompt-rejected", 3, "", "[turn rejected] prompt contains what looks like a secret (sk-…); not sent\n"),
        ("max-tokens", 4, "The answer is cut here\n", "[turn hit the output-token limit]\n"),
    ],
)
def test_print_mode_exit_codes(home: Path, scenario: str, status: int, out: str, err: str) -> None:
    # -p: the answer alone on stdout, the turn-end line on stderr; no "[main turn 1] " anywhere.
    result = dsh(home, "--demo", "--scenario", scenario, "-p", "hello")
    assert (result.returncode, result.stdout, result.stderr) == (status, out, err)


def _turn_started(home: Path) -> bool:
    return any('"step/start"' in path.read_text() for path in (home / "state").rglob("*.jsonl"))


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_print_mode_aborted_by_a_signal_exits_128_plus_its_number(home: Path, signum: int, status: int) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "dsh.repl", "--demo", "--scenario", "stall", "-p", "wait"],
        cwd=REPO, env=base_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _turn_started(home), 20, "the turn to start")  # its signal watch came before it
        process.send_signal(signum)
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == status
    assert out == "" and err == "[turn aborted] cancelled\n"


def test_print_mode_against_a_configured_endpoint(home: Path, server: FaultServer) -> None:
    result = dsh(home, "-p", "hello", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("Hello! How can I help you today?\n", "")


def test_refused_endpoint_prints_the_exact_transport_line(home: Path) -> None:
    write_config(home, "max_retries = 0\n")
    with closed_port() as port:
        result = dsh(home, "-p", "hello", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"[turn failed TRANSPORT] request to the endpoint at http://127.0.0.1:{port} failed: "
        f"All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', {port})\n"
        f"  fix: nothing is listening at 127.0.0.1:{port} — check DEEPSEEK_BASE_URL (environment)\n"
    )


def test_the_api_key_never_reaches_the_output(home: Path, server: FaultServer) -> None:
    server.push("http_401")
    result = dsh(home, "-p", f"echo {KEY[:8]}", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
    assert result.returncode == 1
    assert KEY not in result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines()[1] == "  fix: the API key was refused — check DEEPSEEK_API_KEY (environment)"


# --- -p for scripts: stdout carries the answer, stderr the rest; stdin prompts; JSON formats ----------------


def test_print_mode_puts_reasoning_and_tool_lines_on_stderr(home: Path) -> None:
    result = dsh(home, "--demo", "--scenario", "tool-call", "-p", "look around")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "That was a real tool round trip: the model asked for list_dir, dsh ran it, and the result went back "
        "in the next request.\n"
    )
    lines = result.stderr.splitlines()
    assert lines[:3] == ["Let me look at the working directory.", '  [tool call] list_dir({"path": "."})',
                         "  [tool result] .ci/"]
    assert "\x1b" not in result.stderr  # stderr is no terminal: no styling


def test_print_mode_retries_go_to_stderr(home: Path) -> None:
    result = dsh(home, "--demo", "--scenario", "retry-then-success", "-p", "hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "This answer came on the second attempt.\n"
    assert result.stderr == "[retry 1/5 in 0.1s] SERVER: Server Overloaded, please try again later\n"


@pytest.mark.parametrize("args", [("-p", "-"), ("-p",), ("--print",)])
def test_print_mode_reads_the_prompt_from_piped_stdin(home: Path, server: FaultServer, args: tuple[str, ...]) -> None:
    result = dsh(home, *args, stdin="summarise this\nsecond line\n", DEEPSEEK_API_KEY=KEY,
                 DEEPSEEK_BASE_URL=server.url)
    assert (result.returncode, result.stdout, result.stderr) == (0, "Hello! How can I help you today?\n", "")
    assert server.requests[-1].json["messages"][-1] == {"role": "user", "content": "summarise this\nsecond line"}


@pytest.mark.parametrize(
    ("stdin", "error"),
    [("", "the prompt on stdin is empty"), (" \n\t\n", "the prompt on stdin is empty"),
     ("x" * ((1 << 20) + 1), "the prompt on stdin is longer than 1 MiB")],
)
def test_print_mode_refuses_an_empty_or_oversized_stdin_prompt(home: Path, stdin: str, error: str) -> None:
    result = dsh(home, "--demo", "-p", "-", stdin=stdin)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"dsh: failed to start: {error}\n")


def test_output_format_needs_print_mode(home: Path) -> None:
    result = dsh(home, "--demo", "--output-format", "json")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == "dsh: error: --output-format works only with -p/--print"
    assert dsh(home, "--demo", "-p", "x", "--output-format", "yaml").returncode == 2


def _session_records(home: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    import json

    (path,) = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    header, *records = (json.loads(line) for line in path.read_text().splitlines())
    return header, records


def test_output_format_json_is_one_object_at_the_end(home: Path) -> None:
    import json

    result = dsh(home, "--demo", "-p", "hello", "--output-format", "json")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.count("\n") == 1
    answer = json.loads(result.stdout)
    header, records = _session_records(home)
    (message,) = [r["data"] for r in records if r["type"] == "assistant/message"]
    usage = message["usage"]
    assert answer["type"] == "result" and answer["session_id"] == header["id"]
    assert answer["reason"] == {"kind": "completed", "code": None, "message": None}
    assert answer["exit_code"] == 0
    assert answer["text"] == DEMO_TEXT.removesuffix("\n")
    assert answer["usage"] == {"requests": 1, "prompt_tokens": usage["prompt_tokens"],
                               "cached_tokens": usage["prompt_cache_hit_tokens"],
                               "output_tokens": usage["completion_tokens"], "reasoning_tokens": 0}
    assert isinstance(answer["cost_usd"], float) and answer["cost_usd"] > 0
    assert 0 < answer["duration_s"] < 30


def test_output_format_json_carries_the_failure_code_and_message(home: Path, server: FaultServer) -> None:
    import json

    server.push("http_401")
    result = dsh(home, "-p", "hi", "--output-format", "json", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
    assert result.returncode == 1
    answer = json.loads(result.stdout)
    assert answer["exit_code"] == 1 and answer["text"] == ""
    assert answer["reason"]["kind"] == "error" and answer["reason"]["code"] == "AUTH"
    assert answer["reason"]["message"] == "Authentication Fails, Your api key: ****abcd is invalid"
    assert answer["usage"]["requests"] == 0
    # stderr still has the human lines: the failure and its fix.
    assert result.stderr.splitlines()[0] == "[turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid"
    assert KEY not in result.stdout + result.stderr


def test_output_format_stream_json_is_the_session_log_vocabulary(home: Path) -> None:
    import json

    result = dsh(home, "--demo", "--scenario", "tool-call", "-p", "hi", "--output-format", "stream-json")
    assert result.returncode == 0, result.stderr
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    header, records = _session_records(home)
    assert objects[0] == header  # the log's own header line first
    events = objects[1:]
    assert events[0] == {"type": "turn/start", "data": {"turn": 1, "prompt": "hi"}}
    assert events[-1] == {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}
    # Every durable event is exactly the session log's record; live ones (deltas) come in between.
    assert [e for e in events if e["type"] not in ("text/delta", "reasoning/delta", "stream/keepalive")] == [
        {"type": r["type"], "data": r["data"]} for r in records
    ]
    text = "".join(e["data"]["text"] for e in events if e["type"] == "text/delta")
    assert text.startswith("That was a real tool round trip")
    assert {e["type"] for e in events} >= {"step/start", "reasoning/delta", "tool/call", "tool/result",
                                           "assistant/message"}


def test_output_format_stream_json_ends_with_the_failure(home: Path) -> None:
    import json

    result = dsh(home, "--demo", "--scenario", "http-402", "-p", "hi", "--output-format", "stream-json")
    assert result.returncode == 1
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["type"] == "turn/end"
    assert (last["data"]["reason"]["code"], last["data"]["reason"]["message"]) == ("QUOTA", "Insufficient Balance")


# --- piped stdin ---------------------------------------------------------------------------------------------


def test_three_piped_lines_run_three_turns(home: Path, server: FaultServer) -> None:
    result = dsh(home, stdin="one\ntwo\n\nthree\n", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"[main turn {n}] Hello! How can I help you today?" for n in (1, 2, 3)]


def test_a_piped_consumer_sees_each_turn_before_it_sends_the_next_line(home: Path, server: FaultServer) -> None:
    # A program driving dsh through pipes waits for a turn's line before it writes the next prompt.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh.repl"], cwd=REPO,
        env=base_env(home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for turn in (1, 2):
            proc.stdin.write(b"hello\n")
            proc.stdin.flush()
            assert _read_line_within(proc.stdout, 20) == f"[main turn {turn}] Hello! How can I help you today?\n"
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()


def _read_line_within(stream: Any, seconds: float) -> str:
    import select

    line = b""
    deadline = time.monotonic() + seconds
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"no complete line within {seconds}s (got {line!r})")
        byte = os.read(stream.fileno(), 1)
        if not byte:
            raise AssertionError(f"stdout closed after {line!r}")
        line += byte
    return line.decode()


class _RecordingStream:
    def __init__(self, fail: bool = False) -> None:
        self.writes: list[str] = []
        self.flushes = 0
        self.fail = fail

    def write(self, text: str) -> None:
        if self.fail:
            raise BrokenPipeError
        self.writes.append(text)

    def flush(self) -> None:
        self.flushes += 1

    def fileno(self) -> int:
        raise ValueError("no descriptor")


@pytest.mark.anyio
async def test_the_stream_sink_writes_once_per_event_loop_iteration_in_order() -> None:
    import anyio

    from dsh.repl.frontend import StreamSink

    stream = _RecordingStream()
    sink = StreamSink(stream)
    for n in range(1000):  # one network read's worth of deltas
        sink.write(f"{n} ")
    assert stream.writes == []
    await anyio.sleep(0)
    assert stream.writes == ["".join(f"{n} " for n in range(1000))] and stream.flushes == 1
    sink.write("end\n")
    sink.flush()  # at a turn's end: at once, not at the next iteration
    assert stream.writes[-1] == "end\n" and stream.flushes == 2
    await anyio.sleep(0)
    assert stream.flushes == 2  # the scheduled flush found nothing left


def test_the_stream_sink_outside_an_event_loop_writes_at_once_and_a_dead_pipe_silences() -> None:
    from dsh.repl.frontend import StreamSink

    stream = _RecordingStream()
    sink = StreamSink(stream)
    sink.write("a\n")
    assert stream.writes == ["a\n"] and stream.flushes == 1
    dead = StreamSink(_RecordingStream(fail=True))
    dead.write("lost\n")
    assert dead.broken
    dead.write("more\n")  # silently dropped, no exception
    dead.flush()


def test_eof_waits_for_the_running_turn(home: Path) -> None:
    # The last line has no newline and EOF follows at once; the slow stream still finishes.
    result = dsh(home, "--demo", stdin="/scenario text\nhello")
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == (
        "[main turn 1] Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1."
    )


def test_eof_waits_for_background_jobs_and_shows_their_notice(home: Path) -> None:
    result = dsh(home, "--demo", stdin="/scenario dsh-background\nstart a job\n", timeout=60)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    notice = next(line for line in lines if line.startswith("[job] "))
    # written for the user: what ended, how, after how long, and where its output is
    assert re.fullmatch(
        r"\[job\] subagent-1 \(dsh-exit-later\) failed: Subagent failure \(provider: "
        r"dsh-exit-later; stage: session-run; category: transport; exit code: 9\) · /job subagent-1 shows its output",
        notice,
    ), notice
    # The idle owner is woken for one more turn that reads the notice.
    assert lines[lines.index(notice) + 1].startswith("[main turn 2] ")


def test_piped_failure_then_success_and_exit_0(home: Path) -> None:
    result = dsh(home, "--demo", stdin="/scenario stream-closed\nfirst\n/scenario text\nsecond\n")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert "[turn failed STREAM_CLOSED] SSE stream ended without [DONE]" in lines
    assert lines[-1].startswith("[main turn 2] Hello from the dsh demo!")


def test_reasoning_is_plain_when_piped(home: Path) -> None:
    result = dsh(home, "--demo", stdin="/scenario reasoning\nthink\n")
    assert "\x1b" not in result.stdout
    assert result.stdout.splitlines()[-2:] == [
        "[main turn 1] The user wants to see reasoning. It streams first, dim on a terminal.",
        "And this is the answer, in normal type.",
    ]
    # -p: the reasoning on stderr, the answer alone on stdout.
    printed = dsh(home, "--demo", "--scenario", "reasoning", "-p", "think")
    assert printed.stdout == "And this is the answer, in normal type.\n"
    assert printed.stderr == "The user wants to see reasoning. It streams first, dim on a terminal.\n"


def test_piped_exit_command(home: Path) -> None:
    result = dsh(home, "--demo", stdin="/exit\nnever sent\n")
    assert result.returncode == 0 and result.stdout == ""


# --- startup failures ----------------------------------------------------------------------------------------


def test_missing_key_print_mode(home: Path) -> None:
    result = dsh(home, "-p", "hello")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "dsh: failed to start: no DeepSeek API key: set DEEPSEEK_API_KEY "
        f"(or api_key in {home}/config/dsh/config.toml), or try `dsh --demo`\n"
    )


def test_missing_key_for_another_endpoint_names_that_endpoint_not_deepseek(home: Path) -> None:
    result = dsh(home, "--base-url", "http://127.0.0.1:4000/v1", "-p", "hello")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "dsh: failed to start: no API key for the endpoint at 127.0.0.1:4000: set DEEPSEEK_API_KEY "
        f"(or api_key in {home}/config/dsh/config.toml), or try `dsh --demo`\n"
    )


def test_missing_key_with_queued_stdin(home: Path) -> None:
    result = dsh(home, stdin="first\nsecond\n")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "dsh: main agent failed to start; dropped queued stdin (2 line(s)): no DeepSeek API key: set "
        f"DEEPSEEK_API_KEY (or api_key in {home}/config/dsh/config.toml), or try `dsh --demo`\n"
    )


def test_missing_key_piped_without_input_uses_the_plain_form(home: Path) -> None:
    result = dsh(home, stdin="")
    assert result.returncode == 2
    assert result.stderr.startswith("dsh: failed to start: no DeepSeek API key")


def test_bad_config_file_exits_2_with_one_line(home: Path) -> None:
    write_config(home, "max_tokens = 'lots'\n")
    result = dsh(home, "-p", "hello", DEEPSEEK_API_KEY=KEY)
    assert result.returncode == 2
    assert result.stderr == (
        f"dsh: failed to start: config file {home}/config/dsh/config.toml: max_tokens must be a positive "
        "integer, got 'lots'\n"
    )


def test_usage_errors_exit_2(home: Path) -> None:
    assert dsh(home, "--no-such-flag").returncode == 2
    result = dsh(home, "--demo", "--scenario", "nope", "-p", "x")
    assert result.returncode == 2
    assert result.stderr.startswith("dsh: failed to start: no demo scenario 'nope' (known: text, reasoning, ")


def test_unusable_state_dir_is_a_startup_failure_not_a_traceback(home: Path) -> None:
    blocker = home / "blocker"
    blocker.write_text("a file where a directory should be")
    result = dsh(home, "-p", "hello", DEEPSEEK_API_KEY=KEY, XDG_STATE_HOME=str(blocker))
    assert result.returncode == 1
    assert result.stderr.startswith(f"dsh: failed to start: cannot create the session directory {blocker}/dsh/")
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_resume_unknown_session(home: Path) -> None:
    result = dsh(home, "--resume", "nosuch", "-p", "x", DEEPSEEK_API_KEY=KEY)
    assert result.returncode == 1
    assert result.stderr == f"dsh: failed to start: no session 'nosuch' in {home}/state/dsh/sessions\n"


def test_startup_failure_masks_the_key(home: Path) -> None:
    result = dsh(home, "-p", "x", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=f"ftp://u:{KEY}@h/")
    assert result.returncode == 2
    assert KEY not in result.stderr and "DEEPSEEK_BASE_URL must be an http:// or https:// URL" in result.stderr


# --- resume reports the repaired turn first, in every mode ----------------------------------------------------


def open_turn_session(home: Path) -> str:
    log = SessionLog.create(root=home / "state" / "dsh" / "sessions", cwd=str(REPO))  # dsh() runs there
    log.append(ev.TurnStart(1, "before the crash"))
    log.append(ev.StepStart(1, 1))
    ident = log.id
    log.close()
    return ident


def test_resume_print_mode_reports_interrupted_turn(home: Path) -> None:
    ident = open_turn_session(home)
    result = dsh(home, "--demo", "--resume", ident, "-p", "after")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "[main turn 1] [turn interrupted by a previous process exit]\n"
    assert result.stdout == DEMO_TEXT


def test_resume_piped_reports_interrupted_turn(home: Path) -> None:
    ident = open_turn_session(home)
    result = dsh(home, "--demo", "--resume", "last", stdin="after\n")
    assert result.stdout.splitlines()[:4] == [
        "[main turn 1] [turn interrupted by a previous process exit]",
        f"resumed session {ident} (1 turn)",
        "  turn 1 > before the crash",
        "           (turn interrupted by a previous process exit)",
    ]
    again = dsh(home, "--demo", "--resume", "last", stdin="")
    # repaired once: nothing interrupted to report the second time, only what was resumed
    assert again.stdout.splitlines()[0] == f"resumed session {ident} (2 turns)"
    assert "interrupted; /retry" not in again.stdout


# --- hostile characters: a lone surrogate never silences the output or poisons the session ----------------


def test_a_split_emoji_and_a_lone_surrogate_print_and_the_next_turn_still_works(
    home: Path, server: FaultServer
) -> None:
    server.push("surrogates", "text")
    result = dsh(home, stdin="first\nsecond\n", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[main turn 1] Smile \U0001f600, a lone \ufffd!",
        "[main turn 2] Hello! How can I help you today?",
    ]
    # The second request carries the first answer back, as valid UTF-8 with the replacement character.
    answer = {"role": "assistant", "content": "Smile \U0001f600, a lone \ufffd!"}
    assert server.requests[-1].json["messages"][-2] == answer


def test_a_character_the_output_cannot_encode_is_replaced_not_treated_as_a_closed_pipe(
    home: Path, server: FaultServer
) -> None:
    server.push("surrogates")
    result = dsh(home, "-p", "hi", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url, PYTHONIOENCODING="ascii")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Smile ?, a lone ?!\n"


def test_a_prompt_whose_bytes_are_not_utf8_is_sent_with_the_replacement_character(
    home: Path, server: FaultServer
) -> None:
    result = subprocess.run(
        [sys.executable.encode(), b"-m", b"dsh.repl", b"-p", b"caf\xe9"], cwd=REPO, capture_output=True,
        env=base_env(home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url), timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert server.requests[-1].json["messages"][-1] == {"role": "user", "content": "caf\ufffd"}


# --- private files: dsh.log 0600, a readable config holding api_key (issue 13 §7) ---------------------


def test_dsh_log_is_created_0600_and_an_existing_0644_one_is_tightened(home: Path) -> None:
    log = home / "state" / "dsh" / "dsh.log"
    result = dsh(home, "--demo", "-p", "hello")
    assert result.returncode == 0, result.stderr
    assert log.stat().st_mode & 0o777 == 0o600
    log.chmod(0o644)
    assert dsh(home, "--demo", "-p", "hello").returncode == 0
    assert log.stat().st_mode & 0o777 == 0o600


def test_a_config_holding_api_key_that_others_can_read_gets_one_warning_line(home: Path) -> None:
    path = home / "config" / "dsh" / "config.toml"
    write_config(home, 'api_key = "sk-not-a-real-key-000"\n')
    path.chmod(0o644)
    result = dsh(home, "--demo", "-p", "hello")
    warning = f"dsh: warning: {path} holds api_key and is readable by others; chmod 600 {path}"
    assert [line for line in result.stderr.splitlines() if line.startswith("dsh: warning:")] == [warning]
    assert "sk-not-a-real-key-000" not in result.stderr + result.stdout
    path.chmod(0o600)
    assert "dsh: warning:" not in dsh(home, "--demo", "-p", "hello").stderr


def test_resume_of_a_symlinked_log_fails_with_one_line_and_leaves_the_target_alone(home: Path) -> None:
    sessions = home / "state" / "dsh" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "zero.jsonl").symlink_to("/dev/zero")
    result = dsh(home, "--demo", "--resume", "zero", "-p", "hello", timeout=30)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"dsh: failed to start: session log {sessions / 'zero.jsonl'} is a symbolic link; dsh opens only regular files"
    )


def test_the_stream_sink_sanitizes_every_write_and_keeps_dsh_styles() -> None:
    from dsh.repl.frontend import StreamSink
    from dsh.repl.styles import DIM, RESET, styled

    stream = _RecordingStream()
    sink = StreamSink(stream)
    sink.write("a\x1b]52;c;eA==\x07\u202eb\n")
    sink.write(styled("dim\x1b[2J", "dim") + "\n")
    assert "".join(stream.writes) == f"a\u241b]52;c;eA==\u2407<U+202E>b\n{DIM}dim\u241b[2J{RESET}\n"


def test_load_warnings_on_resume_are_one_line_and_the_details_go_to_dsh_log(home: Path) -> None:
    assert dsh(home, "--demo", stdin="hello\n").returncode == 0
    (log,) = (home / "state" / "dsh" / "sessions").glob("*.jsonl")
    with open(log, "ab") as file:
        file.write(b"garbage\n" * 3 + b'{"type":"tur')
    result = dsh(home, "--demo", "--resume", "last", stdin="again\n")
    assert result.returncode == 0, result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "warning" in line]
    assert lines == [f"dsh: warning: session log {log}: ignored a torn last line (12 bytes); "
                     "skipped 3 unreadable records (details in dsh.log)"]
    details = (home / "state" / "dsh" / "dsh.log").read_text()
    assert f"skipped an unreadable record on line 6 of {log}" in details


def test_output_format_json_for_a_rejected_prompt_and_the_exit_code(home: Path) -> None:
    import json

    result = dsh(home, "--demo", "--scenario", "prompt-rejected", "-p", "hi", "--output-format", "json")
    assert result.returncode == 3
    reason = json.loads(result.stdout)["reason"]
    message = "prompt contains what looks like a secret (sk-…); not sent"
    assert reason == {"kind": "rejected", "reason": message, "code": None, "message": message}
    assert "sk-demoNotARealKey" not in result.stdout + result.stderr


def test_print_mode_streams_read_as_one_terminal_when_merged(home: Path) -> None:
    # `dsh -p x 2>&1`: the answer's unfinished line ends before the failure line is written after it.
    result = subprocess.run(
        [sys.executable, "-m", "dsh.repl", "--demo", "--scenario", "mid-stream-drop", "-p", "hi"], cwd=REPO,
        env=base_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=30,
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "Half an answer"
    assert lines[1].startswith("[turn failed TRANSPORT] stream from the endpoint at http://127.0.0.1:")


def test_stdin_from_dev_null_is_an_empty_piped_session(home: Path) -> None:
    # /dev/null cannot be watched by epoll (EPERM): it is read directly, like a regular file.
    with open(os.devnull, "rb") as null:
        result = subprocess.run([sys.executable, "-m", "dsh.repl", "--demo"], cwd=REPO, env=base_env(home),
                                stdin=null, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_stuck_worker_thread_does_not_keep_dsh_from_exiting() -> None:
    # A read abandoned by a cancelled turn can sit in a (non-daemon) worker thread; exit must not wait for it.
    code = (
        "import os, threading\n"
        "from dsh.repl.cli import finish\n"
        "r, w = os.pipe()\n"
        "threading.Thread(target=os.read, args=(r, 1)).start()\n"
        "print('flushed first', flush=False)\n"
        "finish(3)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout) == (3, "flushed first\n")
