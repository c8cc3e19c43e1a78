"""The fault matrix: every transport fault and every fault-server behaviour, driven through the real REPL.

One :class:`Fault` per row. The same rows drive ``test_fault_matrix.py`` and print the README table
(``python tests/reliability/fault_matrix.py`` runs every row and prints the Markdown table of the lines
actually produced; see :func:`main`).

How a row runs (:func:`run_fault`), each user in its own HOME/XDG dirs:

* fault-server rows: one piped ``dsh`` with three lines -- a warm-up turn, the faulty turn, a turn that
  must succeed -- against a fault server scripted ``[text, <behaviour...>, text]``;
* endpoint rows (the endpoint itself is broken): one piped ``dsh`` with two lines, both of which must fail
  the same way (the loop carries on and numbers them), then ``dsh --resume last`` against a working
  server, whose turn must succeed and continue the numbering;
* ``-p`` rows: ``dsh -p`` with the exit status checked, then ``dsh --resume last -p`` that succeeds;
* the startup row (port 99999): exit 2, one ``dsh: failed to start:`` line, no session created.

Retries are off (``max_retries = 0`` in config.toml) except in the retry rows, so each fault costs one
request. Timeout rows use ``stream_idle_timeout = 2`` / ``first_token_timeout = 3`` so the message says
which limit fired; the others use generous limits so a loaded CI box cannot turn them into timeouts.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make the repo and this folder importable
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from dsh_harness import (
    Home,
    Run,
    config_text,
    dsh_command,
    dsh_env,
    make_home,
    read_log,
    run_dsh,
    save_transcript,
    turn_ends,
)

from dsh.llm.loopback import streams
from dsh.llm.loopback.fault_server import (
    Behaviour,
    FaultServer,
    FullBacklogListener,
    RecordedRequest,
    closed_port,
)
from dsh.repl.sanitize import sanitize
from tests.interrupted_child import run_interrupted
from tests.real_parts import isolated_resolver

HELLO = "Hello! How can I help you today?"
IDLE, FIRST = 2, 3  # timeout rows: stream_idle_timeout / first_token_timeout (seconds)
# An endpoint row's whole run (start-up, two failing turns, exit) must end within this: a turn that fails at
# once, against one that waits out a 30 s limit (connect, headers) twice. Start-up alone takes 5-7 s under
# two busy loops, so a tighter bound would time the machine.
ENDPOINT_FAST = 30
SSL = r"\(_ssl\.c:\d+\)"
# The rows' key comes from the environment, and the AUTH fix names where it came from.
FIX_AUTH = "  fix: the API key was refused — check DEEPSEEK_API_KEY (environment)"
# The fault server is not DeepSeek: its lines name it by address, and no fix sends anyone to DeepSeek's top-up page.
E = "the endpoint at 127.0.0.1:{port}"
FIX_QUOTA = (f"  fix: {E} refused the request for quota or credit — check the account of the key in "
             "DEEPSEEK_API_KEY (environment)")
FIX_RATE = "  fix: requests are arriving too fast; back off and try again shortly"
FIX_SERVER = f"  fix: {E} is having trouble; retry later"
FIX_CONTEXT = "  fix: the conversation is too long for the model — /compact or /new"
HUGE_DELTAS = 20_000


@dataclass(frozen=True)
class Fault:
    """One row. ``expect`` is what the faulty turn prints after ``[main turn N] `` (a regex when
    ``regex``), with ``{url}``/``{port}`` filled in; ``code`` the turn-end code (None: not an error)."""

    name: str
    what: str  # the table's description
    expect: str
    end: str = "error"  # turn/end kind
    code: str | None = None
    behaviours: tuple[Behaviour | str, ...] = ()
    endpoint: str = "server"  # server | refused | dns | https_plain | tls | backlog | proxy | port99999
    mode: str = "piped"  # piped | print
    exit_code: int | None = None  # -p rows
    regex: bool = False
    max_retries: int = 0
    timeouts: bool = False  # short stream timeouts
    status: int | None = None  # HTTP status kept in the turn/end
    fast: float | None = None  # the failing turn must end within this many seconds
    prompt: str = "please answer"
    interrupt: bool = False  # -p row: SIGINT once the request reached the server
    group: str = "fault server"


def _b(behaviour: str, /, **params: Any) -> Behaviour:
    return Behaviour(behaviour, **params)


_TR = "request to the endpoint at {url} failed: "
_TS = "stream from the endpoint at {url} failed: "
_RESET = "ReadError: BrokenResourceError: [Errno 104] Connection reset by peer"
_REFUSED = "All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', {port})"

# fmt: off
FAULTS: tuple[Fault, ...] = (
    # -- transport: the endpoint itself ---------------------------------------------------------------
    Fault("refused_port", "connection refused (closed port)", f"[turn failed TRANSPORT] {_TR}{_REFUSED}"
          "\n  fix: nothing is listening at 127.0.0.1:{port} — check --base-url (flag)",
          code="TRANSPORT", endpoint="refused", fast=ENDPOINT_FAST, group="transport"),
    # In a loopback-only namespace whose resolver reads /etc/hosts alone: no query leaves the machine.
    Fault("dns_failure", "DNS failure (a name that does not exist)",
          "[turn failed TRANSPORT] request to the endpoint at http://api.nonexistent.invalid failed: "
          "[Errno -2] Name or service not known"
          "\n  fix: the host name api.nonexistent.invalid does not exist — check --base-url (flag)",
          code="TRANSPORT", endpoint="dns", fast=ENDPOINT_FAST, group="transport"),
    Fault("https_to_plain", "https:// to a plain-HTTP listener",
          re.escape("[turn failed TRANSPORT] request to the endpoint at {url} failed: ")
          + r"\[SSL: WRONG_VERSION_NUMBER\] wrong version number " + SSL
          + re.escape("\n  fix: the server speaks plain HTTP — did you mean ") + r"http://127\.0\.0\.1:\d+\?",
          code="TRANSPORT", endpoint="https_plain", regex=True, fast=ENDPOINT_FAST, group="transport"),
    Fault("self_signed_tls", "self-signed TLS certificate",
          re.escape("[turn failed TRANSPORT] request to the endpoint at {url} failed: the certificate presented for ")
          + r"127\.0\.0\.1:\d+"
          + re.escape(' was not accepted: self-signed certificate "dsh fault server (self-signed)"; the OS trust '
                      "store does not know it\n  fix: trust the CA that issued it: point SSL_CERT_FILE at a bundle "
                      "that holds that CA, or add the CA to the OS trust store (update-ca-certificates on Debian)"),
          code="TRANSPORT", endpoint="tls", regex=True, fast=ENDPOINT_FAST, group="transport"),
    Fault("connect_timeout", "connect timeout (full accept backlog)",
          f"[turn failed TIMEOUT] no response headers from {E} within {IDLE}s", code="TIMEOUT",
          endpoint="backlog", timeouts=True, fast=ENDPOINT_FAST, group="transport"),
    Fault("https_proxy_closed", "HTTPS_PROXY at a closed port",
          "[turn failed PROXY] request to the endpoint at https://api.deepseek.invalid via proxy "
          "http://127.0.0.1:{port} failed: " + _REFUSED
          + "\n  fix: nothing is listening at the proxy 127.0.0.1:{port} — check HTTPS_PROXY (environment)",
          code="PROXY", endpoint="proxy", fast=ENDPOINT_FAST, group="transport"),
    Fault("port_99999", "port 99999 in the base URL",
          "dsh: failed to start: command line: base_url has an invalid port (use 1-65535), "
          "got 'http://127.0.0.1:99999'", end="startup", endpoint="port99999", exit_code=2, group="transport"),
    # -- transport: the server breaks the connection ----------------------------------------------------
    Fault("read_timeout_before_headers", "read timeout before headers", f"[turn failed TIMEOUT] no response "
          f"headers from {E} within {IDLE}s", code="TIMEOUT", behaviours=("stall_before_headers",), timeouts=True,
          group="transport"),
    Fault("reset_before_headers", "RST before headers", f"[turn failed TRANSPORT] {_TR}{_RESET}", code="TRANSPORT",
          behaviours=("reset_before_headers",), group="transport"),
    Fault("disconnect_before_response", "FIN before any response byte",
          f"[turn failed TRANSPORT] {_TR}Server disconnected without sending a response.", code="TRANSPORT",
          behaviours=("disconnect_before_response",), group="transport"),
    Fault("reset_mid_stream", "RST mid-stream", f"Half an answer\n[turn failed TRANSPORT] {_TS}{_RESET}",
          code="TRANSPORT", behaviours=("reset_mid_stream",), group="transport"),
    Fault("fin_mid_stream", "FIN mid-stream (incomplete chunked body)",
          f"Half an answer\n[turn failed TRANSPORT] {_TS}peer closed connection without sending complete "
          "message body (incomplete chunked read)", code="TRANSPORT", behaviours=("fin_mid_stream",),
          group="transport"),
    # -- streams ---------------------------------------------------------------------------------------
    Fault("text", "plain text", HELLO, end="completed", behaviours=("text",)),
    Fault("slow_text", "slow text (50 ms between deltas)", HELLO, end="completed", behaviours=("slow_text",)),
    Fault("reasoning", "reasoning then answer", "9.8 = 9.80 > 9.11, so 9.8.\n9.8 is greater.", end="completed",
          behaviours=("reasoning",)),
    Fault("keepalive_then_text", "keep-alive comments, then text", "Finally, an answer.", end="completed",
          behaviours=("keepalive_then_text",)),
    Fault("huge_text", f"{HUGE_DELTAS:,} one-piece deltas", "<huge text>", end="completed",
          behaviours=(_b("huge_text", n=HUGE_DELTAS),)),
    Fault("tool_call_list_dir", "tool call (list_dir), then the answer",
          "Look around.\n  [tool call] list_dir({})\n  [tool result] notes.txt\n    src/\n" + HELLO, end="completed",
          behaviours=(_b("tool_call", name="list_dir", arguments="{}", reasoning="Look around."), "text")),
    Fault("tool_call_unknown", "tool call of an unknown tool",
          'Need the weather; call it.\n  [tool call] get_weather({"location": "Hangzhou"})\n'
          '  [tool result] Error: unknown tool "get_weather"\n' + HELLO, end="completed",
          behaviours=("tool_call", "text")),
    Fault("parallel_tool_calls", "two tool calls in one step",
          'Two lookups.\n  [tool call] get_weather({"location": "Hangzhou"})\n'
          '  [tool result] Error: unknown tool "get_weather"\n  [tool call] get_time({"timezone": "Asia/Shanghai"})\n'
          '  [tool result] Error: unknown tool "get_time"\n' + HELLO, end="completed",
          behaviours=("parallel_tool_calls", "text")),
    Fault("length", "finish_reason length", "The answer is cut here\n[turn hit the output-token limit]",
          end="max-tokens", behaviours=("length",)),
    Fault("content_filter", "finish_reason content_filter",
          'The answer is cut here\n[turn failed CONTENT_FILTER] stream from ' + E + ' finished with finish_reason '
          '"content_filter"', code="CONTENT_FILTER", behaviours=("content_filter",)),
    Fault("insufficient_system_resource", "finish_reason insufficient_system_resource",
          'The answer is cut here\n[turn failed INSUFFICIENT_SYSTEM_RESOURCE] stream from ' + E + ' finished with '
          'finish_reason "insufficient_system_resource"', code="INSUFFICIENT_SYSTEM_RESOURCE",
          behaviours=("insufficient_system_resource",)),
    Fault("empty", "stop with no content", f"[turn failed EMPTY_RESPONSE] {E} returned an empty completion",
          code="EMPTY_RESPONSE", behaviours=("empty",)),
    Fault("empty_body", "200 with an empty body",
          f"[turn failed EMPTY_RESPONSE] {E} returned no response body", code="EMPTY_RESPONSE",
          behaviours=("empty_body",)),
    Fault("no_done", "finish reason, then a clean close without [DONE]", "No terminator", end="completed",
          behaviours=("no_done",)),
    Fault("no_finish", "stream ends with neither a finish reason nor [DONE]", "No finish\n[turn failed "
          "STREAM_CLOSED] SSE stream ended without [DONE]", code="STREAM_CLOSED", behaviours=("no_finish",)),
    Fault("partial_eof", "stream cut inside an event",
          "Cut mid\n[turn failed STREAM_CLOSED] SSE stream ended without [DONE]", code="STREAM_CLOSED",
          behaviours=("partial_eof",)),
    Fault("malformed_json", "payload is not JSON",
          'Hi\n[turn failed MALFORMED_RESPONSE] malformed SSE payload: {"id": "x", "choices": [{"delta": '
          '{"content": "unterminated: Unterminated string starting at: line 1 column 47 (char 46)',
          code="MALFORMED_RESPONSE", behaviours=("malformed_json",)),
    Fault("malformed_shape", "JSON of the wrong shape",
          'Hi\n[turn failed MALFORMED_RESPONSE] malformed SSE payload: {"id":"x","object":"chat.completion.chunk",'
          '"choices":"not-a-list"}: not a chat.completion.chunk object', code="MALFORMED_RESPONSE",
          behaviours=("malformed_shape",)),
    Fault("stall_after_headers", "headers, then silence",
          f"[turn failed TIMEOUT] stream idle timeout after {IDLE}s from {E}", code="TIMEOUT",
          behaviours=("stall_after_headers",), timeouts=True),
    Fault("stall_mid_stream", "some text, then silence",
          f"Partial\n[turn failed TIMEOUT] stream idle timeout after {IDLE}s from {E}", code="TIMEOUT",
          behaviours=("stall_mid_stream",), timeouts=True),
    Fault("keepalive_only", "keep-alive comments forever",
          f"[turn failed TIMEOUT] no content from {E} within {FIRST}s (keep-alives only)", code="TIMEOUT",
          behaviours=("keepalive_only",), timeouts=True),
    # -- HTTP errors -----------------------------------------------------------------------------------
    Fault("http_400", "HTTP 400", "[turn failed INVALID_REQUEST] The `reasoning_content` in the thinking mode must be "
          "passed back to the API.", code="INVALID_REQUEST", behaviours=("http_400",), status=400, group="http"),
    Fault("http_400_context", "HTTP 400, context overflow",
          "[turn failed CONTEXT_WINDOW_EXCEEDED] This model's maximum context length is 131072 tokens. However, you "
          "requested 140000 tokens (140000 in the messages, 0 in the completion). Please reduce the length of the "
          "messages or completion.\n" + FIX_CONTEXT, code="CONTEXT_WINDOW_EXCEEDED", behaviours=("http_400_context",),
          status=400,
          group="http"),
    Fault("http_401", "HTTP 401", "[turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid\n"
          + FIX_AUTH, code="AUTH", behaviours=("http_401",), status=401, group="http"),
    Fault("http_402", "HTTP 402", "[turn failed QUOTA] Insufficient Balance\n" + FIX_QUOTA, code="QUOTA",
          behaviours=("http_402",), status=402, group="http"),
    Fault("http_403", "HTTP 403", "[turn failed AUTH] Permission denied: this API key may not use this model\n"
          + FIX_AUTH,
          code="AUTH", behaviours=("http_403",), status=403, group="http"),
    Fault("http_413", "HTTP 413", "[turn failed INVALID_REQUEST] Request body too large", code="INVALID_REQUEST",
          behaviours=("http_413",), status=413, group="http"),
    Fault("http_418", "HTTP 418 (any other status)", "[turn failed HTTP_418] I'm a Teapot", code="HTTP_418",
          behaviours=("http_418",), status=418, group="http"),
    Fault("http_422", "HTTP 422", "[turn failed HTTP_422] Invalid Parameters: temperature must be between 0 and 2",
          code="HTTP_422", behaviours=("http_422",), status=422, group="http"),
    Fault("http_429", "HTTP 429", "[turn failed RATE_LIMIT] Rate Limit Reached\n" + FIX_RATE, code="RATE_LIMIT",
          behaviours=("http_429",), status=429, group="http"),
    Fault("http_500", "HTTP 500", "[turn failed SERVER] Internal Server Error\n" + FIX_SERVER, code="SERVER",
          behaviours=("http_500",), status=500, group="http"),
    Fault("http_502_html", "HTTP 502 with an HTML body", f"[turn failed SERVER] API error (HTTP 502) from {E}\n"
          + FIX_SERVER, code="SERVER", behaviours=("http_502_html",), status=502, group="http"),
    Fault("http_503", "HTTP 503", "[turn failed SERVER] Server Overloaded, please try again later\n" + FIX_SERVER,
          code="SERVER", behaviours=("http_503",), status=503, group="http"),
    Fault("http_error_text_body", "HTTP 500 with a plain-text body",
          f"[turn failed SERVER] API error (HTTP 500) from {E}\n" + FIX_SERVER, code="SERVER",
          behaviours=(_b("http_error", body="upstream exploded"),), status=500, group="http"),
    # -- retries (max_retries > 0) ------------------------------------------------------------------------
    Fault("retry_then_success", "HTTP 503, retried, then text",
          r"\[retry 1/2 in 0\.[56]s\] SERVER: Server Overloaded, please try again later\n" + re.escape(HELLO),
          end="completed", behaviours=("http_503", "text"), max_retries=2, regex=True, group="retry"),
    Fault("retry_after_honoured", "HTTP 429 with Retry-After: 0.3, then text",
          "[retry 1/2 in 0.3s] RATE_LIMIT: Rate Limit Reached\n" + HELLO, end="completed",
          behaviours=(_b("http_429", retry_after="0.3"), "text"), max_retries=2, group="retry"),
    Fault("retry_transport", "RST before headers, retried, then text",
          r"\[retry 1/1 in 0\.[56]s\] TRANSPORT: " + re.escape(_TR + _RESET) + r"\n" + re.escape(HELLO),
          end="completed", behaviours=("reset_before_headers", "text"), max_retries=1, regex=True, group="retry"),
    Fault("retries_exhausted", "HTTP 500 twice with one retry",
          r"\[retry 1/1 in 0\.[56]s\] SERVER: Internal Server Error\n"
          + re.escape("[turn failed SERVER] Internal Server Error\n" + FIX_SERVER),
          code="SERVER", behaviours=("http_500", "http_500"), max_retries=1, regex=True, status=500, group="retry"),
    Fault("auth_not_retried", "HTTP 401 with retries on: no retry",
          "[turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid\n" + FIX_AUTH, code="AUTH",
          behaviours=("http_401",), max_retries=2, status=401, group="retry"),
    # -- -p (exit codes) --------------------------------------------------------------------------------
    Fault("print_completed", "`-p`, completed", HELLO, end="completed", behaviours=("text",), mode="print",
          exit_code=0, group="-p"),
    Fault("print_failed", "`-p`, HTTP 401", "[turn failed AUTH] Authentication Fails, Your api key: ****abcd is "
          "invalid\n" + FIX_AUTH, code="AUTH", behaviours=("http_401",), mode="print", exit_code=1, status=401,
          group="-p"),
    Fault("print_transport", "`-p`, RST mid-stream", f"Half an answer\n[turn failed TRANSPORT] {_TS}{_RESET}",
          code="TRANSPORT", behaviours=("reset_mid_stream",), mode="print", exit_code=1, group="-p"),
    Fault("print_max_tokens", "`-p`, output-token limit", "The answer is cut here\n[turn hit the output-token limit]",
          end="max-tokens", behaviours=("length",), mode="print", exit_code=4, group="-p"),
    Fault("print_rejected", "`-p`, prompt holds a key-shaped secret",
          "[turn rejected] prompt contains what looks like a secret (AKIA…); not sent", end="rejected",
          mode="print", exit_code=3, prompt="deploy with AKIAABCDEFGHIJKLMNOP please", group="-p"),
    Fault("print_interrupted", "`-p`, SIGINT while the server stalls", "[turn aborted] cancelled", end="aborted",
          behaviours=("stall_before_headers",), mode="print", exit_code=130, interrupt=True, group="-p"),
)
# fmt: on

FAULTS_BY_NAME = {fault.name: fault for fault in FAULTS}
assert len(FAULTS_BY_NAME) == len(FAULTS)


@dataclass
class Outcome:
    fault: Fault
    url: str
    port: int | None
    runs: list[Run]
    records: list[dict[str, Any]] = field(default_factory=list)
    fault_turn: int = 1
    fault_output: str = ""  # what the faulty turn printed after its "[main turn N] " header
    next_output: str | None = None  # what the turn after it printed (None: it never ran)
    seconds: float = 0.0  # how long the failing process ran
    sessions: int = 0

    def expected(self) -> str:
        template = self.fault.expect
        url, port = self.url, str(self.port)
        if self.fault.regex:
            url, port = re.escape(url), re.escape(port)
            template = template.replace(re.escape("{url}"), "{url}").replace(re.escape("{port}"), "{port}")
        return template.replace("{url}", url).replace("{port}", port)

    def matches(self) -> bool:
        if self.fault.name == "huge_text":
            return self.fault_output == huge_text()
        if self.fault.regex:
            return re.fullmatch(self.expected(), self.fault_output) is not None
        return self.fault_output == self.expected()

    def turn_end(self) -> dict[str, Any] | None:
        ends = turn_ends(self.records).get(self.fault_turn, [])
        return ends[0] if len(ends) == 1 else None


def huge_text() -> str:
    return sanitize(streams.huge_text_blob(HUGE_DELTAS)[1])


def _port_of(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return 99999 if url.endswith(":99999") else None


# --- endpoints ------------------------------------------------------------------------------------


@dataclass
class _Endpoint:
    url: str
    server: FaultServer | None = None
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None  # the port the failure names, when it is not the URL's
    prefix: tuple[str, ...] = ()  # what dsh runs inside (the dns row: a loopback-only namespace)

    def failing_port(self) -> int | None:
        return self.port if self.port is not None else _port_of(self.url)


@contextlib.contextmanager
def _endpoint(fault: Fault, on_request: Callable[[RecordedRequest], None] | None = None) -> Iterator[_Endpoint]:
    kind = fault.endpoint
    if kind == "server":  # the -p rows (piped server rows run in chunks, see _run_chunk)
        with FaultServer(script=[*fault.behaviours, "text"], on_request=on_request) as server:
            yield _Endpoint(server.url, server)
    elif kind == "refused":
        with closed_port() as port:
            yield _Endpoint(f"http://127.0.0.1:{port}")
    elif kind == "dns":
        with tempfile.TemporaryDirectory() as directory:
            yield _Endpoint("http://api.nonexistent.invalid", prefix=tuple(isolated_resolver(directory)))
    elif kind == "https_plain":
        with FaultServer() as server:
            yield _Endpoint(server.plain_url_for_https, server)
    elif kind == "tls":
        with FaultServer(tls=True) as server:
            yield _Endpoint(server.tls_url, server)
    elif kind == "backlog":
        with FullBacklogListener() as listener:
            yield _Endpoint(listener.url)
    elif kind == "proxy":
        with closed_port() as port:
            yield _Endpoint("https://api.deepseek.invalid", env={"HTTPS_PROXY": f"http://127.0.0.1:{port}"}, port=port)
    elif kind == "port99999":
        yield _Endpoint("http://127.0.0.1:99999")
    else:  # pragma: no cover - a typo in the table
        raise ValueError(kind)


def _config(faults: Iterable[Fault]) -> str:
    faults = list(faults)
    retries = max(fault.max_retries for fault in faults)
    assert all(fault.max_retries == retries for fault in faults), "one chunk, one retry setting"
    if any(fault.timeouts for fault in faults):
        return config_text(max_retries=retries, idle=IDLE, first_token=FIRST)
    return config_text(max_retries=retries)


_HEADER = re.compile(r"^\[main turn (\d+)\] ", re.M)


def turn_outputs(stdout: str) -> dict[int, str]:
    """What each turn printed after its ``[main turn N] `` header (without the final newline)."""
    headers = list(_HEADER.finditer(stdout))
    outputs: dict[int, str] = {}
    for index, match in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(stdout)
        outputs[int(match.group(1))] = stdout[match.end() : end].removesuffix("\n")
    return outputs


def _records(home: Home) -> tuple[int, list[dict[str, Any]]]:
    files = home.session_files()
    return len(files), (read_log(files[0])[1] if len(files) == 1 else [])


def _good_resume(home: Home, fault: Fault, *, print_mode: bool) -> Run:
    """``--resume last`` against a working server: the next turn must succeed."""
    with FaultServer(script=["text"]) as good:
        args = ["--resume", "last", "--base-url", good.url]
        if print_mode:
            return run_dsh(home, [*args, "-p", "and now?"], label=f"{fault.name}-resume")
        return run_dsh(home, args, ["and now?"], label=f"{fault.name}-resume")


def _interrupted_print(home: Home, fault: Fault, url: str, arrived: threading.Event) -> Run:
    """``dsh -p`` that gets SIGINT once its request is at the (stalling) server."""
    args = ["--base-url", url, "-p", fault.prompt]
    started = time.monotonic()
    returncode, stdout, stderr = run_interrupted(dsh_command(args), home.workspace, dsh_env(home),
                                                 lambda: arrived.wait(30))
    path = save_transcript(home, fault.name, args, stdout, stderr, returncode)
    return Run(args, returncode, stdout, stderr, time.monotonic() - started, path)


def _run_alone(fault: Fault, root: Path) -> Outcome:
    """Endpoint, -p and startup rows: their own user and process(es)."""
    home = make_home(root / fault.name, _config([fault]))
    arrived = threading.Event()
    with _endpoint(fault, lambda request: arrived.set()) as endpoint:
        outcome = Outcome(fault, endpoint.url, endpoint.failing_port(), [])
        args = ["--base-url", endpoint.url]
        if fault.endpoint == "port99999":
            outcome.runs.append(run_dsh(home, [*args, "-p", fault.prompt], label=fault.name))
            outcome.fault_output = outcome.runs[0].stderr.removesuffix("\n")
            outcome.sessions = len(home.session_files())
            return outcome
        if fault.interrupt:
            outcome.runs.append(_interrupted_print(home, fault, endpoint.url, arrived))
        elif fault.mode == "print":
            outcome.runs.append(run_dsh(home, [*args, "-p", fault.prompt], env=endpoint.env, label=fault.name,
                                        prefix=endpoint.prefix))
        else:  # the endpoint is broken: both turns fail the same way
            outcome.runs.append(run_dsh(home, args, [fault.prompt, "once more"], env=endpoint.env, label=fault.name,
                                        prefix=endpoint.prefix))
    outcome.runs.append(_good_resume(home, fault, print_mode=fault.mode == "print"))
    first = outcome.runs[0]
    if fault.mode == "print":
        # -p: no turn header; the answer on stdout, then the turn's diagnostics on stderr.
        outcome.fault_output = (first.stdout + first.stderr).removesuffix("\n")
        outcome.next_output = outcome.runs[1].stdout.removesuffix("\n")
    else:
        outcome.fault_output = turn_outputs(first.stdout).get(1, "")
        outcome.next_output = turn_outputs(outcome.runs[1].stdout).get(3 if fault.mode == "piped" else 2)
    outcome.seconds = first.seconds
    outcome.sessions, outcome.records = _records(home)
    return outcome


def _run_chunk(faults: list[Fault], root: Path, label: str) -> list[Outcome]:
    """Several fault-server rows in one piped dsh: warm-up, then per row the faulty turn and a good one."""
    home = make_home(root / label, _config(faults))
    script: list[Behaviour | str] = ["text"]
    lines = ["warm up"]
    for fault in faults:
        script += [*fault.behaviours, "text"]
        lines += [fault.prompt, f"and after {fault.name}?"]
    with FaultServer(script=script) as server:
        run = run_dsh(home, ["--base-url", server.url], lines, label=label, timeout=120)
        url = server.url
    outputs = turn_outputs(run.stdout)
    sessions, records = _records(home)
    outcomes = []
    for index, fault in enumerate(faults):
        turn = 2 + 2 * index
        outcomes.append(Outcome(fault, url, _port_of(url), [run], records, turn, outputs.get(turn, ""),
                                outputs.get(turn + 1), run.seconds, sessions))
    return outcomes


def _chunks(faults: Iterable[Fault], size: int) -> list[list[Fault]]:
    """One config per chunk: group the piped server rows by retry setting and by whether they need the
    short stream timeouts (those rows take seconds each, so their chunks are small)."""
    groups: dict[tuple[int, bool], list[Fault]] = {}
    for fault in faults:
        groups.setdefault((fault.max_retries, fault.timeouts), []).append(fault)
    chunks: list[list[Fault]] = []
    for (_, timeouts), group in groups.items():
        width = 2 if timeouts else size
        count = max(1, -(-len(group) // width))
        chunks += [group[start::count] for start in range(count)]
    return chunks


def run_fault(fault: Fault, root: Path) -> Outcome:
    """One row on its own (the tests run each row as its own test)."""
    if fault.endpoint == "server" and fault.mode == "piped":
        return _run_chunk([fault], root, fault.name)[0]
    return _run_alone(fault, root)


def run_all(root: Path, faults: Iterable[Fault] = FAULTS, workers: int = 4, chunk: int = 7) -> list[Outcome]:
    """Every row, concurrently, several piped server rows per dsh (for the README table); in table order."""
    from concurrent.futures import ThreadPoolExecutor

    faults = list(faults)
    chunked = [f for f in faults if f.endpoint == "server" and f.mode == "piped"]
    alone = [f for f in faults if f not in chunked]
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(_run_chunk, group, root, f"chunk{n}") for n, group in enumerate(_chunks(chunked, chunk))]
        futures += [pool.submit(lambda f: [_run_alone(f, root)], fault) for fault in alone]
        done = {outcome.fault.name: outcome for future in futures for outcome in future.result()}
    return [done[fault.name] for fault in faults]


# --- the README table -------------------------------------------------------------------------------


def _shown(outcome: Outcome) -> str:
    if outcome.fault.name == "huge_text":
        return f"the {HUGE_DELTAS:,} deltas verbatim"
    text = outcome.fault_output
    if outcome.port is not None:
        text = text.replace(f":{outcome.port}", ":<port>").replace(f", {outcome.port})", ", <port>)")
    text = re.sub(r"_ssl\.c:\d+", "_ssl.c:…", text)
    if outcome.fault.end != "startup" and outcome.fault.mode != "print":  # -p prints no turn header
        text = "[main turn N] " + text
    return "<br>".join(_code(line.replace("|", "\\|")) for line in text.split("\n"))


def _code(text: str) -> str:
    """A Markdown code span; text holding a backtick needs a double-backtick fence."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def markdown_table(outcomes: list[Outcome]) -> str:
    rows = ["| fault | group | what dsh prints | turn/end in the log | exit |", "|---|---|---|---|---|"]
    for outcome in outcomes:
        fault = outcome.fault
        end = outcome.turn_end()
        if fault.end == "startup":
            logged = "no session created"
        elif end is None:
            logged = "?"
        else:
            logged = f"`{end['kind']}`" + (f" `{end['code']}`" if end.get("code") else "")
        exit_code = str(outcome.runs[0].returncode) if fault.mode == "print" or fault.end == "startup" else "–"
        rows.append(f"| {fault.what} | {fault.group} | {_shown(outcome)} | {logged} | {exit_code} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    """Run every row and print the Markdown table (``python tests/reliability/fault_matrix.py``)."""
    with tempfile.TemporaryDirectory(prefix="dsh-fault-matrix-") as folder:
        outcomes = run_all(Path(folder))
    sys.stdout.write(markdown_table(outcomes))
    bad = [outcome.fault.name for outcome in outcomes if not outcome.matches()]
    if bad:
        sys.stderr.write(f"rows that did not produce their expected line: {', '.join(bad)}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parents[2])
    raise SystemExit(main())
