"""``dsh -p`` against a server that answers as llama.cpp's ``llama-server`` does when the request does not fit its
context (issue 43): the turn-end line names llama.cpp, the fix line is /compact's, and with auto_compact on the
conversation is compacted and the request sent again. A real dsh process against the loopback fault server."""

from __future__ import annotations

import datetime
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.agent_loop.reasons import Failed
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.turn_end import turn_end_line

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-localServerTestKey000000000000000"
FIXTURE = json.loads((REPO / "tests" / "llm" / "fixtures" / "context_overflow.json").read_text(encoding="utf-8"))[0]
OVERFLOW = Behaviour("http_error", status=400, body=json.dumps(FIXTURE["body"]),
                     content_type=FIXTURE["headers"]["content-type"], server="llama.cpp")
SUMMARY = "The user asked for the files here; one was listed."


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="done"), server="llama.cpp").start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


def dsh(tmp_path: Path, server: FaultServer, *args: str, config: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "config" / "dsh").mkdir(parents=True, exist_ok=True)
    (tmp_path / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n" + config, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": server.url + "/v1"}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_llama_cpp_context_overflow_names_llama_cpp_and_what_can_help(tmp_path: Path, server: FaultServer) -> None:
    server.push(OVERFLOW)
    run = dsh(tmp_path, server, "-p", "hi")
    assert run.returncode == 1
    assert run.stderr.splitlines()[-2:] == [
        "[turn failed CONTEXT_WINDOW_EXCEEDED] llama.cpp: request (818 tokens) exceeds the available context size "
        "(256 tokens), try increasing it",
        "  fix: dsh's instructions and this prompt alone are too long for the model — shorten the prompt or give the "
        "model more context",
    ]


def test_auto_compact_runs_on_a_llama_cpp_context_overflow(tmp_path: Path, server: FaultServer) -> None:
    server.push(Behaviour("tool_call", name="list_dir", arguments={"path": "."}), OVERFLOW,
                Behaviour("text", text=SUMMARY), Behaviour("text", text="one file"))
    run = dsh(tmp_path, server, "-p", "what is here?", config="auto_compact = true\n")
    assert (run.returncode, run.stdout) == (0, "one file\n")
    assert run.stderr.splitlines()[-1] == (
        "[compacted] 3 messages replaced by a summary of 10 tokens; sending the request again")
    assert len(server.requests) == 4


def test_doctor_says_dshs_prefix_does_not_fit_llama_cpps_context(tmp_path: Path) -> None:
    srv = FaultServer(server="llama.cpp", props={"default_generation_settings": {"n_ctx": 256}},
                      models=("deepseek-v4-flash",)).start_in_thread()
    try:
        run = dsh(tmp_path, srv, "doctor", "--model", "deepseek-v4-flash")
    finally:
        srv.stop()
    lines = run.stdout.splitlines()
    line, fix = next((line, after) for line, after in itertools.pairwise(lines) if " context: " in line)
    assert run.returncode == 1
    assert line.startswith("✗ context: llama.cpp serves 256 tokens of context (GET /props n_ctx); dsh's fixed "
                           "prefix (system prompt and tool specs) alone is about ")
    prefix = int(line.rsplit("about ", 1)[1].removesuffix(" tokens"))
    assert prefix > 256
    assert fix == (f"  fix: give the server more than {prefix} tokens of context (dsh's fixed prefix) and room for "
                   "the conversation: --ctx-size (-c) of llama-server")


@pytest.mark.parametrize(("status", "name", "message", "shown"), [
    (401, "llama.cpp", "Invalid API Key", "[turn failed AUTH] llama.cpp: Invalid API Key"),
    (400, "DeepSeek", "Invalid 'messages'", "[turn failed INVALID_REQUEST] Invalid 'messages'"),
    (400, None, "Invalid 'messages'", "[turn failed INVALID_REQUEST] Invalid 'messages'"),
    (400, "llama.cpp", "llama.cpp API error (HTTP 400)",
     "[turn failed INVALID_REQUEST] llama.cpp API error (HTTP 400)"),
    (500, "LiteLLM", "litellm.InternalServerError: lost", "[turn failed SERVER] litellm.InternalServerError: lost"),
    (401, "LiteLLM", "Authentication Fails", "[turn failed AUTH] Authentication Fails"),  # relayed: not LiteLLM's
    (None, "llama.cpp", "stream idle timeout", "[turn failed TIMEOUT] stream idle timeout"),
])
def test_a_servers_own_text_is_named_as_every_failure_line_names_it(status, name, message, shown) -> None:
    code = {401: "AUTH", 400: "INVALID_REQUEST", 500: "SERVER", None: "TIMEOUT"}[status]
    reason = Failed(code=code, message=message, status=status, endpoint="http://127.0.0.1:8080/v1",
                    endpoint_name=name)
    assert turn_end_line(reason) == shown


def test_the_first_turn_says_when_dshs_prefix_does_not_fit_the_context_llama_cpp_serves(tmp_path: Path) -> None:
    srv = FaultServer(default=Behaviour("text", text="done"), server="llama.cpp",
                      props={"default_generation_settings": {"n_ctx": 256}}).start_in_thread()
    try:
        run = dsh(tmp_path, srv, "-p", "hi")
        second = dsh(tmp_path, srv, "--resume", "last", "-p", "again")  # a new process: the first turn again
    finally:
        srv.stop()
    assert run.returncode == 0, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if "tokens of context" in line]
    assert line.startswith("llama.cpp serves 256 tokens of context (GET /props n_ctx); dsh's fixed prefix (system "
                           "prompt and tool specs) alone is about ")
    assert line.endswith(" tokens: give it more with --ctx-size (-c) of llama-server")
    assert int(line.split("about ", 1)[1].split(" ", 1)[0]) > 256
    assert "tokens of context" in second.stderr


def test_a_context_the_prefix_fits_says_nothing_and_becomes_the_window_the_fill_counts() -> None:
    from dsh.agent_loop.session_usage import SessionUsage
    from dsh.llm import ToolSpec
    from dsh.llm.context_size import ServerContext
    from dsh.llm.events import Usage
    from tests.agent_loop.session_configs import StubConfig

    usage = SessionUsage(StubConfig())
    found = ServerContext(8192, "GET /props n_ctx", "llama.cpp")
    assert usage.saw_context(found, "You are dsh.", [ToolSpec("read_file", "Read a file.", {})]) is None
    usage.total.add(Usage(4000, 96, 4096, 0, 4000), "local-model", None, datetime.datetime.now(datetime.UTC))
    assert usage.context_fill() == 4096 / 8192
    usage.new_turn()
    assert usage.turn.window == 8192
