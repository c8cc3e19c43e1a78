"""``sandbox = "bwrap"`` as a user meets it (docs/safety.md): the config check, the refusal to start without a
working bwrap, the doctor's step, and a turn whose shell command runs sandboxed (real bwrap, real dsh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.agent_loop.sandbox import sandbox_problem
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.config import Config
from dsh.repl.doctor import Doctor
from dsh.repl.shell import Shell
from tests.real_parts import missing
from tests.repl.test_shell_commands import ListFrontEnd, ListSink

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

KEY = "sk-sandboxTestKey000000000000000"


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default="text").start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        missing("bubblewrap (bwrap)", "apt-get install bubblewrap")
    if (problem := sandbox_problem()) is not None:
        missing("a working bubblewrap", problem)
    return found


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """HOME, its config and state, and a project tree (a plain directory) the commands run in."""
    for name in ("state", "config/dsh", "tree"):
        (tmp_path / name).mkdir(parents=True)
    return tmp_path


def write_config(home: Path, text: str) -> Path:
    path = home / "config" / "dsh" / "config.toml"
    path.write_text(text)
    return path


def dsh(home: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path if path is not None else os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"), "LANG": "C.UTF-8",
           "DEEPSEEK_API_KEY": KEY}
    return subprocess.run([sys.executable, "-m", "dsh.repl", *args], cwd=home / "tree", env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


# --- the config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('sandbox = "firejail"\n', "sandbox must be \"bwrap\" or \"none\", got 'firejail'"),
        ("sandbox = true\n", 'sandbox must be "bwrap" or "none", got True'),
        ('sandbox_network = "yes"\n', "sandbox_network must be true or false, got 'yes'"),
    ],
)
def test_a_bad_sandbox_key_names_the_file(home: Path, text: str, problem: str) -> None:
    path = write_config(home, text)
    result = dsh(home, "-p", "hi")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"dsh: failed to start: config file {path}: "
                                                                         f"{problem}\n")


def test_without_bwrap_dsh_refuses_to_start_and_says_how_to_get_it(home: Path) -> None:
    path = write_config(home, 'sandbox = "bwrap"\n')
    empty = home / "bin"
    empty.mkdir()
    result = dsh(home, "-p", "hi", path=str(empty))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"dsh: failed to start: config file {path}: sandbox = \"bwrap\" but bwrap is not installed: install "
        "Debian's bubblewrap package (sudo apt-get install bubblewrap)\n"
    )


def test_sandbox_none_is_no_sandbox_and_no_check(home: Path, server: FaultServer) -> None:
    write_config(home, f'sandbox = "none"\nbase_url = "{server.url}"\n')
    result = dsh(home, "-p", "hi", path=str(home / "bin"))  # no bwrap anywhere: nothing asks for it
    assert (result.returncode, result.stdout) == (0, "Hello! How can I help you today?\n")


# --- a turn -----------------------------------------------------------------------------------------


def shell_call(command: str) -> Behaviour:
    return Behaviour("tool_call", name="run_shell", arguments=json.dumps({"command": command}))


async def test_an_approved_command_runs_sandboxed_and_says_so(
    home: Path, server: FaultServer, bwrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = home / "tree"
    monkeypatch.chdir(tree)
    env = {"HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config")}
    sink = ListSink()
    frontend = ListFrontEnd(sink, answer="yes")
    shell = Shell(Config(api_key=KEY, base_url=server.url, sandbox="bwrap"), frontend, color=False, env=env)
    await shell.start()
    try:
        server.push(shell_call("echo inside > made.txt; echo x > /etc/dsh-sandbox-x || true"))
        await shell.handle_line("run it")
        assert frontend.asked == ["echo inside > made.txt; echo x > /etc/dsh-sandbox-x || true"]
        assert sink.text == (
            "[main turn 1] Need the weather; call it.\n"
            '  [tool call] run_shell({"command": "echo inside > made.txt; echo x > /etc/dsh-sandbox-x || true"})\n'
            "  [tool result] /bin/sh: 1: cannot create /etc/dsh-sandbox-x: Read-only file system\n"
            "    [exit code: 0] (sandboxed)\n"
            "Hello! How can I help you today?\n"
        )
        assert (tree / "made.txt").read_text() == "inside\n" and not Path("/etc/dsh-sandbox-x").exists()
        tool = next(t for t in server.requests[-1].json["tools"] if t["function"]["name"] == "run_shell")
        assert tool["function"]["description"].endswith(
            " It runs sandboxed: the project tree is writable, the rest of the file system read-only, /tmp "
            "private, and there is no network."
        )
    finally:
        await shell.aclose()


def test_a_print_turn_starts_with_a_working_sandbox_and_the_model_is_told(
    home: Path, server: FaultServer, bwrap: str
) -> None:
    write_config(home, f'sandbox = "bwrap"\nsandbox_network = true\nbase_url = "{server.url}"\n')
    server.push(shell_call("echo hi"))
    result = dsh(home, "-p", "run it")
    assert (result.returncode, result.stdout) == (0, "Hello! How can I help you today?\n")
    # -p has nobody to approve a command: the sandbox does not change that (permission modes will).
    assert (
        "  [tool result] Error: shell commands need approval and no one is available to approve them here\n"
    ) in result.stderr
    tools = {t["function"]["name"]: t["function"]["description"] for t in server.requests[-1].json["tools"]}
    assert tools["run_shell"].endswith(
        " It runs sandboxed: the project tree is writable, the rest of the file system read-only, /tmp private."
    )


# --- dsh doctor ------------------------------------------------------------------------------------


async def test_doctor_checks_the_sandbox_when_one_is_configured(bwrap: str, tmp_path: Path) -> None:
    ticks = iter([0.0, 0.0125])
    doctor = Doctor(Config(api_key=KEY, sandbox="bwrap"), dict(os.environ), clock=lambda: next(ticks))
    step = await doctor.sandbox()
    assert step.lines() == ["✓ sandbox: bwrap ran a test command in a sandbox in 12.5 ms; no network"]
    doctor = Doctor(Config(api_key=KEY, sandbox="bwrap"), {"PATH": str(tmp_path)}, clock=lambda: 0.0)
    step = await doctor.sandbox()
    assert step.lines() == [
        '✗ sandbox: sandbox = "bwrap" but bwrap is not installed',
        "  fix: install Debian's bubblewrap package (sudo apt-get install bubblewrap)",
    ]
