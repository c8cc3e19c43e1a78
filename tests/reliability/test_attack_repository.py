"""Attacks from a hostile repository: starting the real dsh in it sends no secret and runs no program of its own.

Issue 21, holes 2 and 3 (docs/reliability.md, "Attacks from a hostile repository"). Each attack is a
repository as the victim gets it (built, then copied with ``cp -a``, as archives and shared mounts also
leave it) and ``dsh -p hello`` run in it as a child process against the loopback fault server, whose
recorded request bodies show what the provider would have received. Before the fix, ``AGENTS.md ->
/proc/self/environ`` sent the API key in the first request and the repository's clean filter ran.
The fuzzers below drive the same boundary in process: any symlink chain, any secret around the cap.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import pytest
from dsh_harness import COUNTS, FIGURES, Home, Run, make_home, run_dsh
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop.context import INSTRUCTIONS_CAP_BYTES, gather_project_context
from dsh.llm.loopback.fault_server import FaultServer
from dsh.llm.redact import Redactor
from tests import canaries
from tests.hostile_repository import committed_repository, copied_like_cp_a, git, leaves_marker, write_pem_key

PLAIN_CANARY = "canaryPlainEnviron4821"  # in a variable whose name does not look secret: only the path rule stops it
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQcanaryPem"
# Written into a file, so not one of tests/canaries.py's (the suite-end scan greps every file for those).
USER_WRITTEN_KEY = "sk-userWrittenKey0123456789abcdef"


def cloned_into_workspace(
    home: Home, configure: Sequence[tuple[str, str]] = (), plant: Mapping[str, str] | None = None
) -> Path:
    """The attacker's repository (config set, symlinks planted), copied with ``cp -a`` to where dsh starts."""
    origin = committed_repository(home.root / "origin")
    for key, value in configure:
        git(origin, "config", key, value)
    for name, target in (plant or {}).items():
        (origin / name).symlink_to(target)
    shutil.rmtree(home.workspace)
    return copied_like_cp_a(origin, home.workspace)


def sent(server: FaultServer) -> str:
    """Every request body the endpoint received, as one text."""
    return "\n".join(json.dumps(request.json, ensure_ascii=False) for request in server.requests)


def system_prompt(server: FaultServer) -> str:
    [request] = server.requests
    return request.json["messages"][0]["content"]


def attack(home: Home, server: FaultServer, label: str, env: dict[str, str] | None = None, **options: object) -> Run:
    run = run_dsh(home, ["--base-url", server.url, "-p", "hello"], env=env, label=label, **options)
    COUNTS["hostile repositories started in (dsh -p)"] += 1
    FIGURES[f"hostile repository: {label}"] = f"{run.seconds:.2f}s to the answer, exit {run.returncode}"
    return run


# --- hole 3: a program named by the repository -----------------------------------------------------------


def test_a_clean_filter_in_a_copied_repository_does_not_run_and_the_status_is_unknown(
    tmp_path: Path, server: FaultServer
) -> None:
    home = make_home(tmp_path)
    marker = tmp_path / "filter-ran"
    workspace = cloned_into_workspace(home, [("filter.x.clean", leaves_marker(marker))])
    run = attack(home, server, "clean filter")
    assert not marker.exists()
    assert (run.returncode, run.stdout) == (0, "Hello! How can I help you today?\n")
    assert run.stderr.splitlines() == [
        "[context] git status left out: the repository's git config sets filter.x.clean (a program git would run)"]
    assert f"- git: repository root {workspace}, branch main, status unknown" in system_prompt(server)
    # The attack is live: git status in the same copy runs the program.
    subprocess.run(["git", "status", "--porcelain"], cwd=workspace, env={**os.environ, "HOME": str(home.root)},
                   capture_output=True, check=False)
    assert marker.exists()


def test_the_demo_started_in_such_a_repository_runs_nothing_either(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    marker = tmp_path / "filter-ran"
    cloned_into_workspace(home, [("filter.x.clean", leaves_marker(marker))])
    run = run_dsh(home, ["--demo", "-p", "hello"], label="demo in a hostile repository")
    assert not marker.exists()
    assert run.returncode == 0 and run.stdout.startswith("Hello from the dsh demo!")
    assert "[context] git status left out: the repository's git config sets filter.x.clean" in run.stderr


def test_its_hooks_and_fsmonitor_do_not_run_and_the_status_is_still_known(tmp_path: Path, server: FaultServer) -> None:
    home = make_home(tmp_path)
    marker = tmp_path / "hook-ran"
    program = tmp_path / "program.sh"
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\n", encoding="utf-8")
    program.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-index-change").symlink_to(program)
    workspace = cloned_into_workspace(home, [("core.hooksPath", str(hooks)), ("core.fsmonitor", str(program))])
    run = attack(home, server, "hooks and fsmonitor")
    assert not marker.exists()
    assert (run.returncode, run.stderr) == (0, "")
    assert f"- git: repository root {workspace}, branch main, clean" in system_prompt(server)


# --- hole 2: what AGENTS.md sends --------------------------------------------------------------------------


def test_agents_md_linked_to_proc_self_environ_and_secrets_the_user_wrote_are_not_sent(
    tmp_path: Path, server: FaultServer
) -> None:
    home = make_home(tmp_path)
    workspace = cloned_into_workspace(home, plant={"AGENTS.md": "/proc/self/environ"})
    user_file = home.config_dir / "dsh" / "AGENTS.md"
    user_file.parent.mkdir(parents=True)
    write_pem_key(user_file, KEY_BODY)
    with user_file.open("a", encoding="utf-8") as file:
        file.write(f"Deploy with {USER_WRITTEN_KEY}.\n")
    env = {"DEEPSEEK_API_KEY": canaries.API_KEY, "DSH_ATTACK_PLAIN": PLAIN_CANARY,
           "DATABASE_URL": f"postgres://app:{canaries.URL_PASSWORD}@db.internal/app"}
    run = attack(home, server, "AGENTS.md to proc-self-environ", env=env, key=None)
    body = sent(server)
    leaked = [value for value in (canaries.API_KEY, PLAIN_CANARY, canaries.URL_PASSWORD, USER_WRITTEN_KEY,
                                  KEY_BODY) if value in body]
    assert leaked == []
    assert "Deploy with sk-***." in body and "-----BEGIN OPENSSH PRIVATE KEY-----***" in body
    assert (run.returncode, run.stdout) == (0, "Hello! How can I help you today?\n")
    assert run.stderr.splitlines() == [
        f"[context] {user_file} sent with secrets masked (***)",
        f"[context] {workspace / 'AGENTS.md'} left out: it is a symlink to a path outside the repository",
    ]
    COUNTS["secrets a hostile repository reached for, checked in every request body (0 sent)"] += 5


def test_agents_md_linked_to_a_private_key_outside_the_repository_is_not_sent(
    tmp_path: Path, server: FaultServer
) -> None:
    home = make_home(tmp_path)
    (home.root / ".ssh").mkdir()
    write_pem_key(home.root / ".ssh" / "id_ed25519", KEY_BODY)
    workspace = cloned_into_workspace(home, plant={"AGENTS.md": "../.ssh/id_ed25519"})
    run = attack(home, server, "AGENTS.md to a private key outside")
    assert KEY_BODY not in sent(server) and "PRIVATE KEY" not in sent(server)
    assert run.returncode == 0
    assert run.stderr.splitlines() == [
        f"[context] {workspace / 'AGENTS.md'} left out: it is a symlink to a path outside the repository"]


# --- fuzzing the boundary ------------------------------------------------------------------------------------

OUTSIDE_TEXT = "OUTSIDE-CANARY-TEXT"
INSIDE_TEXT = "INSIDE-TEXT"
_SEGMENTS = ["..", ".", "repo", "docs", "outside", "inside.md", "secret.md", "link_in", "link_out", "loop", "back",
             "AGENTS.md", ""]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``repo/`` (the working directory, no git) with links that stay in or lead out, beside ``outside/``."""
    base = tmp_path_factory.mktemp("symlink-tree")
    (base / "repo" / "docs").mkdir(parents=True)
    (base / "outside").mkdir()
    (base / "repo" / "docs" / "inside.md").write_text(INSIDE_TEXT, encoding="utf-8")
    (base / "outside" / "secret.md").write_text(OUTSIDE_TEXT, encoding="utf-8")
    (base / "repo" / "docs" / "link_in").symlink_to("inside.md")
    (base / "repo" / "docs" / "link_out").symlink_to("../../outside/secret.md")
    (base / "repo" / "docs" / "loop").symlink_to("loop")
    (base / "outside" / "back").symlink_to("../repo/docs/inside.md")
    return base


def _targets(base: Path) -> st.SearchStrategy[str]:
    relative = st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=6).map("/".join).filter(bool)
    absolute = relative.map(lambda path: f"{base}/{path}")
    special = st.sampled_from(["/proc/self/environ", "/proc/self/cmdline", "/dev/zero", "/etc/passwd", "/"])
    return st.one_of(relative, absolute, special)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_an_agents_md_symlink_is_read_only_when_it_stays_inside_and_is_a_regular_file(
    tree: Path, data: st.DataObject
) -> None:
    repo = tree / "repo"
    link = repo / "AGENTS.md"
    target = data.draw(_targets(tree), label="target")
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    context = anyio.run(lambda: gather_project_context(repo, env={}, user_dir=None))
    prompt = context.system_prompt()
    assert OUTSIDE_TEXT not in prompt and "PATH=" not in prompt and "root:" not in prompt
    real = os.path.realpath(link)
    readable = real.startswith(f"{os.path.realpath(repo)}/") and os.path.isfile(real)
    assert (INSIDE_TEXT in prompt) == readable
    if readable:
        assert context.notices == ()
    else:
        [notice] = context.notices
        assert notice.startswith(f"{link} left out: it ")


_SECRET = st.one_of(
    st.text("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789", min_size=20, max_size=40).map(
        lambda chars: ("key", "sk-" + chars)),
    st.text("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=12, max_size=30).map(lambda chars: ("known", chars)),
    st.text("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=24, max_size=60).map(
        lambda chars: ("pem", f"-----BEGIN RSA PRIVATE KEY-----\n{chars}\n-----END RSA PRIVATE KEY-----")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=_SECRET, before_cap=st.integers(min_value=-80, max_value=12))
def test_fuzz_a_secret_anywhere_around_the_cap_is_never_sent_even_in_part(
    tmp_path_factory: pytest.TempPathFactory, secret: tuple[str, str], before_cap: int
) -> None:
    kind, value = secret
    directory = tmp_path_factory.mktemp("cap")
    start = INSTRUCTIONS_CAP_BYTES + before_cap  # where the secret starts; the cap cuts it when it straddles
    filler = ("word " * (start // 5 + 1))[: start - 1] + " "
    (directory / "AGENTS.md").write_text(f"{filler}{value} and after\n", encoding="utf-8")
    redactor = Redactor([value] if kind == "known" else [])
    context = anyio.run(lambda: gather_project_context(directory, env={}, user_dir=None, redactor=redactor))
    prompt = context.system_prompt()
    piece = value.split("\n")[1][:8] if kind == "pem" else value[:6]
    assert piece not in prompt
