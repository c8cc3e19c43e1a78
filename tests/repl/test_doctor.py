"""``dsh doctor`` / ``/doctor`` against the real fault server on loopback: each fault is the right failing step.

Times vary, so every ``<n> ms`` is compared as ``<ms>``; everything else is exact. DNS is never sent to an
outside resolver: the resolver function is injected wherever a name (not an address) is looked up, and
the one real lookup runs in a loopback-only namespace (tests/real_parts.py).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dsh.agent_loop.mcp import Category, McpFailure, ServerStatus, Stage, failure_line
from dsh.agent_loop.process import ExitStatus
from dsh.llm.loopback.fault_server import Behaviour, FaultServer, closed_port
from dsh.repl import commands
from dsh.repl.config import Config, load_config
from dsh.repl.doctor import Doctor
from dsh.repl.doctor_environment import mcp_step
from dsh.repl.doctor_report import STEPS, Report
from dsh.repl.frontend import PlainFrontEnd
from dsh.repl.shell import Shell
from dsh.repl.turn_end import FIX_AUTH_FROM, FIX_CERTIFICATE
from tests import canaries
from tests.repl.test_shell_commands import ListSink

pytestmark = pytest.mark.anyio

KEY = "sk-0123456789abcdef0123456789abcdef"
SHOWN_KEY = "key sk-***cdef (DEEPSEEK_API_KEY (environment); 35 characters)"  # not DeepSeek: no DeepSeek key shape
SKIPPED = "skipped (an earlier step failed)"


def _ms(text: str) -> str:
    return re.sub(r"\d+\.\d ms", "<ms>", text)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "DEEPSEEK_API_KEY": KEY, "TERM": "dumb"}


class _NotATerminal:
    def isatty(self) -> bool:
        return False


def _config(env: dict[str, str], base_url: str, **flags: Any) -> Config:
    return load_config({"base_url": base_url, **flags}, env, require_key=False)


async def _report(env: dict[str, str], base_url: str, **options: Any) -> tuple[Report, list[str]]:
    flags = options.pop("flags", {})
    doctor = Doctor(_config(env, base_url, **flags), env, stdout=_NotATerminal(), **options)
    report = await doctor.run()
    return report, [_ms(line) for line in report.lines()]


def _environment(env: dict[str, str]) -> str:
    import platform
    from importlib import metadata

    from dsh.repl import __version__

    return (f"✓ environment: dsh {__version__}, Python {platform.python_version()}, httpx {metadata.version('httpx')}, "
            f"prompt_toolkit {metadata.version('prompt_toolkit')}; TERM=dumb, stdout is not a terminal, no colour; "
            f"state {env['XDG_STATE_HOME']}/dsh (not created yet); no subagents configured")


def _head(url: str) -> list[str]:
    return [f"✓ configuration: base_url {url} (--base-url (flag)); model deepseek-flash (default); "
            f"dialect openai (default for this host); {SHOWN_KEY}",
            "✓ proxy: none applies (direct)",
            "✓ DNS: 127.0.0.1 is an address (no lookup)"]


async def test_a_healthy_endpoint_passes_every_step(env: dict[str, str], fault_server: FaultServer) -> None:
    report, lines = await _report(env, fault_server.url)
    port = fault_server.port
    assert lines == [
        *_head(fault_server.url),
        f"✓ TCP: 127.0.0.1:{port} connected in <ms>",
        "– TLS: http:// endpoint: no TLS",
        "✓ HTTP: GET /models 200 in <ms>; deepseek-flash is listed (deepseek-flash, deepseek-v4-pro)",
        "✓ balance: available: 110.00 CNY (in <ms>)",
        "✓ stream: headers in <ms>; first token in <ms>; 0 keep-alives; [DONE]; <ms> in all",
        _environment(env),
        "doctor: every step passed",
    ]
    assert report.ok
    # The stream step asked for one token, with the key; the GETs carried the key too.
    chat = fault_server.requests[-1]
    assert chat.json["max_tokens"] == 1 and chat.headers["authorization"] == f"Bearer {KEY}"
    asked = [*fault_server.account_requests, *fault_server.requests]  # the fault server keeps the GETs apart
    assert [(r.method, r.path) for r in asked] == [
        ("GET", "/models"), ("GET", "/user/balance"), ("POST", "/chat/completions")]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in asked)


async def test_a_refused_port_fails_at_tcp_with_the_turns_fix(env: dict[str, str]) -> None:
    with closed_port() as port:
        report, lines = await _report(env, f"http://127.0.0.1:{port}")
    assert lines[3:] == [
        f"✗ TCP: [TRANSPORT] request to the endpoint at http://127.0.0.1:{port} failed: All connection attempts "
        f"failed: [Errno 111] Connect call failed ('127.0.0.1', {port})",
        f"  fix: nothing is listening at 127.0.0.1:{port} — check --base-url (flag)",
        f"– TLS: {SKIPPED}", f"– HTTP: {SKIPPED}", f"– balance: {SKIPPED}", f"– stream: {SKIPPED}",
        _environment(env),
        "doctor: failed at TCP",
    ]
    assert not report.ok and report.to_dict()["failed_step"] == "TCP"


async def test_https_to_the_plain_port_fails_at_tls(env: dict[str, str], fault_server: FaultServer) -> None:
    url = fault_server.plain_url_for_https
    _, lines = await _report(env, url)
    assert _ms(lines[4]).startswith(f"✗ TLS: [TRANSPORT] request to the endpoint at {url} failed: "
                                    "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    assert lines[5] == f"  fix: the server speaks plain HTTP — did you mean {fault_server.url}?"
    assert lines[-1] == "doctor: failed at TLS"


async def test_a_self_signed_certificate_fails_at_tls_and_shows_it(env: dict[str, str],
                                                                   tls_fault_server: FaultServer) -> None:
    url = tls_fault_server.tls_url
    _, lines = await _report(env, url)
    port = url.rsplit(":", 1)[1]
    assert lines[4] == (f"✗ TLS: [TRANSPORT] request to the endpoint at {url} failed: the certificate presented "
                        f'for 127.0.0.1:{port} was not accepted: self-signed certificate "dsh fault server '
                        '(self-signed)"; the OS trust store does not know it')
    assert lines[5:7] == [
        "    certificate: subject CN=dsh fault server (self-signed); issuer CN=dsh fault server (self-signed); "
        "1 day to expiry",
        FIX_CERTIFICATE,
    ]


async def test_an_untrusted_corporate_root_fails_at_tls_with_the_turn_s_facts(env: dict[str, str]) -> None:
    from dsh.llm.loopback.certificate import CORPORATE_ROOT, corporate_chain

    async with FaultServer(tls=corporate_chain()) as server:
        url = server.tls_url
        _, lines = await _report(env, url)
    port = url.rsplit(":", 1)[1]
    assert lines[4] == (f"✗ TLS: [TRANSPORT] request to the endpoint at {url} failed: the certificate presented "
                        f'for 127.0.0.1:{port} was not accepted: unknown issuer "{CORPORATE_ROOT}" (subject '
                        '"127.0.0.1"); the OS trust store does not know that issuer')
    assert lines[5:7] == [f"    certificate: subject CN=127.0.0.1; issuer CN={CORPORATE_ROOT}; 1 day to expiry",
                          FIX_CERTIFICATE]


async def test_the_certificate_trusted_through_ssl_cert_file_passes(env: dict[str, str],
                                                                     tls_fault_server: FaultServer) -> None:
    env["SSL_CERT_FILE"] = tls_fault_server.tls_ca_file
    report, lines = await _report(env, tls_fault_server.tls_url)
    assert lines[4] == ("✓ TLS: TLSv1.3; subject CN=dsh fault server (self-signed); issuer CN=dsh fault server "
                        "(self-signed); 1 day to expiry; verified against "
                        f"SSL_CERT_FILE={tls_fault_server.tls_ca_file}")
    assert report.ok


async def test_a_401_fails_at_http_with_auth(env: dict[str, str], fault_server: FaultServer) -> None:
    fault_server.account = "unauthorized"
    _, lines = await _report(env, fault_server.url)
    assert lines[5:8] == [
        "✗ HTTP: [AUTH] Authentication Fails, Your api key: ****abcd is invalid",
        FIX_AUTH_FROM.format(source="DEEPSEEK_API_KEY (environment)"),  # the fix names where the key came from
        f"– balance: {SKIPPED}",
    ]


async def test_a_model_the_endpoint_does_not_list_fails_at_http(env: dict[str, str],
                                                                fault_server: FaultServer) -> None:
    _, lines = await _report(env, fault_server.url, flags={"model": "deepseek-v9"})
    assert lines[5:7] == [
        "✗ HTTP: GET /models 200 in <ms>; deepseek-v9 is not listed (deepseek-flash, deepseek-v4-pro)",
        "  fix: this endpoint does not list the model deepseek-v9 — check --model (flag)",
    ]


async def test_an_unavailable_balance_fails_at_balance_with_quota(env: dict[str, str],
                                                                  fault_server: FaultServer) -> None:
    fault_server.account = "balance_unavailable"
    _, lines = await _report(env, fault_server.url)
    # The fault server is not DeepSeek: no top-up page, the key's account instead.
    fix = (f"  fix: the endpoint at 127.0.0.1:{fault_server.port} refused the request for quota or credit — check "
           "the account of the key in DEEPSEEK_API_KEY (environment)")
    assert lines[6:9] == ["✗ balance: [QUOTA] not available: 0.00 CNY (in <ms>)", fix, f"– stream: {SKIPPED}"]


async def test_a_gateway_upstream_401_says_the_gateway_took_the_key(env: dict[str, str],
                                                                     fault_server: FaultServer) -> None:
    fault_server.push("gateway_upstream_401")
    _, lines = await _report(env, fault_server.url)
    assert lines[5].startswith("✓ HTTP: GET /models 200 in <ms>")
    assert lines[7:9] == [
        "✗ stream: [AUTH] LiteLLM accepted your key (GET /models 200), but its upstream refused LiteLLM's own "
        "credential: litellm.AuthenticationError: AuthenticationError: DeepseekException - Authentication Fails, "
        "Your api key: ****abcd is invalid",
        "  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own credential — check the upstream "
        "key in LiteLLM's configuration",
    ]


async def test_an_endpoint_without_models_or_balance_skips_them(env: dict[str, str],
                                                                fault_server: FaultServer) -> None:
    url = f"{fault_server.url}/elsewhere"  # every route under it is a 404
    report, lines = await _report(env, url)
    assert lines[5:9] == [
        "– HTTP: GET /models answered 404 in <ms>: this endpoint lists no models",
        "– balance: GET /user/balance answered 404 in <ms>: no balance to check here",
        "✗ stream: [HTTP_404] no route for POST /elsewhere/chat/completions",
        _environment(env),
    ]
    assert not report.ok


async def _turn_failure(env: dict[str, str], config: Config) -> str:
    """The failure line a real turn prints for the same configuration (no retries)."""
    sink = ListSink()
    shell = Shell(config, PlainFrontEnd(sink), color=False, env=env)
    await shell.start()
    try:
        await shell.handle_line("hello")
    finally:
        await shell.aclose()
    return next(line for line in sink.text.splitlines() if "[turn failed" in line)


@pytest.mark.parametrize(("behaviour", "message"), [
    ("stall_after_headers", "stream idle timeout after 0.5s from {E}"),
    ("keepalive_only", "no content from {E} within 0.5s (keep-alives only)"),
])
async def test_a_stalled_stream_fails_at_stream_as_the_turn_does(env: dict[str, str], fault_server: FaultServer,
                                                                 behaviour: str, message: str) -> None:
    (Path(env["XDG_CONFIG_HOME"]) / "dsh").mkdir(parents=True)
    (Path(env["XDG_CONFIG_HOME"]) / "dsh" / "config.toml").write_text(
        "stream_idle_timeout = 0.5\nfirst_token_timeout = 0.5\nmax_retries = 0\n")
    fault_server.push(Behaviour(behaviour, interval=0.1) if behaviour == "keepalive_only" else behaviour)
    message = message.replace("{E}", f"the endpoint at 127.0.0.1:{fault_server.port}")
    _, lines = await _report(env, fault_server.url)
    assert lines[7:] == [f"✗ stream: [TIMEOUT] {message}", _environment(env), "doctor: failed at stream"]
    fault_server.push(Behaviour(behaviour, interval=0.1) if behaviour == "keepalive_only" else behaviour)
    turn = await _turn_failure(env, _config(env, fault_server.url))
    assert turn.endswith(f"[turn failed TIMEOUT] {message}")


async def test_a_name_that_does_not_exist_fails_at_dns(env: dict[str, str]) -> None:
    async def resolver(host: str, port: int) -> list[tuple[Any, ...]]:
        assert (host, port) == ("api.deepseek.invalid", 443)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    _, lines = await _report(env, "https://api.deepseek.invalid", resolver=resolver)
    assert lines[2:5] == [
        "✗ DNS: [TRANSPORT] request to the endpoint at https://api.deepseek.invalid failed: "
        "[Errno -2] Name or service not known",
        "  fix: the host name api.deepseek.invalid does not exist — check --base-url (flag)",
        f"– TCP: {SKIPPED}",
    ]


async def test_ipv6_refused_and_ipv4_connecting_both_show(env: dict[str, str], fault_server: FaultServer) -> None:
    port = fault_server.port

    async def resolver(host: str, port: int) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    doctor = Doctor(_config(env, f"http://doctor.test:{port}"), env, resolver=resolver)
    dns = await doctor.dns()
    assert _ms(dns.lines()[0]) == "✓ DNS: doctor.test: A 127.0.0.1; AAAA ::1 in <ms>"
    tcp = await doctor.tcp()  # the fault server listens on 127.0.0.1 only
    assert _ms(tcp.lines()[0]) == (f"✓ TCP: [::1]:{port} refused after <ms>; 127.0.0.1:{port} connected in <ms>")


async def test_every_address_refused_fails_at_tcp_as_anyio_reports_it(env: dict[str, str]) -> None:
    with closed_port() as port:
        async def resolver(host: str, port_: int) -> list[tuple[Any, ...]]:
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port_, 0, 0)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]

        doctor = Doctor(_config(env, f"http://doctor.test:{port}"), env, resolver=resolver)
        await doctor.dns()
        tcp = await doctor.tcp()
    assert tcp.lines() == [
        f"✗ TCP: [TRANSPORT] request to the endpoint at http://doctor.test:{port} failed: All connection attempts "
        f"failed: multiple connection attempts failed [[Errno 111] Connect call failed ('::1', {port}, 0, 0); "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})]",
        f"  fix: nothing is listening at doctor.test:{port} — check --base-url (flag)",
    ]


async def test_the_configuration_names_each_source_with_its_file_line(env: dict[str, str]) -> None:
    folder = Path(env["XDG_CONFIG_HOME"]) / "dsh"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text('# mine\nmodel = "deepseek-v4-pro"\napi_key = "not-a-deepseek-key"\n')
    del env["DEEPSEEK_API_KEY"]
    doctor = Doctor(load_config({}, env, require_key=False), env)
    path = folder / "config.toml"
    assert doctor.configuration().lines() == [
        "✓ configuration: base_url https://api.deepseek.com (default); "
        f"model deepseek-v4-pro (model in {path}:2); dialect deepseek (default for this host); "
        f"key ***-key (api_key in {path}:3; 18 characters; not the sk-… shape DeepSeek issues)"]


async def test_a_legacy_deepseek_model_name_gets_one_line_naming_what_serves_it(env: dict[str, str]) -> None:
    folder = Path(env["XDG_CONFIG_HOME"]) / "dsh"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text('# mine\nmodel = "deepseek-v4-flash"\n')
    path = folder / "config.toml"
    step = Doctor(load_config({}, env, require_key=False), env).configuration()
    assert step.lines() == [
        f"✓ configuration: base_url https://api.deepseek.com (default); model deepseek-v4-flash (model in {path}:2); "
        "dialect deepseek (default for this host); key sk-***cdef (DEEPSEEK_API_KEY (environment); 35 characters; "
        "sk- and 32 hex digits, as DeepSeek issues)",
        "    model deepseek-v4-flash is a legacy name: DeepSeek serves it with deepseek-flash (V4.1-Flash) at Flash "
        f'prices; set model = "deepseek-flash" where the model is set: model in {path}:2']
    assert step.to_dict()["facts"]["model"]["legacy"] == step.details[0]
    flagged = Doctor(_config(env, "https://api.deepseek.com", model="deepseek-v4-flash-vision-exp"), env)
    assert flagged.configuration().details == [
        "model deepseek-v4-flash-vision-exp is a legacy name: DeepSeek serves it with deepseek-flash (V4.1-Flash) at "
        'Flash prices; set model = "deepseek-flash" where the model is set: --model (flag)']
    # Another server is never told about DeepSeek's names, legacy or not.
    other = Doctor(_config(env, "http://127.0.0.1:9/v1", model="deepseek-v4-flash"), env)
    assert other.configuration().details == []


async def test_no_key_fails_at_configuration(env: dict[str, str]) -> None:
    del env["DEEPSEEK_API_KEY"]
    step = Doctor(load_config({}, env, require_key=False), env).configuration()
    assert step.lines() == [
        "✗ configuration: base_url https://api.deepseek.com (default); model deepseek-flash (default); "
        "dialect deepseek (default for this host); no API key",
        "  fix: set DEEPSEEK_API_KEY (or api_key in config.toml)"]


async def test_the_proxy_step_names_the_variable_redacted_and_no_proxy(env: dict[str, str]) -> None:
    env["HTTPS_PROXY"] = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@proxy.example:3128"
    doctor = Doctor(load_config({}, env, require_key=False), env)
    assert doctor.proxy().lines() == [
        "✓ proxy: http://***@proxy.example:3128 carries requests to api.deepseek.com (HTTPS_PROXY (environment))"]
    env["NO_PROXY"] = "localhost,.deepseek.com"
    doctor = Doctor(load_config({}, env, require_key=False), env)
    assert doctor.proxy().lines() == [
        "✓ proxy: none: NO_PROXY=localhost,.deepseek.com matches api.deepseek.com (direct)"]


async def test_no_secret_reaches_the_report(env: dict[str, str], fault_server: FaultServer) -> None:
    env["DEEPSEEK_API_KEY"] = canaries.API_KEY
    fault_server.account = "unauthorized"
    report, lines = await _report(env, f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:"
                                       f"{fault_server.port}/?k={canaries.URL_QUERY}")
    text = "\n".join(lines) + json.dumps(report.to_dict())
    for secret in (canaries.API_KEY, canaries.URL_USER, canaries.URL_PASSWORD, canaries.URL_QUERY):
        assert secret not in text


async def test_each_configured_subagent_is_checked(env: dict[str, str], fault_server: FaultServer) -> None:
    config = _config(env, fault_server.url)
    tables = {"probe": {"provider": "acp", "command": sys.executable, "args": ["-m", "dsh.repl.demo.acp_agent"]},
              "dead": {"provider": "acp", "command": sys.executable, "args": ["-m", "dsh.repl.demo.acp_agent"],
                       "env": {"ACP_FAKE_EXIT_AT": "initialize", "ACP_FAKE_EXIT_CODE": "9"}},
              "gone": {"provider": "acp", "command": "dsh-no-such-agent"},
              "typo": {"provider": "acp", "command": "x", "colour": "red"},
              "cx": {"provider": "codex", "command": [sys.executable, "-m", "dsh.repl.demo.fake_codex_app_server"]}}
    import dataclasses

    doctor = Doctor(dataclasses.replace(config, subagents=tables), env, stdout=_NotATerminal())
    step = await doctor.environment()
    assert step.status == "fail"
    assert step.details == [
        f"✓ probe (acp): command found ({sys.executable}); initialize answered: fixtures-acp-agent 0.1; "
        "session/new answered",
        "✗ dead (acp): Subagent failure (provider: dead; stage: initialize; category: process-exit; exit code: 9)",
        "✗ gone (acp): command not found: dsh-no-such-agent",
        "✗ typo (acp): [subagents.typo] unknown keys: colour",
        f"✓ cx (codex): {sys.executable} starts (--version exited 0)",
    ]
    assert step.text.endswith("; 5 subagents configured")


async def test_an_acp_agent_that_wants_authentication_fails_with_the_methods_it_offers(
    env: dict[str, str], fault_server: FaultServer
) -> None:
    import dataclasses

    agent = {"provider": "acp", "command": sys.executable, "args": ["-m", "dsh.repl.demo.acp_agent"]}
    offered = "agent-login=Log in with the agent;api-key=\x1b[31mAPI key\u202e;" + "".join(
        f"m{n}=Method {n};" for n in range(5))
    tables = {
        # initialize answers; only session/new says -32000: a check that stopped at initialize would pass it.
        "locked": {**agent, "env": {"ACP_FAKE_ERROR_AT": "new-session", "ACP_FAKE_ERROR": "auth",
                                    "ACP_FAKE_AUTH_METHODS": offered}},
        "bare": {**agent, "env": {"ACP_FAKE_ERROR_AT": "initialize", "ACP_FAKE_ERROR": "auth"}},
        "broken": {**agent, "env": {"ACP_FAKE_ERROR_AT": "new-session"}},
    }  # fmt: skip
    doctor = Doctor(dataclasses.replace(_config(env, fault_server.url), subagents=tables), env,
                    stdout=_NotATerminal())
    step = await doctor.environment()
    auth = "error code: -32000 (authentication required)); authentication required, the agent's auth methods: "
    assert step.details == [
        "✗ locked (acp): Subagent failure (provider: locked; stage: new-session; category: agent-error; " + auth
        + "agent-login (Log in with the agent), api-key (\x1b[31mAPI key\u202e), m0 (Method 0), m1 (Method 1), "
        "m2 (Method 2), 2 more",
        "✗ bare (acp): Subagent failure (provider: bare; stage: initialize; category: transport); "
        "authentication required, the agent's auth methods: none advertised",
        "✗ broken (acp): Subagent failure (provider: broken; stage: new-session; category: agent-error; "
        "error code: -32603 (internal error))",
    ]


def _dsh(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], env={**env, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)


async def test_dsh_doctor_exits_0_when_every_step_passes_and_1_otherwise(env: dict[str, str],
                                                                         fault_server: FaultServer) -> None:
    import anyio

    ok = await anyio.to_thread.run_sync(_dsh, ["doctor", "--base-url", fault_server.url], env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "doctor: every step passed" and ok.stderr == ""
    with closed_port() as port:
        bad = await anyio.to_thread.run_sync(_dsh, ["doctor", "--json", "--base-url", f"http://127.0.0.1:{port}"], env)
    assert bad.returncode == 1
    data = json.loads(bad.stdout)
    assert data["ok"] is False and data["failed_step"] == "TCP"
    assert [step["status"] for step in data["steps"]] == ["pass", "pass", "pass", "fail", "skip", "skip", "skip",
                                                          "skip", "pass"]
    assert data["steps"][3]["fix"] == f"fix: nothing is listening at 127.0.0.1:{port} — check --base-url (flag)"


async def test_dsh_doctor_reports_a_broken_config_file_as_its_first_step(env: dict[str, str]) -> None:
    import anyio

    folder = Path(env["XDG_CONFIG_HOME"]) / "dsh"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text("max_tokens = -1\n")
    run = await anyio.to_thread.run_sync(_dsh, ["doctor"], env)
    assert run.returncode == 1
    assert run.stdout.splitlines()[0] == (f"✗ configuration: config file {folder / 'config.toml'}: max_tokens must be "
                                          "a positive integer, got -1")
    assert run.stdout.splitlines()[-1] == "doctor: failed at configuration"


async def test_slash_doctor_in_the_demo_checks_the_demo_endpoint(env: dict[str, str]) -> None:
    import contextlib

    from dsh.repl.demo.catalogue import start_demo
    from dsh.repl.demo.endpoint import demo_endpoint

    sink = ListSink()
    async with contextlib.AsyncExitStack() as stack:
        demo = await start_demo(stack, "text")
        shell = Shell(Config(), PlainFrontEnd(sink), color=False, env=env, endpoint=demo_endpoint(demo))
        stack.push_async_callback(shell.aclose)
        await shell.start()
        await commands.dispatch(shell, "/doctor")
    lines = [_ms(line) for line in sink.text.splitlines()]
    assert lines[0] == (f"✓ configuration: base_url {demo.server.url} (the demo scenario); model deepseek-flash "
                        "(default); key not needed (demo)")
    assert lines[-1] == "doctor: every step passed"
    assert "  /doctor            check each step of a request to the endpoint (like dsh doctor)" in \
        commands.help_text(demo=False)


# -- a real proxy (tinyproxy, a Debian package; skipped locally without it, required under CI) -------------

from tests.llm.test_real_proxies import _PASSWORD, tinyproxy  # noqa: E402, F401 (the fixture)


async def test_through_tinyproxy_every_step_passes_and_tls_goes_through_its_tunnel(
        env: dict[str, str], tls_fault_server: FaultServer, tinyproxy: str) -> None:  # noqa: F811
    env["SSL_CERT_FILE"] = tls_fault_server.tls_ca_file
    env["HTTPS_PROXY"] = f"http://dshuser:{_PASSWORD}@{tinyproxy}"
    report, lines = await _report(env, tls_fault_server.tls_url)
    host = tinyproxy.split(":")[0]
    assert lines[1:5] == [
        f"✓ proxy: http://***@{tinyproxy} carries requests to 127.0.0.1 (HTTPS_PROXY (environment))",
        f"✓ DNS: {host} is an address (no lookup)",
        f"✓ TCP: {tinyproxy} connected in <ms>",
        "✓ TLS: TLSv1.3 (through the proxy's tunnel); subject CN=dsh fault server (self-signed); issuer CN=dsh "
        f"fault server (self-signed); 1 day to expiry; verified against SSL_CERT_FILE={tls_fault_server.tls_ca_file}",
    ]
    assert report.ok, lines
    assert _PASSWORD not in "\n".join(lines)


async def test_wrong_proxy_credentials_fail_at_tls_as_a_turn_fails(
        env: dict[str, str], tls_fault_server: FaultServer, tinyproxy: str) -> None:  # noqa: F811
    env["HTTPS_PROXY"] = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@{tinyproxy}"
    url = tls_fault_server.tls_url
    _, lines = await _report(env, url)
    assert lines[4:6] == [
        f"✗ TLS: [PROXY] request to the endpoint at {url} via proxy http://***@{tinyproxy} failed: 401 Unauthorized",
        "  fix: the proxy refused the credentials — check the user:password in HTTPS_PROXY (environment)",
    ]
    turn = await _turn_failure(env, _config(env, url))
    assert turn.endswith(lines[4].removeprefix("✗ TLS: [PROXY] "))


def test_a_real_lookup_of_a_name_that_does_not_exist_fails_at_dns(env: dict[str, str], tmp_path: Path) -> None:
    # The real resolver, in a loopback-only namespace that reads /etc/hosts alone: no query leaves.
    from tests.real_parts import isolated_resolver

    done = subprocess.run(
        [*isolated_resolver(tmp_path), sys.executable, "-m", "dsh.repl", "doctor", "--base-url",
         "https://api.deepseek.invalid"],
        env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60, check=False,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stderr
    assert lines[2:4] == [
        "✗ DNS: [TRANSPORT] request to the endpoint at https://api.deepseek.invalid failed: "
        "[Errno -2] Name or service not known",
        "  fix: the host name api.deepseek.invalid does not exist — check --base-url (flag)",
    ]
    assert lines[-1] == "doctor: failed at DNS"


# --- docs/doctor.md's step table -----------------------------------------------------------------------------


def test_the_step_table_has_a_row_for_every_step_and_the_mcp_lines_as_printed() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "doctor.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| `")]
    assert rows == [f"`{name}`" for name in (*STEPS, "sandbox", "MCP server NAME", "hook")]  # in the order doctor runs
    exited = McpFailure(Stage.INITIALIZE, Category.PROCESS_EXIT, exit_status=ExitStatus(3, None))
    shown = [ServerStatus("fx", "ready", tools=7), ServerStatus("off", "disabled"),
             ServerStatus("bad", "failed", line=failure_line("bad", exited))]
    for row in shown:
        [line] = mcp_step(row, {}).lines()
        assert f"`{line}`" in text, line
    slow = {"slow": SimpleNamespace(startup_timeout=30.0)}
    [line] = mcp_step(ServerStatus("slow", "starting"), slow).lines()  # type: ignore[dict-item]
    assert f"`{line.split(') ', 1)[1]}`" in text, line  # the suffix after the failure line
