"""ManagedProcess against real children: env allowlist, stderr drain, exit facts, the teardown ladder."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import anyio
import pytest

from dsh.agent_loop.process import (
    ENV_ALLOWLIST,
    ExitStatus,
    LineTooLong,
    ManagedProcess,
    ProcessStartError,
    child_env,
    iter_lines,
    proc_stat_fields,
    read_line,
)
from tests.waiting import PROMPTLY

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leftover_processes")]

PY = sys.executable
CANARY = "sk-canary-3f9a1c-DO-NOT-LEAK"


def _alive(pid: int) -> bool:
    fields = proc_stat_fields(pid)
    return fields is not None and fields[0] != b"Z"


async def _line(proc: ManagedProcess, timeout: float = PROMPTLY) -> bytes | None:
    assert proc.stdout is not None
    with anyio.fail_after(timeout):
        return await read_line(proc.stdout)


# -- environment ----------------------------------------------------------------------------------


def test_child_env_is_allowlist_plus_explicit_entries() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LC_CTYPE": "C.UTF-8",
        "TERM": "xterm",
        "TMPDIR": "/tmp",
        "USER": "u",
        "SHELL": "/bin/sh",
        "DEEPSEEK_API_KEY": CANARY,
        "HTTPS_PROXY": "http://user:pw@proxy",
        "PYTHONPATH": "/x",
    }
    env = child_env({"AGENT_TOKEN": "explicit", "TERM": "dumb"}, base=base)
    assert env == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LC_CTYPE": "C.UTF-8",
        "TERM": "dumb",  # explicit entries win
        "TMPDIR": "/tmp",
        "USER": "u",
        "SHELL": "/bin/sh",
        "AGENT_TOKEN": "explicit",
    }
    assert set(ENV_ALLOWLIST) <= set(env)


@pytest.mark.parametrize("bad", [{"": "x"}, {"A=B": "x"}, {"A": "x\0y"}, {"A": 3}])
def test_child_env_rejects_impossible_entries(bad: dict) -> None:
    with pytest.raises(ValueError):
        child_env(bad, base={})


async def test_parent_secret_never_reaches_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_TEST_PARENT_SECRET", CANARY)
    monkeypatch.setenv("LC_MESSAGES", "C")
    async with ManagedProcess(["/usr/bin/env"], env={"GIVEN": "yes"}) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(PROMPTLY):
            dumped = (await proc.stdout.read()).decode()
    lines = set(dumped.splitlines())
    assert CANARY not in dumped
    assert "GIVEN=yes" in lines
    assert "LC_MESSAGES=C" in lines
    assert f"PATH={os.environ['PATH']}" in lines
    assert {line.split("=", 1)[0] for line in lines} <= set(ENV_ALLOWLIST) | {"GIVEN", "LC_MESSAGES"} | {
        key for key in os.environ if key.startswith("LC_")
    }


# -- streams --------------------------------------------------------------------------------------


async def test_stdin_stdout_round_trip_and_cooperative_eof() -> None:
    proc = await ManagedProcess(["cat"]).start()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"hello\nworld\n")
    await proc.stdin.drain()
    assert await _line(proc) == b"hello"
    assert await _line(proc) == b"world"
    teardown = await proc.terminate(eof_grace=5, term_grace=5)
    assert teardown.tier == "eof"
    assert teardown.exit_status == ExitStatus(exit_code=0, signal=None)
    assert await proc.terminate() == teardown  # idempotent


async def test_read_line_limits_and_fragments() -> None:
    async with ManagedProcess(["sh", "-c", "printf 'a\\n\\nlast'"]) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(PROMPTLY):
            assert [line async for line in iter_lines(proc.stdout)] == [b"a", b"", b"last"]
    async with ManagedProcess([PY, "-c", "print('x' * 5000)"], stdout_limit=1024) as proc:
        with pytest.raises(LineTooLong):
            await _line(proc)


async def test_ten_megabytes_of_stderr_never_block_the_child(capfd: pytest.CaptureFixture[str]) -> None:
    flood = (
        "import sys\n"
        "chunk = b'E' * 65536\n"
        "for _ in range(160): sys.stderr.buffer.write(chunk)\n"
        "sys.stderr.buffer.write(b'TAIL-MARKER')\n"
        "sys.stderr.flush()\n"
        "print('done', flush=True)\n"
        "sys.stdin.read()\n"
    )
    async with ManagedProcess([PY, "-c", flood], stderr_limit=4096) as proc:
        # Without a continuous drain the child blocks on a full 64 KiB pipe and never prints "done".
        assert await _line(proc, timeout=20) == b"done"
        with anyio.fail_after(PROMPTLY):
            while proc.stderr_bytes_seen < 160 * 65536 + len("TAIL-MARKER"):
                await anyio.sleep(0.01)
        tail = proc.stderr_tail()
        assert len(tail.encode()) <= 4096
        assert tail.endswith("TAIL-MARKER")
    captured = capfd.readouterr()
    assert "EEEE" not in captured.err and "TAIL-MARKER" not in captured.err  # never on our screen


async def test_stderr_tail_is_bounded_and_lenient() -> None:
    script = "import sys; sys.stderr.buffer.write(b'\\xff' + 'é'.encode() * 10); sys.stderr.flush()"
    async with ManagedProcess([PY, "-c", script], stderr_limit=9) as proc:
        await proc.wait_exit(PROMPTLY)
    # The ring kept the last 9 bytes; a cut multibyte char decodes with a replacement, no exception.
    assert len(proc.stderr_tail()) <= 9
    assert proc.stderr_tail().endswith("é")


# -- exit facts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("exit 0", ExitStatus(exit_code=0, signal=None)),
        ("exit 9", ExitStatus(exit_code=9, signal=None)),
        ("kill -KILL $$", ExitStatus(exit_code=None, signal="SIGKILL")),
        ("kill -SEGV $$", ExitStatus(exit_code=None, signal="SIGSEGV")),
    ],
)
async def test_exit_code_and_signal_are_observed_independently(script: str, expected: ExitStatus) -> None:
    async with ManagedProcess(["sh", "-c", script]) as proc:
        assert await proc.wait_exit(5) == expected
        assert proc.exit_status == expected
    assert ExitStatus.from_returncode(-15) == ExitStatus(exit_code=None, signal="SIGTERM")


async def test_wait_exit_is_bounded_while_the_child_runs() -> None:
    async with ManagedProcess(["sleep", "600"], eof_grace=0.1) as proc:
        with anyio.fail_after(PROMPTLY):  # its 0.2 s, not the child's 600 s
            assert await proc.wait_exit(0.2) is None
        assert proc.exit_status is None


async def test_exit_is_seen_although_a_grandchild_holds_the_pipes() -> None:
    # asyncio's Process.wait() would hang here until the sleeper closes stdout/stderr.
    async with ManagedProcess(["sh", "-c", "sleep 600 & echo $!; exit 3"]) as proc:
        grandchild = int(await _line(proc) or b"0")
        assert await proc.wait_exit(PROMPTLY) == ExitStatus(exit_code=3, signal=None)
        assert _alive(grandchild)
        teardown = await proc.terminate()
        assert teardown.tier == "exited"
    assert not _alive(grandchild)


# -- start failures -------------------------------------------------------------------------------


async def test_missing_binary_is_a_start_error_with_the_cause_kept() -> None:
    with pytest.raises(ProcessStartError) as caught:
        await ManagedProcess(["/nonexistent/agent-binary"]).start()
    assert caught.value.code == "PROCESS_START"
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    assert "/nonexistent" not in str(caught.value)  # the path stays in the cause chain


async def test_bad_cwd_is_a_start_error(tmp_path) -> None:
    with pytest.raises(ProcessStartError):
        await ManagedProcess(["true"], cwd=tmp_path / "missing").start()


async def test_terminate_before_start_is_harmless() -> None:
    proc = ManagedProcess(["true"])
    assert (await proc.terminate()).exit_status is None


# -- the teardown ladder --------------------------------------------------------------------------

_EOF_DEAF = "import sys, time\nprint('ready', flush=True)\ntime.sleep(600)\n"
_TERM_TRAP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(1)\n"
)


async def test_ladder_eof_deaf_child_gets_sigterm() -> None:
    # Built with a 600 s EOF grace: a ladder that ignored the 0.3 s one given to terminate() would take that.
    proc = await ManagedProcess([PY, "-c", _EOF_DEAF], eof_grace=600).start()
    assert await _line(proc) == b"ready"
    started = time.monotonic()
    teardown = await proc.terminate(eof_grace=0.3, term_grace=5)
    assert teardown.tier == "sigterm"
    assert teardown.exit_status == ExitStatus(exit_code=None, signal="SIGTERM")
    assert 0.3 <= time.monotonic() - started < PROMPTLY


async def test_ladder_sigterm_trapping_child_gets_sigkill() -> None:
    proc = await ManagedProcess([PY, "-c", _TERM_TRAP]).start()
    assert await _line(proc) == b"ready"
    teardown = await proc.terminate(eof_grace=0.2, term_grace=0.3)
    assert teardown.tier == "sigkill"
    assert teardown.exit_status == ExitStatus(exit_code=None, signal="SIGKILL")


async def test_ladder_kills_the_grandchild_in_the_group() -> None:
    script = "trap '' TERM; sleep 60 & echo $!; wait"
    proc = await ManagedProcess(["sh", "-c", script]).start()
    grandchild = int(await _line(proc) or b"0")
    assert _alive(grandchild)
    await proc.terminate(eof_grace=0.1, term_grace=0.2)
    assert not _alive(grandchild)
    assert proc.group_members() == []


async def test_grandchild_survivor_is_killed_after_a_cooperative_leader_exit() -> None:
    # The leader exits on EOF, leaving a SIGTERM-deaf grandchild behind in its group.
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen(['sh', '-c', \"trap '' TERM; exec sleep 60\"])\n"
        "print(child.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = await ManagedProcess([PY, "-c", script]).start()
    grandchild = int(await _line(proc) or b"0")
    teardown = await proc.terminate(eof_grace=5, term_grace=1)
    assert teardown.tier == "eof"
    assert teardown.exit_status == ExitStatus(exit_code=0, signal=None)
    assert not _alive(grandchild)


async def test_context_manager_tears_down_on_error() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with ManagedProcess(["sleep", "60"], eof_grace=0.1) as proc:
            raise RuntimeError("boom")
    assert proc.exit_status == ExitStatus(exit_code=None, signal="SIGTERM")


async def test_cancelled_anyio_caller_still_completes_teardown() -> None:
    proc = await ManagedProcess([PY, "-c", _TERM_TRAP]).start()
    assert await _line(proc) == b"ready"
    with anyio.move_on_after(0.1) as scope:
        await proc.terminate(eof_grace=0.2, term_grace=0.2)
    assert scope.cancelled_caught
    # The shielded ladder ran to the end: SIGKILL reaped the trapping child.
    assert proc.exit_status == ExitStatus(exit_code=None, signal="SIGKILL")
    assert proc.group_members() == []


async def test_natively_cancelled_caller_still_completes_teardown() -> None:
    proc = await ManagedProcess([PY, "-c", _TERM_TRAP]).start()
    assert await _line(proc) == b"ready"
    task = asyncio.ensure_future(proc.terminate(eof_grace=0.2, term_grace=0.2))
    with anyio.fail_after(5):
        while not (proc.stdin is not None and proc.stdin.is_closing()):  # the ladder is on its first rung
            await anyio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert proc.exit_status == ExitStatus(exit_code=None, signal="SIGKILL")


async def test_cancelled_body_tears_the_child_down() -> None:
    pid: int | None = None
    with anyio.CancelScope() as scope:
        async with ManagedProcess(["sleep", "60"], eof_grace=0.1) as proc:
            pid = proc.pid
            scope.cancel()  # once the child runs (a fixed delay could land before the spawn on a loaded box)
            await anyio.sleep(30)
    assert pid is not None and not _alive(pid)
