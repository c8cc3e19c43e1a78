"""``/report`` with no FILE writes under dsh's state directory, never into the current folder (issue 42 item 4;
docs/reporting.md): ``$XDG_STATE_HOME/dsh/reports/`` made 0700, the capsule 0600, its name the session id and
the UTC time, and the path printed. A real piped REPL against the fault server's real HTTP 500.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.wire_trace import CAPSULE_TYPE
from tests import canaries
from tests.repl.test_cli import base_env, write_config

_WRITTEN = re.compile(r"report written to (\S+) \(it holds this turn's requests, like --record: read it before you "
                      r"share it\)")


def _report(home: Path, fault: FaultServer, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    project = home / "project"
    project.mkdir(exist_ok=True)
    write_config(home, "max_retries = 0\n")
    fault.push(Behaviour("http_500"))
    result = subprocess.run([sys.executable, "-m", "dsh.repl"], cwd=project, input="hello\n/report\n",
                            env=base_env(home, DEEPSEEK_API_KEY=canaries.API_KEY, DEEPSEEK_BASE_URL=fault.url, **env),
                            capture_output=True, text=True, timeout=90, check=False)
    return result, project


def test_a_report_with_no_file_goes_to_the_state_directory_0700_and_0600_and_says_where(
        home: Path, fault: FaultServer) -> None:
    result, project = _report(home, fault)
    match = _WRITTEN.search(result.stdout + result.stderr)
    assert match, result.stdout + result.stderr
    capsule = Path(match.group(1))
    folder = home / "state" / "dsh" / "reports"
    assert capsule.parent == folder
    assert re.fullmatch(r"dsh-report-[0-9A-Za-z_-]+-\d{8}T\d{6}Z\.jsonl", capsule.name), capsule.name
    assert (stat.S_IMODE(folder.stat().st_mode), stat.S_IMODE(capsule.stat().st_mode)) == (0o700, 0o600)
    assert list(project.iterdir()) == []  # nothing in the folder a `git status` would show
    header, report = (json.loads(line) for line in capsule.read_text(encoding="utf-8").splitlines()[:2])
    assert report["turn"].startswith("[turn failed SERVER]")
    assert header["type"] == CAPSULE_TYPE


def test_a_reports_folder_made_open_before_is_closed_to_others(home: Path, fault: FaultServer) -> None:
    folder = home / "state" / "dsh" / "reports"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    result, _ = _report(home, fault)
    assert _WRITTEN.search(result.stdout + result.stderr), result.stdout + result.stderr
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_state_directory_that_cannot_hold_the_folder_is_one_line_not_a_traceback(
        home: Path, fault: FaultServer) -> None:
    (home / "state" / "dsh").mkdir(parents=True)
    (home / "state" / "dsh" / "reports").write_text("a file where the folder goes", encoding="utf-8")
    result, project = _report(home, fault)
    said = result.stdout + result.stderr
    assert f"/report failed: report folder under {home / 'state' / 'dsh'} cannot be made: File exists" in said, said
    assert "Traceback" not in said and list(project.iterdir()) == []
