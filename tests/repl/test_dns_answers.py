"""A DNS failure says which it is and never blames a setting the user did not set (issue 42 item 1;
docs/contracts.md, "Fix lines"; docs/reliability.md, "DNS").

Each case runs the real `dsh -p` or `dsh doctor` inside a loopback-only namespace whose only resolver is a
loopback DNS server (tests/loopback_dns.py) answering NXDOMAIN, SERVFAIL or nothing: the real getaddrinfo
meets each answer, and no query leaves the machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import canaries
from tests.loopback_dns import answer
from tests.real_parts import loopback_resolver
from tests.repl.test_cli import REPO, base_env, write_config
from tests.repl.test_record_replay import turn_end

DEFAULT = "https://api.deepseek.com"
NOT_EXIST = "[Errno -2] Name or service not known"
UNRESOLVED = "[Errno -3] Temporary failure in name resolution"
DEFAULT_DENIED = ("  fix: this machine's DNS says api.deepseek.com (dsh's default host) does not exist — check DNS or"
                  " the network")
DEFAULT_UNRESOLVED = "  fix: the host name api.deepseek.com could not be resolved — check DNS or the network"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    write_config(tmp_path, "max_retries = 0\n")  # a name that could not be resolved is retried otherwise
    return tmp_path


def _dsh(home: Path, dns: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    directory = home / f"dns-{dns}"
    directory.mkdir(exist_ok=True)
    prefix = loopback_resolver(directory, dns)
    return subprocess.run([*prefix, sys.executable, "-m", "dsh.repl", *args], cwd=REPO,
                          env=base_env(home, DEEPSEEK_API_KEY=canaries.API_KEY, **env),
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("dns", "root", "fix"), [
    ("nxdomain", NOT_EXIST, DEFAULT_DENIED),
    ("servfail", UNRESOLVED, DEFAULT_UNRESOLVED),
    ("silent", UNRESOLVED, DEFAULT_UNRESOLVED),
])
def test_the_default_host_that_does_not_resolve_sends_the_user_to_dns_not_to_base_url(
        home: Path, dns: str, root: str, fix: str) -> None:
    done = _dsh(home, dns, "-p", "hi")
    assert (done.returncode, turn_end(done.stderr)) == (1, [
        f"[turn failed TRANSPORT] DeepSeek API request to {DEFAULT} failed: {root}", fix]), done.stderr
    assert "base_url" not in done.stderr and "--base-url" not in done.stderr


def test_a_host_the_user_set_that_dns_denies_does_not_exist_and_names_the_setting(home: Path) -> None:
    url = "https://llm.corp.example"
    done = _dsh(home, "nxdomain", "-p", "hi", DEEPSEEK_BASE_URL=url)
    assert (done.returncode, turn_end(done.stderr)) == (1, [
        f"[turn failed TRANSPORT] request to the endpoint at {url} failed: {NOT_EXIST}",
        "  fix: the host name llm.corp.example does not exist — check DEEPSEEK_BASE_URL (environment)",
    ]), done.stderr


def test_a_host_the_user_set_that_dns_cannot_answer_for_is_not_said_not_to_exist(home: Path) -> None:
    url = "https://llm.corp.example"
    done = _dsh(home, "servfail", "-p", "hi", DEEPSEEK_BASE_URL=url)
    assert turn_end(done.stderr) == [
        f"[turn failed TRANSPORT] request to the endpoint at {url} failed: {UNRESOLVED}",
        "  fix: the host name llm.corp.example could not be resolved — check DNS or the network",
    ], done.stderr


@pytest.mark.parametrize(("dns", "line", "fix"), [
    ("nxdomain", NOT_EXIST, DEFAULT_DENIED),
    ("servfail", UNRESOLVED, DEFAULT_UNRESOLVED),
    ("silent", UNRESOLVED, DEFAULT_UNRESOLVED),
])
def test_doctor_says_what_the_turn_says(home: Path, dns: str, line: str, fix: str) -> None:
    done = _dsh(home, dns, "doctor")
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stderr
    assert lines[2:4] == [f"✗ DNS: [TRANSPORT] DeepSeek API request to {DEFAULT} failed: {line}", fix]
    assert lines[-1] == "doctor: failed at DNS"


def test_a_name_the_user_set_that_dns_cannot_answer_for_is_retried(home: Path) -> None:
    write_config(home, "max_retries = 1\n")
    done = _dsh(home, "servfail", "-p", "hi", DEEPSEEK_BASE_URL="https://llm.corp.example")
    assert "[retry 1/1 in " in done.stderr, done.stderr  # transient: a resolver may answer on the next try


def test_the_loopback_server_answers_hostile_queries_without_crashing() -> None:
    assert answer(b"", 3) is None
    assert answer(b"\x00" * 11, 3) is None
    reply = answer(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x3f" + b"x" * 3, 2)  # a label past the end
    assert reply is not None and reply[:2] == b"\x12\x34" and reply[3] & 0x0F == 2
