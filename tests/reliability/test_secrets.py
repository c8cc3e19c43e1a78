"""Secrets: canaries planted everywhere a secret can come from never reach a rendered line, log or diagnostic.

Real sessions (the real REPL as a child, piped, ``-p``, a pty, and with the subagent tool wired in) with
the canaries of tests/canaries.py in: ``DEEPSEEK_API_KEY``; the base URL's userinfo and query; proxy URLs;
a subagent's env; a subagent's stderr; upstream error bodies and payloads that echo key-shaped values
and URLs. Every stdout/stderr transcript lands under tmp_path (so the suite-wide scan in tests/conftest.py
greps it along with the host logs and session logs) and each test also asserts zero hits directly.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pexpect
from dsh_harness import COUNTS, REPO, Home, config_text, dsh_env, make_home, read_log, run_dsh

from dsh.llm.loopback.fault_server import Behaviour, FaultServer, closed_port
from dsh.repl import demo
from tests import canaries

STRICT = canaries.STRICT
ACP_AGENT = str(Path(demo.__file__).with_name("acp_agent.py"))
_files_checked: set[str] = set()


def _files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and not path.is_symlink()]


def assert_no_canaries(home: Home, *texts: str) -> None:
    """Zero hits in the given texts and in every file the user's HOME holds (transcripts, logs, sessions)."""
    blobs = {f"text {n}": text.encode() for n, text in enumerate(texts)}
    for path in _files_under(home.root):
        blobs[str(path)] = path.read_bytes()
        _files_checked.add(str(path))
    hits = [f"{where}: {canary}" for where, blob in blobs.items() for canary in STRICT if canary.encode() in blob]
    assert hits == []
    COUNTS["canary checks (canary x artifact, 0 hits)"] += len(STRICT) * len(blobs)


def _canary_url(port: int, path: str = "/v1") -> str:
    return f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{port}{path}?api_key={canaries.URL_QUERY}"


def _echoing_upstream() -> list[Behaviour | str]:
    """An upstream that echoes everything it should not: the key, key-shaped values, the request URL."""
    echoed_url = f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1/v1?api_key={canaries.URL_QUERY}"
    return [
        Behaviour("http_401", message=f"Authentication Fails, Your api key: {canaries.API_KEY} is invalid"),
        "text",
        Behaviour("http_500", message=f"upstream echo {canaries.UPSTREAM_KEY}; Authorization: Bearer "
                                      f"{canaries.API_KEY}"),
        Behaviour("http_500", message=f"still failing for {canaries.UPSTREAM_KEY}"),
        Behaviour("malformed_json", payload=f'{{"key": "{canaries.API_KEY}", "echo": "{canaries.UPSTREAM_KEY}"'),
        Behaviour("http_400", message=f"no route for {echoed_url} (key {canaries.UPSTREAM_KEY})"),
        Behaviour("http_429", message=f"slow down {canaries.API_KEY}", retry_after="0.1"),
        "text",
    ]


def test_piped_session_against_an_upstream_that_echoes_secrets(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text(max_retries=1))
    with FaultServer(script=_echoing_upstream()) as server:
        run = run_dsh(home, ["--base-url", _canary_url(server.port)],
                      ["first", "/why", "second", "third", "/why", "fourth", "fifth", "sixth", "/why", "/sessions"],
                      env={"DEEPSEEK_API_KEY": canaries.API_KEY}, key=None, label="echoing-upstream")
        requests = list(server.requests)
    assert run.returncode == 0 and run.stderr == ""
    # The secrets did reach the places they are meant for ...
    assert requests[0].headers["authorization"] == f"Bearer {canaries.API_KEY}"
    assert requests[0].path == "/v1/chat/completions" and canaries.URL_QUERY in requests[0].query
    # ... and the user still sees every failure, masked.
    assert "[turn failed AUTH] Authentication Fails, Your api key: *** is invalid" in run.stdout
    assert "[retry 1/1 in 0.5s] SERVER: upstream echo sk-***; Authorization: ***" in run.stdout
    assert "[turn failed SERVER] still failing for sk-***" in run.stdout
    assert '[turn failed MALFORMED_RESPONSE] malformed SSE payload: {"key": "***", "echo": "sk-***"' in run.stdout
    assert "[turn failed INVALID_REQUEST] no route for http://***@127.0.0.1/v1 (key sk-***)" in run.stdout
    assert "  dsh.llm.errors.LlmError: Authentication Fails, Your api key: *** is invalid\n" in run.stdout  # /why
    assert_no_canaries(home, run.stdout, run.stderr)


def test_print_mode_and_startup_failures_with_a_secret_laden_base_url(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    with FaultServer(script=[Behaviour("http_403", message=f"key {canaries.API_KEY} may not do this")]) as server:
        failed = run_dsh(home, ["--base-url", _canary_url(server.port), "-p", "hello"],
                         env={"DEEPSEEK_API_KEY": canaries.API_KEY}, key=None, label="print")
    assert failed.returncode == 1 and failed.stdout == "" and failed.stderr == (  # -p: diagnostics on stderr
        "[turn failed AUTH] key *** may not do this\n"
        "  fix: the API key was refused — check DEEPSEEK_API_KEY (environment)\n"
    )
    runs = [failed]
    for variant in ({"args": ["--base-url", _canary_url(99999), "-p", "x"]},
                    {"args": ["-p", "x"], "env": {"DEEPSEEK_BASE_URL": _canary_url(99999)}},
                    {"args": ["--base-url", f"ftp://{canaries.URL_USER}:{canaries.URL_PASSWORD}@h/?q="
                                            f"{canaries.URL_QUERY}", "-p", "x"]}):
        env = {"DEEPSEEK_API_KEY": canaries.API_KEY, **variant.get("env", {})}
        run = run_dsh(home, variant["args"], env=env, key=None, label="startup")
        assert run.returncode == 2 and run.stdout == ""
        assert re.fullmatch(r"dsh: failed to start: .*(http|ftp)://\*\*\*@[^ ]*'\n", run.stderr), run.stderr
        runs.append(run)
    assert_no_canaries(home, *(run.stdout + run.stderr for run in runs))


def test_proxy_credentials_never_show(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    with closed_port() as port:
        proxy = f"http://{canaries.URL_USER}:{canaries.PROXY_PASSWORD}@127.0.0.1:{port}"
        env = {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "ALL_PROXY": proxy, "DEEPSEEK_API_KEY": canaries.API_KEY}
        https = run_dsh(home, ["--base-url", "https://api.deepseek.invalid"], ["hi", "/why"], env=env, key=None,
                        label="https-proxy")
        plain = run_dsh(home, ["--base-url", "http://api.deepseek.invalid"], ["hi", "/why"], env=env, key=None,
                        label="http-proxy")
    refused = f"All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', {port})"
    for run, scheme in ((https, "https"), (plain, "http")):
        # The proxy carried the request, so the failure is the proxy's, named with its credentials masked.
        assert run.stdout.startswith(f"[main turn 1] [turn failed PROXY] request to the endpoint at "
                                     f"{scheme}://api.deepseek.invalid via proxy http://***@127.0.0.1:{port} "
                                     f"failed: {refused}\n"), run.stdout
        assert "ConnectionRefusedError" in run.stdout  # /why ran and shows the typed chain
    assert_no_canaries(home, https.stdout, plain.stdout, https.stderr, plain.stderr)


def _subagent_config(child_url: str) -> str:
    env_line = (f'SECRET_SETTING = "{canaries.CHILD_ENV}", '
                f'ACP_FAKE_STDERR_TEXT = "Traceback: {canaries.CHILD_STDERR} {canaries.CHILD_ENV}"')
    return config_text() + f"""
[subagents.acp_exit]
provider = "acp"
command = ["{sys.executable}", "{ACP_AGENT}"]
env = {{ {env_line}, ACP_FAKE_EXIT_AT = "prompt", ACP_FAKE_EXIT_CODE = "5" }}

[subagents.acp_error]
provider = "acp"
command = ["{sys.executable}", "{ACP_AGENT}"]
env = {{ {env_line}, ACP_FAKE_ERROR_AT = "new-session", ACP_FAKE_GARBAGE = "1" }}

[subagents.acp_echo_env]
provider = "acp"
command = ["{sys.executable}", "{ACP_AGENT}"]
env = {{ ACP_FAKE_ECHO = "env" }}

[subagents.dsh_child]
provider = "dsh"
base_url = "{child_url}"
env = {{ SECRET_SETTING = "{canaries.CHILD_ENV}" }}

[subagents.dsh_scripted]
provider = "dsh"
command = ["{sys.executable}", "-m", "dsh.repl.demo.scripted_dsh_child"]
env = {{ PYTHONPATH = "{REPO}", DSH_SCRIPTED_CHILD = '{json.dumps({
    "stderr": f"child stderr {canaries.CHILD_STDERR}", "prompt": "error",
    "error_message": f"boom {canaries.UPSTREAM_KEY} {canaries.CHILD_ENV}"})}' }}
"""


def _delegate(provider: str) -> Behaviour:
    arguments = {"description": "probe", "prompt": f"do the task {canaries.TASK_TEXT}", "provider": provider}
    return Behaviour("tool_call", name="subagent", arguments=json.dumps(arguments), id=f"call_{provider}")


def test_subagent_env_stderr_and_upstream_secrets_stay_out_of_diagnostics(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    providers = ["acp_exit", "acp_error", "acp_echo_env", "dsh_child", "dsh_scripted"]
    upstream = Behaviour("http_401", message=f"child key {canaries.API_KEY} rejected; echo {canaries.UPSTREAM_KEY}")
    with FaultServer(script=[upstream]) as child_server, tempfile.TemporaryDirectory() as private:
        # The config holds the canaries (it is an input): it lives outside the scanned tmp tree.
        config = Path(private) / "config.toml"
        config.write_text(_subagent_config(child_server.url), encoding="utf-8")
        script: list[Behaviour | str] = []
        for provider in providers:
            script += [_delegate(provider), "text"]
        with FaultServer(script=script) as server:
            run = run_dsh(home, ["--base-url", server.url, "--config", str(config)],
                          [f"delegate to {p}" for p in providers], timeout=180,
                          env={"DEEPSEEK_API_KEY": canaries.API_KEY, "DSH_PARENT_ONLY": canaries.CHILD_ENV},
                          key=None, label="subagents")
    assert run.returncode == 0 and run.stderr == "", run.stderr[-600:]
    fail = "    Subagent failure (provider: {}; stage: {}; category: {})"
    expected = [
        fail.format("acp_exit", "process", "process-exit; exit code: 5"),
        fail.format("acp_error", "new-session", "agent-error; error code: -32603 (internal error)"),
        fail.format("dsh_child", "session-run", "child-error; stop reason: error"),
        fail.format("dsh_scripted", "session-run", "protocol"),
    ]
    for line in expected:
        assert f"  [tool result] Error: subagent run failed\n{line}\n" in run.stdout, run.stdout
    # The echoing child saw only the allowlist: neither the parent's key nor its other variables.
    _, records = read_log(home.only_session())
    echoed = next(r["data"]["output"] for r in records
                  if r["type"] == "tool/result" and r["data"]["id"] == "call_acp_echo_env")
    assert "PATH=" in echoed and "DSH_PARENT_ONLY" not in echoed and "DEEPSEEK_API_KEY" not in echoed
    for secret in (canaries.TASK_TEXT, canaries.CHILD_STDERR, "Traceback"):
        assert all(secret not in line for line in run.stdout.split("\n") if "Subagent failure" in line)
        assert all(secret not in str(r["data"]) for r in records if r["type"] == "tool/result")  # the model's
    # The agent's own words are kept host-side, the secret in them masked (assert_no_canaries: nowhere else).
    host_log = (home.state_dir / "dsh" / "dsh.log").read_text(encoding="utf-8")
    assert f"    Traceback: {canaries.CHILD_STDERR} ***\n" in host_log
    assert_no_canaries(home, run.stdout, run.stderr)


# --- the interactive front end: banner and toolbar show the endpoint ------------------------------------------

PROMPT = re.compile(r"\x1b\[0m>(?:\x1b|\s)")


def test_interactive_banner_toolbar_and_why_on_a_pty(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    transcript = home.root / "transcript-pty.txt"
    with FaultServer(script=[Behaviour("http_401", message=f"bad {canaries.API_KEY}")]) as server:
        env = dsh_env(home, {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "DEEPSEEK_API_KEY": canaries.API_KEY})
        child = pexpect.spawn(sys.executable, ["-m", "dsh.repl", "--base-url", _canary_url(server.port)],
                              cwd=str(home.workspace), env=env, encoding="utf-8", timeout=20, dimensions=(40, 200))
        seen = ""
        try:
            with transcript.open("w", encoding="utf-8") as log:
                child.logfile_read = log
                child.expect(PROMPT)
                child.send("hello\r")
                child.expect_exact("[turn failed AUTH] bad ***")
                child.expect(PROMPT)
                child.send("/why\r")
                child.expect_exact("AUTH")
                child.expect(PROMPT)
                child.sendeof()
                child.expect(pexpect.EOF)
                seen = child.before or ""
        finally:
            child.close(force=True)
    text = transcript.read_text(encoding="utf-8") + seen
    assert f"http://***@127.0.0.1:{server.port}/v1" in text  # banner / toolbar: the endpoint, masked
    assert_no_canaries(home, text)


def test_every_file_this_module_checked_is_also_under_the_session_scan(tmp_path_factory) -> None:
    # The suite-wide scan greps pytest's base temp; all of the above lives there.
    base = str(tmp_path_factory.getbasetemp())
    assert _files_checked and all(path.startswith(base) for path in _files_checked)
    COUNTS["files checked for canaries in test_secrets"] = len(_files_checked)
    COUNTS["canary values planted"] = len(STRICT)
    assert os.environ.get("DEEPSEEK_API_KEY") != canaries.API_KEY  # the parent suite never held it


def test_bare_echo_of_base_url_credentials_is_masked(tmp_path: Path) -> None:
    user, password, token = "bareEchoUser31", "bareEchoPass31", "bareEchoToken31"
    home = make_home(tmp_path, config_text())
    message = f"proxy auth for {user} with password {password} failed; token={token}"
    with FaultServer(script=[Behaviour("http_401", message=message)]) as server:
        run = run_dsh(home, ["--base-url", f"http://{user}:{password}@127.0.0.1:{server.port}/v1?token={token}",
                             "-p", "x"], label="bare-echo")
    assert run.returncode == 1
    for value in (user, password, token):
        assert value not in run.stdout + run.stderr


def test_a_plain_key_in_the_prompt_is_refused_and_secret_named_variables_are_masked(tmp_path: Path) -> None:
    plain_key = "plainCanaryKey0193"  # no key shape: only its being the configured key can catch it
    service_token = "canaryServiceToken5522"  # the value of a secret-named variable of dsh's environment
    home = make_home(tmp_path, config_text())
    script: list[Behaviour | str] = [Behaviour("http_500", message=f"upstream saw {service_token}")]
    with FaultServer(script=script) as server:
        run = run_dsh(home, ["--base-url", server.url],
                      [f"my key is {plain_key}", "second"],
                      env={"DEEPSEEK_API_KEY": plain_key, "MY_SERVICE_TOKEN": service_token}, key=None,
                      label="plain-key")
        requests = list(server.requests)
    shown = run.stdout + run.stderr
    assert "[turn rejected] prompt contains the configured API key; not sent" in shown
    assert "upstream saw ***" in shown
    assert len(requests) == 1 and plain_key not in json.dumps(requests[0].json["messages"])
    written = "".join(path.read_text(errors="replace") for path in home.root.rglob("*") if path.is_file())
    for secret in (plain_key, service_token):
        assert secret not in shown and secret not in written
