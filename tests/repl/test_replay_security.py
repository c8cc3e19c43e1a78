"""Hostile paths, servers and uploads against `--record`, `--replay`, `dsh replay-server` and `dsh sessions show`.

Each case runs the real `dsh` (docs/record-replay.md, docs/reliability.md "Attacks on traces and logs"):
a `--record` path that is a FIFO, a device, a folder or a link is refused with one line before anything
is opened; a server that spells the key with JSON escapes finds it masked in the trace; the replay
server answers an upload over its limit 413 without keeping it; a record too long to show is one line.
The memory bounds themselves are measured in tests/reliability/test_attack_traces.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm.codes import ErrorCode
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.loopback.replay_server import (
    MAX_REQUEST_BODY,
    SUMMARIES_KEPT,
    ReplayServer,
    RequestSummary,
    load_trace,
)
from dsh.llm.redact import MASK
from dsh.llm.wire_trace import TraceFileError, TraceWriter
from dsh.repl.sessions import SHOW_RECORD_LIMIT
from fixtures.big_files import TRACE_ANSWER, write_session, write_trace
from tests import canaries
from tests.repl.test_cli import REPO, base_env, dsh, write_config


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    (tmp_path / "config").mkdir()
    return tmp_path


# --- --record: only a regular file ------------------------------------------------------------


def _not_a_file(home: Path, kind: str) -> tuple[Path, str]:
    """A path of ``kind`` and how the refusal names it."""
    path = home / kind
    if kind == "fifo":
        os.mkfifo(path)  # nobody ever opens its other end: an open for writing would wait forever
        return path, "a FIFO"
    if kind == "folder":
        path.mkdir()
        return path, "a directory"
    if kind == "link":
        (home / "target.txt").write_text("keep me\n")
        path.symlink_to(home / "target.txt")
        return path, "a symbolic link"
    return Path("/dev/null"), "a character device"


@pytest.mark.parametrize("kind", ["fifo", "folder", "link", "device"])
@pytest.mark.parametrize("mode", ["print", "piped"])
def test_record_refuses_a_path_that_is_not_a_regular_file_with_one_line(home: Path, kind: str, mode: str) -> None:
    path, what = _not_a_file(home, kind)
    args = ["-p", "hi"] if mode == "print" else []
    # Before: the FIFO blocked start-up (and Ctrl-C) until the timeout killed it; a link was an errno line.
    result = dsh(home, *args, "--record", str(path), stdin="hi\n", DEEPSEEK_API_KEY=canaries.API_KEY,
                 DEEPSEEK_BASE_URL="http://127.0.0.1:1")
    start = "failed to start" if mode == "print" else "main agent failed to start; dropped queued stdin (1 line(s))"
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"dsh: {start}: record file {path} cannot be written: it is {what}, not a regular file\n")
    if kind == "link":
        assert (home / "target.txt").read_text() == "keep me\n"


def test_the_trace_writer_itself_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TraceFileError) as refused:
        TraceWriter(fifo, secrets=(canaries.API_KEY,))
    assert (refused.value.code, refused.value.message) == (
        ErrorCode.CONFIG, f"record file {fifo} cannot be written: it is a FIFO, not a regular file")


# --- the key, spelled with JSON escapes, in a trace ------------------------------------------------


def _escaped(text: str, *, upper: bool = False, backslashes: int = 1) -> str:
    return "".join("\\" * backslashes + (f"u{ord(c):04X}" if upper else f"u{ord(c):04x}") for c in text)


def _json_unescaped(text: str) -> str:
    """``text`` with JSON escapes decoded, again and again (JSON held in JSON strings), as a reader would."""
    for _ in range(6):
        text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = text.replace("\\/", "/").replace('\\"', '"').replace("\\\\", "\\")
    return text


def test_a_server_that_spells_the_key_with_json_escapes_finds_it_masked_in_the_trace(home: Path) -> None:
    key = canaries.API_KEY
    spellings = [
        _escaped(key[:3]) + key[3:],  # \u0073\u006b\u002d + the rest
        key[:-4] + _escaped(key[-4:], upper=True),  # upper-case hex at the end
        _escaped(key, backslashes=2),  # one level down: JSON held in a JSON string
    ]
    body = ('{"error":{"message":"bad key ' + " / ".join(spellings) +
            '","type":"invalid_request_error","param":null,"code":"x"}}')
    trace = home / "trace.jsonl"
    write_config(home, "max_retries = 0\n")
    with FaultServer(default=Behaviour("http_400", body=body, content_type="application/json",
                                       retry_after=spellings[1])) as server:
        live = dsh(home, "-p", "hi", "--record", str(trace), DEEPSEEK_API_KEY=key, DEEPSEEK_BASE_URL=server.url)
    assert live.returncode == 1, live.stderr
    text = trace.read_text()
    assert key not in _json_unescaped(text)
    records = [json.loads(line) for line in text.splitlines()]
    response = next(r for r in records if r["type"] == "response")
    assert ["retry-after", MASK] in response["headers"]
    data = "".join(r["text"] for r in records if r["type"] == "data")
    assert json.loads(data)["error"]["message"] == f"bad key {MASK} / {MASK} / {MASK}"


_SECRET_CHARS = st.characters(blacklist_categories=("Cs", "Cc"))


def _spelled(secret: str, choices: list[int]) -> str:
    """``secret`` with each character as JSON may spell it, picked by ``choices``."""
    out = []
    for char, choice in zip(secret, choices, strict=False):
        code = ord(char)
        if choice % 4 == 0 or (choice % 4 == 3 and char not in '/"\\'):
            out.append(json.dumps(char)[1:-1] if char in '"\\' else char)
        elif choice % 4 == 3:
            out.append("\\" + char)
        elif code > 0xFFFF:
            out.append(json.dumps(char, ensure_ascii=True)[1:-1])  # a surrogate pair
        else:
            out.append(f"\\u{code:04x}" if choice % 4 == 1 else f"\\u{code:04X}")
    return "".join(out)


@settings(max_examples=200, deadline=None)
@given(secret=st.text(_SECRET_CHARS, min_size=8, max_size=40),
       choices=st.lists(st.integers(0, 3), min_size=40, max_size=40),
       before=st.text("ab ,:", max_size=20), after=st.text("ab ,:", max_size=20))
def test_every_json_spelling_of_a_secret_is_masked(tmp_path_factory: pytest.TempPathFactory, secret: str,
                                                   choices: list[int], before: str, after: str) -> None:
    trace = TraceWriter(tmp_path_factory.mktemp("fuzz") / "t.jsonl", secrets=(secret,))
    try:
        spelled = _spelled(secret, choices)
        assert json.loads(f'"{spelled}"') == secret  # a real JSON spelling of it
        masked = trace.mask(f'{{"content":"{before}{spelled}{after}"}}')
    finally:
        trace.close()
    assert secret not in _json_unescaped(masked), masked
    assert MASK in masked


# --- dsh replay-server: an upload over the limit -----------------------------------------------------


@contextmanager
def replay_server(home: Path, trace: Path, launcher: tuple[str, ...] = ("-m", "dsh.repl"),
                  **env: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The real ``dsh replay-server TRACE --port 0``; yields the process and its URL, stops it with SIGINT."""
    child = subprocess.Popen([sys.executable, *launcher, "replay-server", str(trace), "--port", "0"], cwd=REPO,
                             env=base_env(home, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        banner = re.search(r" at (http://\S+) \(Ctrl-C stops\)", child.stdout.readline())
        assert banner, "no banner"
        yield child, banner.group(1)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
        child.wait(timeout=30)


def pieces(size: int, piece: int = 1 << 20) -> Iterator[bytes]:
    """``size`` bytes of a chat request's shape, a piece at a time (the test never holds the body)."""
    head = b'{"model":"m","messages":[{"role":"user","content":"'
    yield head
    left = size - len(head) - 4
    while left > 0:
        yield b"x" * min(piece, left)
        left -= piece
    yield b'"}]}'


def test_replay_server_answers_an_upload_over_its_limit_413_and_still_replays(home: Path) -> None:
    trace = home / "trace.jsonl"
    write_trace(trace, 0)
    size = MAX_REQUEST_BODY + 1
    with replay_server(home, trace) as (child, url):
        refused = httpx.post(url, content=pieces(size), headers={"content-length": str(size)}, timeout=120)
        assert refused.status_code == 413
        assert refused.headers["connection"] == "close"
        assert refused.json() == {"error": {
            "message": f"request body of {size} bytes is over this server's limit of 33554432 bytes (32 MiB)",
            "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}
        # The refused upload took no recorded exchange: the next request gets the first one.
        answered = httpx.post(url, json={"model": "m", "messages": []}, timeout=30)
        assert answered.status_code == 200 and TRACE_ANSWER in answered.text
    assert child.returncode == 0
    assert child.communicate()[0] == "dsh replay-server: stopped after 1 request(s)\n"


def test_replay_server_cuts_a_chunked_upload_at_its_limit(home: Path) -> None:
    trace = home / "trace.jsonl"
    write_trace(trace, 0)
    with replay_server(home, trace) as (_, url):
        refused = httpx.post(url, content=pieces(MAX_REQUEST_BODY + (1 << 20)), timeout=120)  # chunked: no length
        assert refused.status_code == 413
        assert refused.json()["error"]["message"] == (
            "request body is over this server's limit of 33554432 bytes (32 MiB)")


@pytest.mark.anyio
async def test_replay_server_keeps_a_summary_of_the_last_requests_never_their_bodies(tmp_path: Path) -> None:
    trace_path = tmp_path / "trace.jsonl"
    write_trace(trace_path, 0)
    trace = load_trace(str(trace_path))
    body = json.dumps({"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "x" * 100_000}]})
    try:
        async with ReplayServer(trace) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert TRACE_ANSWER in (await client.post("/v1/chat/completions", content=body)).text
            digest = hashlib.sha256(body.encode()).hexdigest()
            assert server.summaries[0] == RequestSummary("POST", "/v1/chat/completions", len(body),
                                                         "deepseek-v4-flash", digest)
            for _ in range(SUMMARIES_KEPT):
                assert (await client.post("/chat/completions", content=b"{}")).status_code == 410
            assert len(server.summaries) == SUMMARIES_KEPT  # the first one is gone
            assert server.summaries[0] == RequestSummary(
                "POST", "/chat/completions", 2, None, hashlib.sha256(b"{}").hexdigest())
            assert server.requests == []
    finally:
        trace.close()


@pytest.mark.parametrize("command", [["--replay"], ["replay-server"]])
def test_a_replay_file_that_is_a_fifo_is_refused_at_once(home: Path, command: list[str]) -> None:
    fifo = home / "trace.jsonl"
    os.mkfifo(fifo)
    args = [*command, str(fifo)] if command == ["replay-server"] else ["-p", "hi", *command, str(fifo)]
    result = dsh(home, *args)
    assert (result.returncode, result.stderr) == (
        2, f"dsh: failed to start: replay file {fifo} cannot be read: it is a FIFO, not a regular file\n")


# --- dsh sessions show: a record too long to show -------------------------------------------------


def test_sessions_show_skips_a_record_over_its_limit_with_one_line(home: Path) -> None:
    sessions = home / "state" / "dsh" / "sessions"
    sessions.mkdir(parents=True)
    log = sessions / "20260101-000000-a1b2c3.jsonl"
    write_session(log, SHOW_RECORD_LIMIT + 1)
    size_mb = len(log.read_bytes().splitlines()[5]) / 1e6
    result = dsh(home, "sessions", "show", log.stem)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"session {log.stem} · project / · created 2026-01-01T00:00:00.000Z",
        "> read it",
        "[main turn 1] ",
        "  [tool call] read_file({})",
        f"(tool/result record of {size_mb:.1f} MB not shown)",
        "It is long.",
    ]
