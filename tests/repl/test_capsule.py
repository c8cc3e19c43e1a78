"""``dsh -p … --report FILE``: a failed turn's capsule, masked, 0600, that ``dsh --replay`` runs offline.

Real parts only: the ``dsh -p`` child against the fault server (a real HTTP 500 and a real mid-stream
reset), then ``dsh --replay CAPSULE`` with the server stopped and no key. Canary secrets are planted where
a capsule could pick them up: the API key, base-URL credentials and query, an MCP server's header
credential, a secret-named environment variable (its value in the prompt itself) and a key the server
echoes; none may appear anywhere in the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from fixtures.mcp_servers import OK_TOOLS, stdio_command
from tests import canaries
from tests.repl.test_cli import REPO, dsh, write_config
from tests.repl.test_record_replay import base_url, turn_end

# Secrets of this test alone: the session log keeps the user's own words (the prompt), so these are not in
# canaries.STRICT, whose suite-wide scan covers every file; the capsule is checked for them here.
ENV_SECRET = "canaryReportEnvSecret5521"  # a secret-named variable's value, pasted into the prompt
HEADER_SECRET = "canaryReportHeaderSecret7730"  # an MCP server's header credential, from ${REPORT_TOKEN}
# An MCP server whose header carries a credential (the server is not there: its failure is a notice).
MCP = '[mcp_servers.remote]\nurl = "http://127.0.0.1:9/mcp"\nheaders = { Authorization = "Bearer ${REPORT_TOKEN}" }\n'


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _live(home: Path, fault: FaultServer, capsule: Path, *args: str) -> object:
    prompt = f"hi, my token is {ENV_SECRET}"  # the user pasted a secret-named variable's value
    return dsh(home, "-p", prompt, "--report", str(capsule), *args, timeout=90, DEEPSEEK_API_KEY=canaries.API_KEY,
               DEEPSEEK_BASE_URL=base_url(fault), GITHUB_TOKEN=ENV_SECRET, REPORT_TOKEN=HEADER_SECRET)


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [
        pytest.param(Behaviour("http_500", message=f"upstream said {canaries.UPSTREAM_KEY}"), "SERVER", id="http-500"),
        pytest.param(Behaviour("reset_mid_stream"), "TRANSPORT", id="reset-mid-stream"),
    ],
)
def test_a_failed_turn_s_capsule_is_masked_0600_and_replays_to_the_same_turn_end_line(
    home: Path, fault: FaultServer, behaviour: Behaviour, code: str
) -> None:
    capsule = home / "capsule.jsonl"
    write_config(home, "max_retries = 0\n" + MCP)
    fault.push(behaviour)  # the turn's request; the doctor's steps afterwards get plain answers
    live = _live(home, fault, capsule)
    assert live.returncode == 1, live.stderr
    *end, said = turn_end(live.stderr)
    assert end[0].startswith(f"[turn failed {code}]"), live.stderr
    assert said == f"dsh: report written to {capsule}"

    text = capsule.read_text(encoding="utf-8")
    for canary in (*canaries.STRICT, ENV_SECRET, HEADER_SECRET):
        assert canary not in text, canary
    assert stat.S_IMODE(capsule.stat().st_mode) == 0o600
    records = _records(capsule)
    header, report, exchange = records[0], records[1], records[2:]
    assert header["type"] == "dsh-failure-capsule" and header["version"] == 1
    assert header["timeouts"] and header["base_url"].startswith("http://***@127.0.0.1:")
    assert report["type"] == "report"
    assert report["turn"] == end[0] and report["fix"] == (end[1].strip() if len(end) > 1 else None)
    assert report["why"][0].startswith(f"last failure ({code}")
    assert report["settings"]["api_key"] == {"value": {"set": True}, "source": "DEEPSEEK_API_KEY (environment)"}
    assert report["settings"]["mcp_servers"]["value"] == {"remote": ["headers", "url"]}
    assert [step["step"] for step in report["doctor"]["steps"]][:3] == ["configuration", "proxy", "DNS"]
    assert report["trust"]["store"] and report["exchanges"] == {"turn": 1, "kept": 1, "ring": "on"}
    assert exchange[0]["type"] == "request" and {r["n"] for r in exchange} == {1}
    assert exchange[-1]["type"] == "end"
    assert "my token is ***" in exchange[0]["body"]

    fault.stop()  # offline, no key
    write_config(home, "")  # the capsule's max_retries = 0 is the replay's: no retry asks beyond it
    replayed = dsh(home, "-p", "hi", "--replay", str(capsule))
    assert replayed.returncode == 1, replayed.stderr
    assert turn_end(replayed.stderr) == end


def test_report_is_written_only_when_the_turn_fails(home: Path, fault: FaultServer) -> None:
    capsule = home / "capsule.jsonl"
    write_config(home, "max_retries = 0\n")
    done = _live(home, fault, capsule)
    assert done.returncode == 0, done.stderr
    assert not capsule.exists() and "report" not in done.stderr

    fault.push(Behaviour("http_500"))
    failed = _live(home, fault, capsule, "--output-format", "json")
    assert failed.returncode == 1  # the turn's status, the report notwithstanding
    assert json.loads(failed.stdout)["exit_code"] == 1
    assert capsule.exists() and failed.stderr.splitlines()[-1] == f"dsh: report written to {capsule}"


def test_a_symbolic_link_at_the_report_path_is_refused_before_the_turn(home: Path, fault: FaultServer) -> None:
    target = home / "elsewhere"
    target.write_text("keep me\n")
    link = home / "capsule.jsonl"
    os.symlink(target, link)
    write_config(home, "max_retries = 0\n")
    result = _live(home, fault, link)
    assert result.returncode == 2
    assert result.stderr == (f"dsh: failed to start: report file {link} cannot be written: it is a symbolic link, "
                             "not a regular file\n")
    assert target.read_text() == "keep me\n" and not fault.requests


def test_report_needs_print_mode(home: Path) -> None:
    result = dsh(home, "--report", "x.jsonl")
    assert result.returncode == 2
    assert "--report works only with -p/--print (in the REPL: /report [FILE])" in result.stderr


def test_piped_report_holds_only_the_failed_turn_s_exchanges_numbered_from_one(home: Path, fault: FaultServer) -> None:
    capsule = home / "capsule.jsonl"
    write_config(home, "max_retries = 0\n")
    fault.push(Behaviour("text", text="first answer"), Behaviour("http_500"))
    result = dsh(home, stdin=f"hello\nagain\n/report {capsule}\n", timeout=90, DEEPSEEK_API_KEY=canaries.API_KEY,
                 DEEPSEEK_BASE_URL=fault.url)
    assert f"report written to {capsule}" in result.stdout + result.stderr, result
    records = _records(capsule)
    exchange = records[2:]
    assert records[1]["exchanges"] == {"turn": 1, "kept": 1, "ring": "on"}
    assert [(r["type"], r["n"]) for r in exchange] == [("request", 1), ("response", 1), ("data", 1), ("end", 1)]
    assert exchange[1]["status"] == 500
    body = json.loads(exchange[0]["body"])  # the second turn's request: the first answer is in its history
    assert [m["content"] for m in body["messages"] if m["role"] != "system"][-3:] == ["hello", "first answer", "again"]


def test_report_ring_bytes_0_turns_the_ring_off_and_a_bad_value_stops_dsh(home: Path, fault: FaultServer) -> None:
    capsule = home / "capsule.jsonl"
    write_config(home, "max_retries = 0\nreport_ring_bytes = 0\n")
    fault.push(Behaviour("http_500"))
    result = _live(home, fault, capsule)
    assert result.returncode == 1
    records = _records(capsule)
    assert [r["type"] for r in records] == ["dsh-failure-capsule", "report"]  # the report, no exchange
    assert records[1]["exchanges"] == {"turn": 0, "kept": 0, "ring": "off"}

    write_config(home, "report_ring_bytes = -1\n")
    bad = _live(home, fault, capsule)
    config = home / "config" / "dsh" / "config.toml"
    assert (bad.returncode, bad.stderr) == (2, f"dsh: failed to start: config file {config}: report_ring_bytes must be "
                                                "an integer from 0 to 67108864 (64 MiB), got -1\n")


def test_the_capsule_holds_an_mcp_server_s_frames_as_closed_facts(home: Path, fault: FaultServer) -> None:
    """A real MCP server (the fixture, over stdio) talked to dsh before the turn failed: the report has the
    frames' facts (kind, known method, id), never what they carried (its tool names and descriptions)."""
    capsule = home / "capsule.jsonl"
    command = json.dumps(stdio_command("ok"))
    write_config(home, f'max_retries = 0\n[mcp_servers.ok]\ncommand = {command}\ncwd = "{REPO}"\n')
    fault.push(Behaviour("http_500"))
    live = _live(home, fault, capsule)
    assert live.returncode == 1, live.stderr
    report = _records(capsule)[1]
    frames = report["frames"]["mcp ok"]
    shape = [(f["direction"], f["kind"], f.get("method")) for f in frames]
    assert shape[:3] == [("sent", "request", "initialize"), ("received", "response", None),
                         ("sent", "notification", "notifications/initialized")]
    assert ("sent", "request", "tools/list") in shape
    assert all(set(f) <= {"t", "direction", "kind", "method", "id", "code", "size"} for f in frames)
    text = json.dumps(report["frames"])
    assert all(name not in text for name in OK_TOOLS)
