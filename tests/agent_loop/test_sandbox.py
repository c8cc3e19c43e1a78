"""run_shell under real bubblewrap (docs/safety.md, "The sandbox"): what a sandboxed command can and cannot do.

Each test runs the real ``run_shell`` tool with a sandbox over a git repository made in a tmp dir (never
this checkout: a repository without ``.git/hooks`` gets an empty one). Without bwrap they skip with the
install line; under ``CI=true`` that is a failure (``.ci/run`` installs bubblewrap).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.sandbox import (
    MISSING,
    NO_USERNS,
    Sandbox,
    bwrap_argv,
    classify_failure,
    sandbox_check,
    sandbox_of,
    sandbox_problem,
)
from dsh.agent_loop.tools import ToolContext, ToolOutput, ToolRegistry, run_shell_tool, run_tool_call
from dsh.llm.events import ToolCall
from tests.leak_check import live_processes_running
from tests.real_parts import missing
from tests.waiting import PROMPTLY, async_wait_until, wait_until


def sleepers(token: str) -> list[int]:
    """Live ``sleep TOKEN`` processes anywhere (a sandbox's own pid namespace, a setsid escapee)."""
    return live_processes_running("sleep", token)


pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture(scope="module")
def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
    problem = sandbox_problem()
    if problem is not None:
        missing("a working bubblewrap", problem)
    return found


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path, bwrap: str) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main", ".")
    (tree / "README").write_text("hello\n")
    git(tree, "add", "README")
    git(tree, "commit", "-q", "-m", "first")
    return tree


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory the test can write on the host, outside the tree and outside /tmp (the sandbox's /tmp is
    its own, so a path there would be missing, not read-only)."""
    directory = Path(tempfile.mkdtemp(prefix="dsh-sandbox-", dir="/var/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def run(tree: Path, command: str, *, network: bool = False, cwd: Path | None = None) -> ToolOutput:
    async def yes(request: object) -> str:
        return "yes"

    tool = run_shell_tool(sandbox=Sandbox(network=network))
    ctx = ToolContext(cwd=cwd or tree, turn=1, notify=lambda event: None, approver=yes)
    result = await tool.run({"command": command}, ctx)
    assert isinstance(result, ToolOutput)
    return result


def attempt(label: str, action: str) -> str:
    """A shell line that prints ``label: ok`` or ``label: refused`` (the shell's own message hidden)."""
    return f"if ( {action} ) 2>/dev/null; then echo '{label}: ok'; else echo '{label}: refused'; fi"


async def test_a_sandboxed_command_writes_inside_the_tree_and_nowhere_else(repo: Path, outside: Path) -> None:
    home = Path(os.path.expanduser("~"))
    marker = f"dsh-sandbox-{uuid.uuid4().hex}"
    command = "; ".join([
        attempt("tree", "echo inside > made.txt && cat made.txt >/dev/null"),
        attempt("subdir", "mkdir -p sub/deeper && echo x > sub/deeper/f"),
        attempt("etc", f"echo x > /etc/{marker}"),
        attempt("home", f"echo x > {home}/{marker}"),
        attempt("outside", f"echo x > {outside}/{marker}"),
        attempt("read", "cat /etc/hostname >/dev/null"),
    ])
    result = await run(repo, command)
    assert result.text == (
        "tree: ok\nsubdir: ok\netc: refused\nhome: refused\noutside: refused\nread: ok\n[exit code: 0] (sandboxed)"
    )
    assert (repo / "made.txt").read_text() == "inside\n" and (repo / "sub/deeper/f").read_text() == "x\n"
    assert not any(path.exists() for path in (Path("/etc") / marker, home / marker, outside / marker))


async def test_git_config_and_hooks_stay_read_only_and_git_still_works(repo: Path) -> None:
    command = "; ".join([
        attempt("config", "echo '[core] hooksPath = /x' >> .git/config"),
        attempt("hook", "printf '#!/bin/sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"),
        attempt("move .git", "mv .git .git-aside"),
        attempt("remove config", "rm -f .git/config"),
        attempt("commit", "echo two > two && git add two && git commit -q -m two"),
    ])
    before = (repo / ".git" / "config").read_bytes()
    result = await run(repo, f"export {' '.join(f'{k}={v}' for k, v in GIT_ENV.items())}; {command}")
    assert result.text == (
        "config: refused\nhook: refused\nmove .git: refused\nremove config: refused\ncommit: ok\n"
        "[exit code: 0] (sandboxed)"
    )
    assert (repo / ".git" / "config").read_bytes() == before
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert git(repo, "log", "--format=%s") == "two\nfirst\n"


async def test_a_missing_hooks_directory_cannot_be_created_with_a_hook_in_it(repo: Path) -> None:
    shutil.rmtree(repo / ".git" / "hooks")
    result = await run(repo, attempt("hook", "mkdir -p .git/hooks && echo x > .git/hooks/pre-commit"))
    assert result.text == "hook: refused\n[exit code: 0] (sandboxed)"
    assert list((repo / ".git" / "hooks").iterdir()) == []  # the empty mount point, as `git init` makes


async def test_a_submodule_s_config_and_hooks_stay_read_only_and_it_still_commits(repo: Path, outside: Path) -> None:
    """A superproject's ``git status`` reads each submodule's config (``core.fsmonitor`` runs a program) from
    ``.git/modules/NAME``: a command cannot plant one there, nor move the directory aside and replace it."""
    sub = outside / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main", ".")
    git(sub, "commit", "-q", "--allow-empty", "-m", "s")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "libs/sub")
    module = repo / ".git" / "modules" / "libs" / "sub"
    before = (module / "config").read_bytes()
    command = "; ".join([
        attempt("config", "echo '[core] fsmonitor = touch planted' >> .git/modules/libs/sub/config"),
        attempt("hook", "echo x > .git/modules/libs/sub/hooks/post-checkout"),
        attempt("move module", "mv .git/modules/libs/sub .git/modules/libs/aside"),
        attempt("move modules", "mv .git/modules .git/modules-aside"),
        attempt("new module", "mkdir .git/modules/evil"),
        attempt("commit in it", "cd libs/sub && git commit -q --allow-empty -m inside"),
    ])
    result = await run(repo, f"export {' '.join(f'{k}={v}' for k, v in GIT_ENV.items())}; {command}")
    assert result.text == (
        "config: refused\nhook: refused\nmove module: refused\nmove modules: refused\nnew module: refused\n"
        "commit in it: ok\n[exit code: 0] (sandboxed)"
    )
    assert (module / "config").read_bytes() == before and not (module / "hooks" / "post-checkout").exists()
    assert git(repo / "libs" / "sub", "log", "--format=%s", "-1") == "inside\n"
    # A submodule's own modules/ did not exist (it has no submodules): one made refuses the next command.
    sandbox = Sandbox()
    await run_call(sandbox, repo, "mkdir -p .git/modules/libs/sub/modules/evil")
    assert (await run_call(sandbox, repo, "true")).text == refusal(".git/modules/libs/sub/modules")


async def test_in_a_linked_worktree_the_git_directories_outside_the_tree_are_read_only(repo: Path, outside: Path
                                                                                       ) -> None:
    """A linked worktree's git directory and the shared one lie outside its tree: read-only, so git commands that
    write fail inside the sandbox (docs/safety.md says so); the ``.git`` file cannot be pointed elsewhere."""
    # Outside /tmp, so that the main tree is on the read-only host file system, not hidden by the private /tmp.
    shutil.move(repo, outside / "tree")
    repo = outside / "tree"
    worktree = outside / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    common = repo / ".git"
    command = "; ".join([
        attempt("shared config", f"echo x >> {common}/config"),
        attempt("shared hook", f"echo x > {common}/hooks/post-checkout"),
        attempt("commondir", f"echo /tmp > {common}/worktrees/linked/commondir"),
        attempt(".git file", "echo 'gitdir: /tmp/elsewhere' > .git"),
        attempt("main tree", f"echo x > {repo}/README"),
        attempt("commit", "echo w > w && git add w && git commit -q -m in-worktree"),
        attempt("status", "git status --porcelain >/dev/null"),
    ])
    result = await run(worktree, f"export {' '.join(f'{k}={v}' for k, v in GIT_ENV.items())}; {command}")
    assert result.text == (
        "shared config: refused\nshared hook: refused\ncommondir: refused\n.git file: refused\n"
        "main tree: refused\ncommit: refused\nstatus: ok\n[exit code: 0] (sandboxed)"
    )
    assert git(worktree, "log", "--format=%s", "-1") == "first\n"
    assert (repo / "README").read_text() == "hello\n" and (worktree / "w").exists()  # the tree itself was written


# --- the plan: decided at the first command, checked before each --------------------------------------------


def refusal(path: str) -> str:
    return (f"Error: run_shell refused: {path} changed since dsh started; the sandbox's writable set was decided at "
            "start (restore the file or restart dsh)")


async def run_call(sandbox: Sandbox, cwd: Path, command: str) -> ToolOutput:
    """``command`` as the agent runs a tool call (an exception becomes an error result), with ``sandbox``."""
    tools = ToolRegistry([run_shell_tool(sandbox=sandbox)])
    result = await run_tool_call(tools, ToolCall("c1", "run_shell", json.dumps({"command": command})),
                                 ToolContext(cwd=cwd, turn=1, notify=lambda event: None, approver=_yes))
    assert isinstance(result, ToolOutput)
    return result


@pytest.mark.parametrize(
    ("planted", "path"),
    [
        ("echo .. > .git/commondir", ".git/commondir"),  # today inside the tree: still followed by git
        ("echo ../.. > .git/gitdir", ".git/gitdir"),
        ("touch .git/config.worktree", ".git/config.worktree"),
        ("mkdir -p .git/modules/x && echo '[core]' > .git/modules/x/config", ".git/modules"),
        ("echo 'gitdir: ..' > src/.git", "src/.git"),  # dsh's own git would take src/ for the repository
    ],
)
async def test_a_pointer_a_command_made_refuses_the_next_command(repo: Path, planted: str, path: str) -> None:
    (repo / "src").mkdir()
    sandbox = Sandbox()
    first = await run_call(sandbox, repo / "src", f"cd {repo} && {planted}")
    assert first.text == "(no output)\n[exit code: 0] (sandboxed)"
    result = await run_call(sandbox, repo / "src", "echo ran > ran.txt")
    assert (result.text, result.is_error) == (refusal(path), True)
    assert not (repo / "src" / "ran.txt").exists()


async def test_git_s_own_work_and_the_user_s_git_config_refuse_nothing(repo: Path) -> None:
    """What git writes in its directory as it works (index, objects, refs, logs, packs, stash), and the user's own
    ``git config`` outside the sandbox (config rewritten), leave the plan as it was: no command is refused."""
    sandbox = Sandbox()
    work = "; ".join([f"export {' '.join(f'{k}={v}' for k, v in GIT_ENV.items())}",
                      "echo two > two && git add two && git commit -q -m two", "git checkout -q -b side",
                      "echo three > two && git stash -q", "git gc -q", "git status --porcelain"])
    assert (await run_call(sandbox, repo, work)).text == "(no output)\n[exit code: 0] (sandboxed)"
    git(repo, "config", "user.name", "someone")
    assert (await run_call(sandbox, repo, "git log --format=%s")).text == "two\nfirst\n[exit code: 0] (sandboxed)"


async def test_the_plan_is_kept_where_it_was_made_and_a_fresh_sandbox_is_not_fooled(repo: Path, outside: Path) -> None:
    """A ``commondir`` pointing out of the tree is never bound writable, by the sandbox that saw it appear (it
    refuses) nor by one made after (a rebuilt agent, a subagent's own dsh)."""
    sandbox = Sandbox()
    await run_call(sandbox, repo, f"echo {outside} > .git/commondir")
    assert (await run_call(sandbox, repo, "true")).text == refusal(".git/commondir")
    fresh = await run_call(Sandbox(), repo, f"echo x > {outside}/planted")
    assert fresh.text.endswith("Read-only file system\n[exit code: 2] (sandboxed)")
    assert not (outside / "planted").exists()


async def test_a_git_directory_swapped_between_commands_refuses(tmp_path: Path, bwrap: str, outside: Path) -> None:
    """The git directory is a mount point, but a directory above it in the tree is not: moved aside and replaced,
    the path would reach another directory."""
    tree = tmp_path / "tree"
    (tree / "a" / "gd").mkdir(parents=True)
    git(tree / "a" / "gd", "init", "-q", "--bare", ".")
    (tree / ".git").write_text("gitdir: a/gd\n")
    sandbox = Sandbox()
    first = await run_call(sandbox, tree, "mv a a2 && mkdir -p a/gd && echo '[core]' > a/gd/config")
    assert first.text == "(no output)\n[exit code: 0] (sandboxed)"
    assert (await run_call(sandbox, tree, "true")).text == refusal("a/gd")


@pytest.mark.parametrize("pointed", ["/run", "/dev", "/tmp"])
async def test_a_pointer_out_of_the_tree_brings_back_nothing_the_sandbox_hides(tmp_path: Path, bwrap: str,
                                                                             pointed: str) -> None:
    """A git directory outside the tree is never bound writable, and only a real one under /tmp is bound at all:
    ``gitdir: /run`` would put the host's sockets (the D-Bus buses) back, ``/dev`` its devices, ``/tmp`` its X
    server's and tmux's sockets."""
    listing = "ls -A /run /dev; ls -A /tmp | wc -l"
    plain, tree = tmp_path / "plain", tmp_path / "tree"
    plain.mkdir()
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {pointed}\n")
    assert (await run(tree, listing)).text == (await run(plain, listing)).text


async def test_a_hooks_symlink_replaced_by_a_directory_refuses_the_next_command(repo: Path) -> None:
    """``.git/hooks -> ../githooks``: the target is read-only, but the link itself is no mount point."""
    shutil.rmtree(repo / ".git" / "hooks")
    (repo / "githooks").mkdir()
    (repo / ".git" / "hooks").symlink_to("../githooks")
    sandbox = Sandbox()
    first = await run_call(sandbox, repo, "; ".join([
        attempt("through the link", "echo x > .git/hooks/pre-commit"),
        attempt("replace the link", "rm .git/hooks && mkdir .git/hooks && echo x > .git/hooks/pre-commit"),
    ]))
    assert first.text == "through the link: refused\nreplace the link: ok\n[exit code: 0] (sandboxed)"
    assert (await run_call(sandbox, repo, "true")).text == refusal(".git/hooks")


@pytest.mark.parametrize(("name", "text"), [(".git", "gitdir: a\0b\n"), (".git/commondir", "..\0x\n")])
async def test_a_nul_in_a_pointer_is_no_path(tmp_path: Path, bwrap: str, name: str, text: str) -> None:
    tree = tmp_path / "tree"
    (tree / name).parent.mkdir(parents=True, exist_ok=True)
    (tree / name).write_text(text)
    assert (await run(tree, "echo x > made.txt")).text == "(no output)\n[exit code: 0] (sandboxed)"


async def test_the_refused_path_is_shown_inert(tmp_path: Path, bwrap: str) -> None:
    tree = tmp_path / "tree"
    name = "g\x1b[2J\u202ed\nforged line"
    (tree / name).mkdir(parents=True)
    git(tree / name, "init", "-q", "--bare", ".")
    (tree / ".git").write_text(f"gitdir: {name}\n")
    sandbox = Sandbox()
    await run_call(sandbox, tree, f"echo x > '{name}/commondir'")
    result = await run_call(sandbox, tree, "true")
    assert result.text == refusal("g\\u001b[2J\\u202ed\\nforged line/commondir")


async def test_a_hooks_path_folder_inside_the_tree_is_read_only_also_when_missing(repo: Path) -> None:
    git(repo, "config", "core.hooksPath", "tools/hooks")
    (repo / "githooks").mkdir()
    result = await run(repo, "; ".join([
        attempt("hook", "mkdir -p tools/hooks && echo x > tools/hooks/pre-commit"),
        attempt("elsewhere", "echo x > githooks/pre-commit"),  # not the configured folder: an ordinary file
    ]))
    assert result.text == "hook: refused\nelsewhere: ok\n[exit code: 0] (sandboxed)"
    assert list((repo / "tools" / "hooks").iterdir()) == []  # the empty mount point, as for .git/hooks


def test_sandbox_of_is_one_per_process_so_a_rebuilt_agent_keeps_the_plans() -> None:
    assert sandbox_of("bwrap", False) is sandbox_of("bwrap", False)
    assert sandbox_of("bwrap", True) is not sandbox_of("bwrap", False) and sandbox_of(None, False) is None


async def test_a_command_in_a_subdirectory_gets_the_whole_work_tree(repo: Path) -> None:
    (repo / "src").mkdir()
    result = await run(repo, attempt("parent", "echo x > ../top.txt") + "; pwd", cwd=repo / "src")
    assert result.text == f"parent: ok\n{os.path.realpath(repo / 'src')}\n[exit code: 0] (sandboxed)"
    assert (repo / "top.txt").exists()


async def test_tmp_is_private(repo: Path) -> None:
    name = f"/tmp/dsh-sandbox-{uuid.uuid4().hex}"
    result = await run(repo, f"echo private > {name} && cat {name} && ls -A /tmp | wc -l")
    assert result.text == "private\n2\n[exit code: 0] (sandboxed)"  # the file, and the directory down to the tree
    assert not Path(name).exists()


async def test_run_is_empty_so_its_unix_sockets_are_out_of_reach(repo: Path) -> None:
    """A read-only /run would still let a command connect() to the sockets there (the D-Bus buses, where
    ``systemd-run --user`` starts anything; Docker's): it is an empty file system instead. With the network on,
    the resolver's configuration is still read."""
    assert os.listdir("/run")  # the host's /run has something in it to hide
    assert (await run(repo, "ls -A /run | wc -l")).text == "0\n[exit code: 0] (sandboxed)"
    host = Path("/etc/resolv.conf").read_text().rstrip("\n")
    assert (await run(repo, "cat /etc/resolv.conf", network=True)).text == f"{host}\n[exit code: 0] (sandboxed)"


@contextlib.contextmanager
def loopback_http() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"reached")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetch(tree: Path, port: int) -> str:
    """A command that GETs the loopback server and prints its body, or the kind of failure."""
    (tree / "fetch.py").write_text(
        "import urllib.request\n"
        "try:\n"
        f"    print(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=30).read().decode())\n"
        "except OSError as exc:\n"
        "    print(type(getattr(exc, 'reason', exc)).__name__)\n"
    )
    # The interpreter itself, not the venv's link to it: a clone under /tmp (as CI's is) has its venv hidden by the
    # sandbox's private /tmp; the script needs the standard library only.
    return f"{os.path.realpath(sys.executable)} -I fetch.py"


async def test_no_network_unless_sandbox_network(repo: Path) -> None:
    with loopback_http() as port:
        assert (await run(repo, fetch(repo, port))).text == "ConnectionRefusedError\n[exit code: 0] (sandboxed)"
        assert (await run(repo, fetch(repo, port), network=True)).text == "reached\n[exit code: 0] (sandboxed)"


async def test_cancel_kills_the_command_and_everything_it_started(repo: Path) -> None:
    # A plain child, a background one and a setsid escapee (its own session and group: the process group
    # signal cannot reach it; the pid namespace's end does). Each writes its pid before sleeping.
    token = f"{600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"  # a sleep nobody else runs
    command = (
        f"setsid sh -c 'echo $$ > escapee.pid; exec sleep {token}' & "
        f"sh -c 'echo $$ > background.pid; exec sleep {token}' & "
        f"echo $$ > leader.pid; sleep {token}; wait"
    )
    pids = ("escapee.pid", "background.pid", "leader.pid")
    async with anyio.create_task_group() as group:
        group.start_soon(run, repo, command)
        await async_wait_until(lambda: all((repo / name).exists() for name in pids) and len(sleepers(token)) == 3,
                               PROMPTLY, "the sandboxed command and its children to start")
        group.cancel_scope.cancel()
    assert all((repo / name).read_text().strip().isdigit() for name in pids)
    wait_until(lambda: not sleepers(token), PROMPTLY, "every sandboxed process to be gone")


async def test_the_timeout_kills_a_sandboxed_command(repo: Path) -> None:
    async def yes(request: object) -> str:
        return "yes"

    tool = run_shell_tool(sandbox=Sandbox())
    ctx = ToolContext(cwd=repo, turn=1, notify=lambda event: None, approver=yes)
    result = await tool.run({"command": "echo started; sleep 600", "timeout_s": 1}, ctx)
    assert isinstance(result, ToolOutput) and result.is_error
    assert result.text == "started\n[timed out after 1s; the command was killed] (sandboxed)"


@pytest.mark.parametrize(
    ("command", "status"),
    [
        ("kill -KILL $$", "[killed by SIGKILL]"),
        ("kill -TERM $$", "[killed by SIGTERM]"),
        ("exit 137", "[exit code: 137]"),  # what bwrap alone reports for SIGKILL
        # The status pipe is not the command's: writing a fake status to every fd it might be changes nothing.
        ("for fd in 3 4 5 6 7 8 9 10 11 12; do (eval \"printf 9 >&$fd\") 2>/dev/null; done; exit 143",
         "[exit code: 143]"),
    ],
)
async def test_a_signal_is_named_as_without_the_sandbox(repo: Path, command: str, status: str) -> None:
    """bwrap exits 128+N for a command killed by signal N; the result names the signal, as an unsandboxed
    command's does, and tells it apart from an exit 128+N (docs/safety.md)."""
    sandboxed = await run(repo, command)
    bare = await run_shell_tool(sandbox=None).run(
        {"command": command}, ToolContext(cwd=repo, turn=1, notify=lambda event: None, approver=_yes))
    assert isinstance(bare, ToolOutput)
    assert sandboxed.text == f"(no output)\n{status} (sandboxed)" and sandboxed.is_error
    assert bare.text == f"(no output)\n{status}"


async def test_the_environment_is_the_allowlist(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_SANDBOX_SECRET_TOKEN", "not-for-children")
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    result = await run(repo, "env | cut -d= -f1 | sort | tr '\\n' ' '")
    names = set(result.text.split("\n")[0].split())
    assert "DSH_SANDBOX_SECRET_TOKEN" not in names and "TMPDIR" not in names and "PATH" in names


async def test_without_bwrap_on_path_the_command_is_not_run_unsandboxed(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError):
        await run(repo, "echo ran > ran.txt")
    assert not (repo / "ran.txt").exists()


async def test_a_tree_that_would_be_the_root_is_refused(tmp_path: Path, bwrap: str) -> None:
    # A working directory of / (no git repository above it) would make the whole file system writable.
    tools = ToolRegistry([run_shell_tool(sandbox=Sandbox())])
    result = await run_tool_call(tools, ToolCall("c1", "run_shell", '{"command": "true"}'),
                                 ToolContext(cwd=Path("/"), turn=1, notify=lambda event: None,
                                             approver=_yes))
    assert result.text == (
        "Error: the sandbox cannot run a command whose project tree is / (start dsh in a project)"
    ) and result.is_error


async def _yes(request: object) -> str:
    return "yes"


# --- the check -------------------------------------------------------------------------------------


def test_the_check_passes_where_bwrap_works(bwrap: str) -> None:
    assert sandbox_check() is None


def test_a_missing_bwrap_names_the_package_and_the_install_command(tmp_path: Path) -> None:
    assert sandbox_problem({"PATH": str(tmp_path)}) == (
        'sandbox = "bwrap" but bwrap is not installed: install Debian\'s bubblewrap package '
        "(sudo apt-get install bubblewrap)"
    )
    assert sandbox_check({"PATH": str(tmp_path)}) is MISSING


def test_a_bwrap_refused_user_namespaces_names_the_sysctl(tmp_path: Path) -> None:
    # The words bubblewrap 0.8 prints on a kernel that refuses unprivileged user namespaces; this machine
    # allows them, so a stand-in bwrap says them (the classification is what is under test).
    stand_in = tmp_path / "bwrap"
    stand_in.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel does not "
        "allow non-privileged user namespaces. On e.g. debian this can be enabled with "
        "'\\''sysctl kernel.unprivileged_userns_clone=1'\\''.' >&2\nexit 1\n"
    )
    stand_in.chmod(0o755)
    assert sandbox_problem({"PATH": str(tmp_path)}) == (
        'sandbox = "bwrap" but this system does not let bwrap create user namespaces: allow them with sudo '
        "sysctl kernel.unprivileged_userns_clone=1 (Debian) or user.max_user_namespaces=15000 "
        "(on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)"
    )


def test_another_failure_gives_its_status_and_never_the_stderr(tmp_path: Path) -> None:
    stand_in = tmp_path / "bwrap"
    stand_in.write_text("#!/bin/sh\necho 'bwrap: secret-looking /home/u/.ssh/id_rsa: No such file' >&2\nexit 7\n")
    stand_in.chmod(0o755)
    assert sandbox_problem({"PATH": str(tmp_path)}) == (
        'sandbox = "bwrap" but bwrap cannot start a sandbox here (exit status 7): check it with '
        "bwrap --ro-bind / / true"
    )


@given(st.integers(min_value=1, max_value=255), st.text())
def test_no_stderr_text_reaches_the_line(status: int, stderr: str) -> None:
    problem = classify_failure(status, stderr)
    assert problem is NO_USERNS or problem.line == (
        f'sandbox = "bwrap" but bwrap cannot start a sandbox here (exit status {status}): check it with '
        "bwrap --ro-bind / / true"
    )


@given(st.lists(st.text(), min_size=1, max_size=4))
def test_the_command_is_one_argv_after_the_options(argv: list[str]) -> None:
    # Nothing in a command can become a bwrap option: it follows "--", each part one argument.
    built = bwrap_argv(argv, cwd=Path("/nonexistent/dir"), network=False)
    assert built[-len(argv) - 1:] == ["--", *argv] and built.index("--") == len(built) - len(argv) - 1


def test_the_argv_orders_private_tmp_before_the_tree_and_read_only_git_files_last(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    (tree / ".git" / "hooks").mkdir(parents=True)
    (tree / ".git" / "config").write_text("")
    real = os.path.realpath(tree)
    argv = bwrap_argv(["sh", "-c", "true"], cwd=tree, network=False, bwrap="/usr/bin/bwrap")
    assert argv == [
        "/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--tmpfs", "/run", "--bind", real, real, "--bind", f"{real}/.git", f"{real}/.git",
        "--ro-bind", f"{real}/.git/config", f"{real}/.git/config", "--ro-bind", f"{real}/.git/hooks",
        f"{real}/.git/hooks", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL", "--unshare-net",
        "--unsetenv", "TMPDIR", "--chdir", real, "--", "sh", "-c", "true",
    ]
