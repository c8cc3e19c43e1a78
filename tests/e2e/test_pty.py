"""dsh in a real pseudo-terminal (pexpect): keys, the live view, approval, history, terminal hygiene.

``PROMPT_TOOLKIT_NO_CPR=1`` keeps prompt_toolkit from waiting on a cursor-position reply the pty
never sends; every XDG directory is a fresh temp dir so no test sees another's history or sessions.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from pty_screen import Screen

from dsh.agent_loop import events as ev
from dsh.agent_loop.process import live_group_members
from dsh.agent_loop.session_log import SessionLog
from dsh.llm.loopback.fault_server import Behaviour, FaultServer, closed_port
from dsh.repl.live_view_state import LEAVING
from tests.waiting import PROMPTLY, wait_until

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-ptyTestKey000000000000000000000"
PROMPT = re.compile(r"\x1b\[0m>(?:\x1b|\s)")
TIMEOUT = PROMPTLY  # what one awaited line may take on a loaded machine (tests/waiting.py)
LINE_BREAK = r"\r?\n(?:\x1b\[\?7h)?"  # between the lines of one command's output, as the app writes them

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for name in ("state", "config", "cache"):
        (tmp_path / name).mkdir()
    return tmp_path


def pty_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


class Dsh:
    """A spawned dsh: every byte it wrote (``raw``, also saved as a transcript) and the screen it drew.

    ``expect*`` search the raw stream from where the last match ended (committed lines are written
    raw, so they match byte for byte); ``wait_screen`` asks what the terminal shows, which is the
    only way to read the live view and the toolbar that prompt_toolkit repaints by difference.
    """

    ROWS, COLS = 40, 200

    def __init__(self, home: Path, *args: str, via_sh: str | None = None, cwd: Path = REPO, rows: int = 0,
                 cols: int = 0, **env: str) -> None:
        self.ROWS, self.COLS = rows or self.ROWS, cols or self.COLS
        self.transcript = home / f"pty-{time.monotonic_ns()}.log"
        self._log = self.transcript.open("w", encoding="utf-8")
        self.raw = ""
        self.pos = 0
        self.eof = False
        self.screen = Screen(self.ROWS, self.COLS)
        command = [sys.executable, "-m", "dsh.repl", *args]
        if via_sh is not None:
            # A Ctrl-C that lands while dsh writes in cooked mode is a SIGINT to the whole process
            # group; a trap (reset to default in the child) keeps the wrapping sh alive to run the rest.
            command = ["/bin/sh", "-c", "trap : INT; " + " ".join(_quote(part) for part in command) + via_sh]
        self.child = pexpect.spawn(command[0], command[1:], cwd=str(cwd), env=pty_env(home, **env),
                                   encoding="utf-8", timeout=TIMEOUT, dimensions=(self.ROWS, self.COLS))

    def _pump(self, timeout: float) -> None:
        if self.eof:
            raise AssertionError(f"dsh exited; transcript {self.transcript}:\n{self.raw[-2000:]!r}")
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            self.eof = True
            return
        self.raw += data
        self.screen.feed(data)
        self._log.write(data)
        self._log.flush()

    def _wait(self, found, what: str, timeout: float):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            result = found()
            if result:
                return result
            if time.monotonic() > deadline or self.eof:
                why = "the process exited" if self.eof else "timed out"
                raise AssertionError(
                    f"{why} waiting for {what}; transcript {self.transcript}\n"
                    f"screen:\n{self.screen.text()}\nraw tail: {self.raw[-600:]!r}"
                )
            self._pump(min(0.1, max(0.0, deadline - time.monotonic())))

    def expect_exact(self, text: str, timeout: float = TIMEOUT) -> None:
        def found() -> bool:
            index = self.raw.find(text, self.pos)
            if index < 0:
                return False
            self.pos = index + len(text)
            return True

        self._wait(found, repr(text), timeout)

    def expect(self, pattern: str | re.Pattern[str], timeout: float = TIMEOUT) -> re.Match[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def found() -> re.Match[str] | None:
            match = regex.search(self.raw, self.pos)
            if match is not None:
                self.pos = match.end()
            return match

        return self._wait(found, repr(regex.pattern), timeout)

    def wait_screen(self, text: str, timeout: float = TIMEOUT) -> None:
        self._wait(lambda: text in self.screen, f"{text!r} on the screen", timeout)

    def prompt(self) -> None:
        self.expect(PROMPT)

    def send(self, line: str) -> None:
        self.child.send(line + "\r")

    def rest(self) -> str:
        """Everything after the last match, once the process has exited."""
        while not self.eof:
            self._pump(0.2)
        return self.raw[self.pos :]

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self._pump(0.2)
        assert self.eof, f"dsh did not exit; transcript {self.transcript}"
        self.child.close()
        self._log.close()
        assert self.child.exitstatus is not None, self.child.signalstatus
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close()
        self._log.close()


def _quote(part: str) -> str:
    return "'" + part.replace("'", "'\\''") + "'"


@pytest.fixture
def spawn(home: Path) -> Iterator:
    children: list[Dsh] = []

    def start(*args: str, **kwargs: Any) -> Dsh:
        child = Dsh(home, *args, **kwargs)
        children.append(child)
        return child

    yield start
    for child in children:
        child.close()


def prompts_in_log(home: Path) -> list[str]:
    prompts = []
    for path in sorted((home / "state" / "dsh" / "sessions").glob("*.jsonl")):
        for line in path.read_text().splitlines()[1:]:
            record = json.loads(line)
            if record["type"] == "turn/start":
                prompts.append(record["data"]["prompt"])
    return prompts


# --- failures and cancellation -----------------------------------------------------------------------


def test_refused_endpoint_prints_the_exact_transport_line_and_the_prompt_returns(home: Path, spawn) -> None:
    (home / "config" / "dsh").mkdir()
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")
    with closed_port() as port:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}")
        dsh.prompt()
        dsh.send("hello")
        dsh.expect_exact(
            f"[main turn 1] [turn failed TRANSPORT] request to the endpoint at http://127.0.0.1:{port} failed: "
            f"All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', {port})\r\n"
        )
        dsh.prompt()
        dsh.send("/why")
        dsh.expect_exact(f"  ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', {port})")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0


def stalled_turn(spawn: Callable[..., Dsh], prompt: str, **options: Any) -> Dsh:
    """dsh in the demo's ``stall`` scenario, its first turn sent and waiting for a token that never comes."""
    dsh = spawn("--demo", "--scenario", "stall", **options)
    dsh.prompt()
    dsh.send(prompt)
    dsh.wait_screen("waiting for first token")
    return dsh


def test_ctrl_c_cancels_a_stalled_turn_and_the_next_prompt_works(spawn) -> None:
    dsh = stalled_turn(spawn, "wait for it")
    dsh.child.sendintr()
    # ~10 ms idle; a Ctrl-C honoured only once the stalled stream wakes would wait for the demo's 120 s deadline.
    dsh.expect_exact("[main turn 1] [turn aborted] cancelled\r\n", timeout=PROMPTLY)
    dsh.prompt()
    dsh.send("/scenario text")
    dsh.prompt()
    dsh.send("again")
    dsh.expect_exact("[main turn 2] Hello from the dsh demo!")
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


def test_text_typed_during_a_turn_is_kept_for_the_next_prompt(home: Path, spawn) -> None:
    dsh = stalled_turn(spawn, "wait for it")
    dsh.child.send("next questionX\x7f")  # typed while the turn runs; a backspace takes the X back
    dsh.wait_screen("typed ahead: 13 chars, kept for the next prompt")
    dsh.child.sendintr()
    dsh.expect_exact("[main turn 1] [turn aborted] cancelled\r\n")
    dsh.wait_screen("> next question")  # not sent, not lost: the prompt starts with it
    dsh.send(" please")
    dsh.wait_screen("waiting for first token")
    assert prompts_in_log(home) == ["wait for it", "next question please"]
    dsh.child.sendintr()
    dsh.expect_exact("[main turn 2] [turn aborted] cancelled\r\n")


def test_ctrl_d_during_a_turn_ends_dsh_once_the_turn_has_ended(spawn) -> None:
    dsh = stalled_turn(spawn, "wait for it")
    dsh.child.send("\x04")  # nothing typed ahead: the end of input, as at an empty prompt
    dsh.wait_screen(LEAVING)
    dsh.child.sendintr()
    dsh.expect_exact("[main turn 1] [turn aborted] cancelled\r\n")
    assert dsh.wait_exit() == 0


def test_ctrl_d_again_stays_and_with_text_typed_ahead_does_nothing(spawn) -> None:
    dsh = stalled_turn(spawn, "wait for it")
    dsh.child.send("\x04")
    dsh.wait_screen(LEAVING)
    dsh.child.send("\x04")  # again: dsh stays
    dsh._wait(lambda: LEAVING not in dsh.screen.text(), "the Ctrl-D hint gone", TIMEOUT)
    dsh.child.send("more\x04")  # with text typed ahead, Ctrl-D is no end of input
    dsh.wait_screen("typed ahead: 4 chars, kept for the next prompt")
    assert LEAVING not in dsh.screen.text()
    dsh.child.sendintr()
    dsh.expect_exact("[main turn 1] [turn aborted] cancelled\r\n")
    dsh.wait_screen("> more")  # still here, the text kept
    dsh.child.sendintr()
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


def test_keepalive_stall_shows_the_toolbar_then_times_out(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "keepalive-stall")
    dsh.prompt()
    dsh.send("stall")
    dsh._wait(lambda: re.search(r"waiting for first token \d+s · keep-alive \d+s ago · Ctrl-C cancels",
                                dsh.screen.text()), "the keep-alive toolbar", TIMEOUT)
    retry = dsh.expect(r"\[main turn 1\] \[retry 1/1 in 0\.1s\] TIMEOUT: (no content from the endpoint at "
                       r"127\.0\.0\.1:\d+ within 3s \(keep-alives only\))\r\n", timeout=15)
    message = retry.group(1)
    dsh.expect_exact(f"[turn failed TIMEOUT] {message}\r\n", timeout=15)
    dsh.prompt()


def test_http_error_shows_the_fix_line(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "http-402")
    dsh.prompt()
    dsh.send("pay")
    dsh.expect(r"\[main turn 1\] \[turn failed QUOTA\] Insufficient Balance\r\n  fix: the endpoint at 127\.0\.0\.1:\d+ "
               r"refused the request for quota or credit — check the account of the key in DEEPSEEK_API_KEY "
               r"\(or api_key in config\.toml\)\r\n")
    dsh.prompt()


# --- terminal hygiene -----------------------------------------------------------------------------------


def _stty_flags(text: str) -> set[str]:
    return set(text.replace("\r", " ").replace("\n", " ").replace(";", " ").split())


def test_ctrl_d_exits_0_and_the_terminal_is_restored(spawn) -> None:
    dsh = stalled_turn(spawn, "wait", via_sh="; echo EXIT=$?; stty -a")
    dsh.child.sendintr()
    dsh.expect_exact("[turn aborted] cancelled")
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.expect(r"EXIT=(\d+)").group(1) == "0"
    flags = _stty_flags(dsh.rest())
    for flag in ("echo", "icanon", "isig", "icrnl", "opost"):
        assert flag in flags and f"-{flag}" not in flags, flag


def test_double_ctrl_c_on_an_empty_prompt_exits(spawn) -> None:
    dsh = spawn("--demo", via_sh="; echo EXIT=$?; stty -a")
    dsh.prompt()
    dsh.child.sendintr()
    dsh.expect_exact("(press Ctrl-C again to exit, or Ctrl-D)")
    dsh.child.sendintr()
    assert dsh.expect(r"EXIT=(\d+)").group(1) == "0"
    flags = _stty_flags(dsh.rest())
    assert "echo" in flags and "icanon" in flags and "-echo" not in flags and "-icanon" not in flags


def test_ctrl_c_clears_a_typed_line(home: Path, spawn) -> None:
    dsh = spawn("--demo")
    dsh.prompt()
    dsh.child.send("discard me")
    dsh.wait_screen("> discard me")
    dsh.child.sendintr()
    dsh.child.send("keep me\r")
    dsh.expect_exact("[main turn 1] Hello from the dsh demo!")
    dsh.prompt()
    assert prompts_in_log(home) == ["keep me"]


# --- rendering on a terminal ---------------------------------------------------------------------------------


def test_reasoning_is_dim_on_a_tty(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "reasoning")
    dsh.prompt()
    dsh.send("think")
    # The committed line is written raw: each reasoning delta wrapped in dim ... reset.
    dsh.expect_exact("[main turn 1] \x1b[2mThe \x1b[0m\x1b[2muser \x1b[0m")
    dsh.expect_exact("\x1b[2mterminal.\x1b[0m\r\nAnd this is the answer, in normal type.\r\n")
    dsh.prompt()


def test_no_color_keeps_reasoning_plain_on_a_tty(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "reasoning", NO_COLOR="1")
    dsh.prompt()
    dsh.send("think")
    dsh.expect_exact("[main turn 1] The user wants to see reasoning. It streams first, dim on a terminal.\r\n"
                     "And this is the answer, in normal type.\r\n")


def test_tool_call_round_trip_and_inline_approval(home: Path, spawn) -> None:
    dsh = spawn("--demo", "--scenario", "shell-approval")
    dsh.prompt()
    dsh.send("run something")
    dsh.expect_exact('  [tool call] run_shell({"command": "echo hello from run_shell"})\r\n')
    dsh.wait_screen("  [approve] run_shell: echo hello from run_shell  (y / n / a)")
    dsh.child.send("y")
    dsh.expect_exact("  [approve] run_shell: echo hello from run_shell  (y / n / a) yes\r\n")
    dsh.expect_exact("  [tool result] hello from run_shell\r\n    [exit code: 0]\r\n")
    dsh.expect_exact("The shell tool asked you first; your answer went to the model.\r\n")
    dsh.prompt()
    dsh.send("and again")
    # The screen still shows the first question's line, so wait in the stream, past the second tool call.
    dsh.expect_exact('  [tool call] run_shell({"command": "echo hello from run_shell"})\r\n')
    dsh.expect_exact("  [approve] run_shell: echo hello from run_shell  (y / n / a)")
    dsh.child.send("n")
    dsh.expect_exact("(y / n / a) no\r\n")
    dsh.expect_exact("  [tool result] Error: the user denied this shell command\r\n")
    dsh.prompt()


def test_ctrl_c_while_asking_cancels_the_turn(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "shell-approval")
    dsh.prompt()
    dsh.send("run something")
    dsh.wait_screen("(y / n / a)")
    dsh.child.sendintr()
    dsh.expect_exact("[turn aborted] cancelled\r\n")
    dsh.prompt()


# --- the prompt: history, multiline, commands -------------------------------------------------------------


def test_history_survives_a_restart(home: Path, spawn) -> None:
    first = spawn("--demo")
    first.prompt()
    first.send("remember this line")
    first.expect_exact("Hello from the dsh demo!")
    first.prompt()
    first.child.sendeof()
    assert first.wait_exit() == 0
    assert "+remember this line" in (home / "state" / "dsh" / "history").read_text()

    second = spawn("--demo")
    second.prompt()
    second.child.send("\x1b[A")  # Up
    second.wait_screen("> remember this line")
    second.child.send("\r")
    second.expect_exact("[main turn 1] Hello from the dsh demo!")
    second.prompt()
    assert prompts_in_log(home) == ["remember this line", "remember this line"]


def test_multiline_by_trailing_backslash_and_escape_enter(home: Path, spawn) -> None:
    dsh = spawn("--demo")
    dsh.prompt()
    dsh.child.send("line one\\\r")
    dsh.child.send("line two\r")
    dsh.expect_exact("[main turn 1] ")
    dsh.prompt()
    dsh.child.send("alpha\x1b\r")
    dsh.child.send("beta\r")
    dsh.expect_exact("[main turn 2] ")
    dsh.prompt()
    assert prompts_in_log(home) == ["line one\nline two", "alpha\nbeta"]


def test_unknown_command_is_reported_and_up_brings_it_back(spawn) -> None:
    dsh = spawn("--demo")
    dsh.prompt()
    dsh.send("/scenaro text")
    dsh.expect_exact("unknown command /scenaro: did you mean /scenario? (/help lists the commands)\r\n")
    dsh.prompt()
    dsh.child.send("\x1b[A")  # ↑: the line is in the history, not glued to the next words
    dsh.wait_screen("> /scenaro text")


def test_tab_completes_slash_commands(home: Path, spawn) -> None:
    dsh = spawn("--demo")
    dsh.prompt()
    dsh.child.send("/scen")
    dsh.wait_screen("list demo scenarios, or pick one")  # the completion menu, while typing
    dsh.child.send("\t")
    dsh.wait_screen("> /scenario")
    dsh.child.send("\r")
    dsh.expect(r"\* text +plain streamed text")
    dsh.prompt()


def test_resume_reports_the_interrupted_turn_first(home: Path, spawn) -> None:
    log = SessionLog.create(root=home / "state" / "dsh" / "sessions", cwd=str(REPO))  # the project dsh runs in
    log.append(ev.TurnStart(1, "cut short"))
    log.append(ev.StepStart(1, 1))
    log.close()
    dsh = spawn("--demo", "--resume", "last")
    dsh.expect_exact(
        "[main turn 1] [turn interrupted by a previous process exit]\r\n"  # before anything else
        f"resumed session {log.id} (1 turn)\r\n"
        "  turn 1 > cut short\r\n"
        "           (turn interrupted by a previous process exit)\r\n"
        "turn 1 was interrupted; /retry sends its prompt again: cut short\r\n"
    )
    match = dsh.expect(r"(.*)\r\n")
    banner = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", match.group(1))
    assert banner.startswith("dsh 0.1.0 demo")
    dsh.prompt()
    dsh.send("next")
    dsh.expect_exact("[main turn 2] Hello from the dsh demo!")


def _session_ids(home: Path) -> list[str]:
    root = home / "state" / "dsh" / "sessions"
    return [p.stem for p in sorted(root.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)] if root.is_dir() else []


def test_retry_after_kill_9_mid_turn_resends_the_interrupted_prompt(home: Path, spawn) -> None:
    dsh = spawn("--demo", "--scenario", "stall")
    dsh.prompt()
    assert _session_ids(home) == []  # launched, no turn yet: no session file
    dsh.send("the prompt that was cut")
    dsh.wait_screen("waiting for first token")
    [ident] = _session_ids(home)  # the first turn wrote it
    dsh.child.kill(9)
    while not dsh.eof:
        dsh._pump(0.2)
    again = spawn("--demo", "--resume", "last")
    again.expect_exact(
        "[main turn 1] [turn interrupted by a previous process exit]\r\n"
        f"resumed session {ident} (1 turn)\r\n"
        "  turn 1 > the prompt that was cut\r\n"
        "           (turn interrupted by a previous process exit)\r\n"
        "turn 1 was interrupted; /retry sends its prompt again: the prompt that was cut\r\n"
    )
    again.prompt()
    again.send("/retry")
    again.expect_exact("[main turn 2] Hello from the dsh demo!")
    again.prompt()
    again.child.sendeof()
    assert again.wait_exit() == 0
    assert prompts_in_log(home) == ["the prompt that was cut", "the prompt that was cut"]
    assert _session_ids(home) == [ident]


def test_resume_last_inside_the_repl_never_picks_the_current_session(home: Path, spawn) -> None:
    dsh = spawn("--demo")
    dsh.prompt()
    dsh.send("first")
    dsh.expect_exact("[main turn 1] Hello from the dsh demo!")
    dsh.prompt()
    [first] = _session_ids(home)
    dsh.send("/new")
    dsh.expect(r"new session \S+\r\n")
    dsh.prompt()
    dsh.send("second")
    dsh.expect_exact("[main turn 1] Hello from the dsh demo!")
    dsh.prompt()
    assert len(_session_ids(home)) == 2
    dsh.send("/resume last")  # the latest of this project is the current one: the one before it is meant
    dsh.expect_exact(f"resumed session {first} (1 turn)")
    dsh.expect_exact("  turn 1 > first")
    dsh.prompt()
    dsh.send("/resume last")  # now the other way round
    dsh.expect(r"resumed session (?!" + re.escape(first) + r")\S+ \(1 turn\)")
    dsh.expect_exact("  turn 1 > second")
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


def test_startup_failure_on_a_terminal(home: Path, spawn) -> None:
    dsh = spawn()
    dsh.expect_exact("dsh: failed to start: no DeepSeek API key: set DEEPSEEK_API_KEY")
    assert dsh.wait_exit() == 2


def test_sigterm_cancels_and_exits(spawn) -> None:
    dsh = stalled_turn(spawn, "wait")
    dsh.child.kill(15)
    dsh.expect_exact("[turn aborted] cancelled")
    assert dsh.wait_exit() == 143


def test_sigterm_during_a_slow_tool_kills_it_and_exits(home: Path, spawn) -> None:
    work = home / "work"
    work.mkdir()
    _no_retry_config(home)
    group_file = work / "slow-tool-group"
    # The command runs in its own process group, led by the shell (pgid == its pid); it says which.
    command = f"echo $$ > {group_file}.tmp && mv {group_file}.tmp {group_file}; sleep 600; echo late"
    call = Behaviour("tool_call", id="call_1", name="run_shell", arguments=json.dumps({"command": command}))
    with FaultServer(script=[call], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("be slow")
        dsh.wait_screen("(y / n / a)")
        dsh.child.send("y")
        dsh._wait(group_file.exists, "the slow command to start", 10)
        group = int(group_file.read_text())
        assert live_group_members(group), "the slow command is not running"
        dsh.child.kill(15)
        dsh.expect_exact("[turn aborted] cancelled")  # within TIMEOUT, not the 600 s the command takes
        assert dsh.wait_exit() == 143
    # Only the group this test started; killed members may take a moment to die on a loaded machine.
    wait_until(lambda: not live_group_members(group), PROMPTLY, "the command's process group to be killed")


# --- subagents: the diagnostic inline, and a background job waking an idle prompt ---------------------


def test_subagent_diagnostic_on_its_own_highlighted_line(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "acp-remote-limit")
    dsh.prompt()
    dsh.send("delegate")
    dsh.expect_exact(
        "  [tool result] Error: subagent run failed\r\n"
        "    \x1b[1;33mSubagent failure (provider: acp-limit; stage: prompt; category: remote-limit; "
        "stop reason: max_turn_requests)\x1b[0m\r\n",
        timeout=20,
    )
    dsh.prompt()


def test_a_background_job_notice_wakes_the_idle_prompt(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "dsh-background")
    dsh.prompt()
    dsh.send("delegate in the background")
    dsh.expect_exact("  [tool result] started background subagent job subagent-1\r\n", timeout=20)
    dsh.prompt()  # idle now; nobody types
    # written for the user (the model's own notice text is in the session log)
    dsh.expect_exact("[job] subagent-1 (dsh-exit-later) failed: Subagent failure (provider: dsh-exit-later; "
                     "stage: session-run; category: transport; exit code: 9) · /job subagent-1 shows its output\r\n",
                     timeout=20)
    dsh.expect_exact("[main turn 2] ")  # the model got a turn for the notice without a new prompt
    dsh.expect_exact('  [tool call] job_output({"job_id": "subagent-1"})\r\n')
    dsh.prompt()
    dsh.send("/jobs")
    dsh.expect(r"subagent-1   failed +\d+s  dsh-exit-later" + LINE_BREAK
               + r"/job ID shows a job's output · /kill ID stops a running one")
    dsh.prompt()
    dsh.send("/job subagent-1")
    dsh.expect(r"job subagent-1 \(dsh-exit-later\) failed after \d+s" + LINE_BREAK + r"  Read 3 of 5 files\."
               + LINE_BREAK + r"  Subagent failure \(provider: dsh-exit-later; stage: session-run; category: "
               r"transport; exit code: 9\)")
    dsh.prompt()


def test_kill_cancels_a_running_background_job(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "dsh-background-slow")
    dsh.prompt()
    dsh.send("work in the background")
    dsh.expect_exact("  [tool result] started background subagent job subagent-1\r\n", timeout=20)
    dsh.prompt()
    dsh.send("/jobs")
    dsh.expect(r"subagent-1   running +\d+s  dsh-working")
    dsh.prompt()
    deadline = time.monotonic() + 20
    while True:  # the child streams its partial output, then keeps working
        dsh.send("/job subagent-1")
        match = dsh.expect(r"job subagent-1 \(dsh-working\) running for \d+s" + LINE_BREAK + r"  ([^\r\n]*)\r?\n")
        dsh.prompt()
        if match.group(1) == "Still working on it..." or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert match.group(1) == "Still working on it..."
    dsh.send("/kill subagent-1")
    dsh.expect_exact("stopping job subagent-1 (dsh-working); a line follows when it has stopped\r\n")
    dsh.prompt()  # at once: the kill lands in the background
    dsh.expect(r"killed job subagent-1 \(dsh-working\) after \d+s", timeout=20)
    dsh.send("/jobs")
    dsh.expect(r"subagent-1   killed +\d+s  dsh-working")
    dsh.prompt()
    dsh.send("/kill subagent-1")
    dsh.expect_exact("job subagent-1 had already finished: killed")
    dsh.prompt()
    dsh.send("/job subagent-9")
    dsh.expect_exact("no job 'subagent-9' (jobs: subagent-1)")
    dsh.prompt()
    assert "[job]" not in dsh.raw  # a job the user killed posts no completion notice
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


# --- hostile text: what you approve is what runs; nothing reaches the terminal raw --------------------------

HIDDEN_COMMANDS = {
    "spaces": ("ls" + " " * 3000 + "; echo EVIL > f", "      ls\u2420\u00d73000; echo EVIL > f\r\n"),
    "newlines": ("ls -la" + "\n" * 60 + "echo EVIL > f",
                 "      ls -la\r\n      (59 blank lines)\r\n      echo EVIL > f\r\n"),
}


def _no_retry_config(home: Path) -> None:
    (home / "config" / "dsh").mkdir(exist_ok=True)
    (home / "config" / "dsh" / "config.toml").write_text("max_retries = 0\n")


@pytest.mark.parametrize("kind", sorted(HIDDEN_COMMANDS))
@pytest.mark.parametrize("answer", ["n", "y"])
def test_a_hidden_command_must_be_viewed_before_y_runs_it(home: Path, spawn, kind: str, answer: str) -> None:
    command, shown = HIDDEN_COMMANDS[kind]
    size = f"{command.count(chr(10)) + 1} line{'s' if chr(10) in command else ''} / {len(command)} chars"
    work = home / "work"
    work.mkdir()
    _no_retry_config(home)
    call = Behaviour("tool_call", id="call_1", name="run_shell", arguments=json.dumps({"command": command}))
    with FaultServer(script=[call], default=Behaviour("text", text="done\n")) as server:
        dsh = spawn(cwd=work, rows=24, cols=80, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("list files")
        dsh.wait_screen(f"command is {size} \u2014 v to view  (v / n)")
        dsh.child.send("y")  # not shown yet: must not count (the keys are read in order, so v comes after it)
        dsh.child.send("v")
        dsh.expect_exact(f"  [command] run_shell, {size}:\r\n{shown}")  # the whole command, on the screen
        assert "echo EVIL > f" in dsh.screen
        dsh.wait_screen(f"the command above ({size})  (y / n / a)")
        assert not (work / "f").exists()
        dsh.child.send(answer)
        if answer == "n":
            dsh.expect_exact(f"the command above ({size})  (y / n / a) no\r\n")
            dsh.expect_exact("  [tool result] Error: the user denied this shell command\r\n")
        else:
            dsh.expect_exact(f"the command above ({size})  (y / n / a) yes\r\n")
            dsh.expect_exact("  [tool result] ")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
    assert (work / "f").exists() == (answer == "y")


HOSTILE_MESSAGE = "bad \x1b]52;c;ZXZpbA==\x07 \x1b]0;pwned\x07 \x1b[2J \x1bP+q544e\x1b\\ \u202eexe.txt end"
RAW_ESCAPES = ("\x1b]52;", "\x1b]0;pwned", "\x1bP+q", "\u202e", "\x07")
SHOWN_MESSAGE = ("bad \u241b]52;c;ZXZpbA==\u2407 \u241b]0;pwned\u2407 \u241b[2J \u241bP+q544e\u241b\\ "
                 "<U+202E>exe.txt end")


def test_why_shows_a_hostile_error_message_visibly_and_never_raw(home: Path, spawn) -> None:
    _no_retry_config(home)
    with FaultServer(default=Behaviour("http_400", message=HOSTILE_MESSAGE)) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("hello")
        dsh.expect_exact(f"[turn failed INVALID_REQUEST] {SHOWN_MESSAGE}\r\n")
        dsh.prompt()
        dsh.send("/why")
        dsh.expect_exact(SHOWN_MESSAGE)
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    for raw in RAW_ESCAPES:
        assert raw not in dsh.raw


FORGED_ID = "evil\x1b]0;pwned\x07\x1b[2J\u202eid"
SHOWN_ID = "evil\u241b]0;pwned\u2407\u241b[2J<U+202E>id"


def test_a_forged_session_id_is_shown_visibly_in_sessions_and_resume(home: Path, spawn) -> None:
    root = home / "state" / "dsh" / "sessions"
    log = SessionLog.create(root=root, cwd=str(REPO))
    log.append(ev.TurnStart(1, "title \x1b]52;c;eA==\x07 here"))
    log.append(ev.StepStart(1, 1))
    log.close()
    path = next(root.glob("*.jsonl"))
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["id"] = FORGED_ID
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    dsh = spawn("--resume", "last", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL="http://127.0.0.1:9")
    dsh.expect_exact("[main turn 1] [turn interrupted by a previous process exit]\r\n")  # the resume notice
    dsh.expect_exact(f"session {SHOWN_ID} ")  # the banner names the resumed session
    dsh.prompt()
    dsh.send("/sessions")
    title = re.escape("title \u241b]52;c;eA==\u2407 here")
    dsh.expect(rf"\* \d{{4}}-\d\d-\d\d \d\d:\d\d  {re.escape(SHOWN_ID)}  1 turn     {title}\r\n")
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0
    for raw in RAW_ESCAPES:
        assert raw not in dsh.raw


# --- the toolbar tells the truth at any width; /expand (issue 15 §4) -------------------------------------


def _toolbar_row(dsh: Dsh, needle: str) -> str | None:
    rows = [row for row in dsh.screen.text().split("\n") if needle in row]
    return rows[-1] if rows else None


def test_a_stall_mid_stream_shows_how_long_no_content_came(spawn) -> None:
    dsh = spawn("--demo", "--scenario", "stall-mid-stream")
    dsh.prompt()
    dsh.send("go")
    dsh.wait_screen("[main turn 1] The first words arrive, then only keep-alives")
    dsh.wait_screen(" · streaming · Ctrl-C cancels")  # while the text still arrives (or just did)
    # Then the content stops and keep-alives go on: the toolbar counts the silence instead of "streaming".
    dsh._wait(lambda: re.search(r" · no content for [3-9]s · keep-alive [01]s ago · Ctrl-C cancels$",
                                _toolbar_row(dsh, "no content for") or ""), "the stalled-stream toolbar", 15)
    dsh.child.sendintr()
    dsh.expect_exact("[main turn 1] The first words arrive, then only keep-alives\r\n[turn aborted] cancelled\r\n")
    dsh.prompt()


@pytest.mark.parametrize(("rows", "cols"), [(24, 80), (20, 60)])
def test_a_narrow_toolbar_puts_the_live_status_first_and_fits(spawn, rows: int, cols: int) -> None:
    dsh = spawn("--demo", "--scenario", "stall-mid-stream", rows=rows, cols=cols)
    dsh.prompt()  # (without cursor-position replies prompt_toolkit draws no toolbar under the prompt itself)
    dsh.send("go")
    dsh._wait(lambda: _toolbar_row(dsh, "no content for"), "the stalled-stream toolbar", 15)
    bar = _toolbar_row(dsh, "no content for")
    assert bar is not None and len(bar) == cols, (bar, len(bar or ""))  # cut to the width, not wrapped
    # The live status leads; the static part (model, endpoint, scenario) is what the width cuts.
    # Then the mode (cut at 60 columns), then the static part.
    live = r" no content for \d+s · keep-alive \d+s ago · Ctrl-C cancels"
    assert re.fullmatch(live + r" · m(ode: default · d.*)?…", bar), bar
    assert sum("Ctrl-C cancels" in row for row in dsh.screen.text().split("\n")) == 1  # one row, not wrapped
    dsh.child.sendintr()
    dsh.expect_exact("[turn aborted] cancelled\r\n")
    dsh.prompt()


def test_expand_shows_the_last_tool_output_in_full_and_sanitized(home: Path, spawn) -> None:
    work = home / "work"
    (work / "sub").mkdir(parents=True)
    names = ["a.txt", "b.txt", "c.txt", "d.txt", "e\x1b]0;pwned\x07vil.txt"]
    for name in names:
        (work / name).write_text("x")
    dsh = spawn("--demo", "--scenario", "tool-call", cwd=work)
    dsh.prompt()
    dsh.send("/expand")
    dsh.expect_exact("no tool output yet\r\n")
    dsh.prompt()
    dsh.send("look")
    dsh.expect_exact("  [tool result] a.txt\r\n    b.txt\r\n    c.txt\r\n    … (+3 more lines)\r\n")
    dsh.prompt()
    dsh.send("/expand")
    for line in ["  [tool output] list_dir, 6 lines:", "    a.txt", "    b.txt", "    c.txt", "    d.txt",
                 "    e\u241b]0;pwned\u2407vil.txt", "    sub/"]:
        dsh.expect_exact(line + "\r\n")
    dsh.prompt()
    dsh.child.send("\x0f")  # Ctrl-O at the prompt: the same, printed above the prompt
    for line in ["  [tool output] list_dir, 6 lines:", "    a.txt", "    e\u241b]0;pwned\u2407vil.txt", "    sub/"]:
        dsh.expect_exact(line + "\r\n")
    assert "\x1b]0;pwned" not in dsh.raw
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


# --- -p on a terminal: stderr is styled only when it is one (issue 15 §1) ---------------------------------


def test_print_mode_styles_stderr_on_a_terminal_and_never_the_answer(home: Path, spawn) -> None:
    answer = home / "answer.txt"
    dsh = spawn("--demo", "--scenario", "reasoning", "-p", "think", via_sh=f" >{_quote(str(answer))}")
    dsh.expect_exact("\x1b[2mThe \x1b[0m\x1b[2muser \x1b[0m")  # reasoning on the terminal (stderr): dim
    dsh.expect_exact("\x1b[2mterminal.\x1b[0m\r\n")
    assert dsh.wait_exit() == 0
    assert answer.read_text() == "And this is the answer, in normal type.\n"  # stdout: the answer, plain


def test_print_mode_keeps_a_piped_stderr_plain(home: Path, spawn) -> None:
    err = home / "err.txt"
    dsh = spawn("--demo", "--scenario", "reasoning", "-p", "think", via_sh=f" 2>{_quote(str(err))}")
    dsh.expect_exact("And this is the answer, in normal type.\r\n")  # the answer on the terminal
    assert dsh.wait_exit() == 0
    assert err.read_text() == "The user wants to see reasoning. It streams first, dim on a terminal.\n"
    assert "reasoning" not in dsh.raw


def test_bare_print_flag_on_a_terminal_asks_for_a_prompt(spawn) -> None:
    dsh = spawn("--demo", "-p")
    dsh.expect_exact("dsh: failed to start: -p needs a prompt: dsh -p PROMPT, or pipe one into dsh -p -\r\n")
    assert dsh.wait_exit() == 2


MARKDOWN_REPLY = "# Plan\nSome **bold** and `code`:\n```python\nreturn 1\n```\n"


def test_markdown_renders_line_by_line_and_compact_continues_from_a_summary(home: Path, spawn) -> None:
    _no_retry_config(home)
    script = [Behaviour("slow_text", text=MARKDOWN_REPLY, delay=0.01), Behaviour("text", text="A short summary.")]
    with FaultServer(script=script, default=Behaviour("text", text="ok\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("plan it")
        dsh.expect_exact("[main turn 1] \x1b[1;4mPlan\x1b[0m\r\n")
        # Complete lines are written above the live view in batches: each arrives whole, styled.
        for line in ("Some \x1b[1mbold\x1b[0m and \x1b[36mcode\x1b[0m:", "\x1b[2m```python\x1b[0m",
                     "\x1b[35mreturn\x1b[0m \x1b[33m1\x1b[0m", "\x1b[2m```\x1b[0m"):
            dsh.expect_exact(line + "\r\n")
        # The toolbar shows the fill once a request reported usage (the default model's window is 1M).
        dsh.expect_exact("· context 0.0% · Ctrl-C cancels")
        dsh.prompt()
        dsh.send("/compact")
        dsh.expect_exact("[compacted] 2 messages replaced by a summary of ")
        dsh.prompt()
        dsh.send("go on")
        dsh.expect_exact("ok")
        dsh.prompt()
    sent = server.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"] and "A short summary." in sent[1]["content"]


def test_no_color_keeps_markdown_as_written(home: Path, spawn) -> None:
    _no_retry_config(home)
    with FaultServer(default=Behaviour("text", text=MARKDOWN_REPLY)) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url, NO_COLOR="1")
        dsh.prompt()
        dsh.send("plan it")
        dsh.expect_exact("[main turn 1] # Plan\r\nSome **bold** and `code`:\r\n```python\r\nreturn 1\r\n```\r\n")
        dsh.prompt()


def test_print_mode_renders_the_answer_as_markdown_on_a_terminal(home: Path, spawn) -> None:
    """``-p`` with stdout a terminal: the answer as the REPL shows it, a line at a time (issue 27 item 2)."""
    _no_retry_config(home)
    err = home / "err.txt"
    with FaultServer(default=Behaviour("slow_text", text=MARKDOWN_REPLY + "a **last** line", delay=0.01)) as server:
        dsh = spawn("-p", "plan it", via_sh=f" 2>{_quote(str(err))}", DEEPSEEK_API_KEY=KEY,
                    DEEPSEEK_BASE_URL=server.url)
        for line in ("\x1b[1;4mPlan\x1b[0m", "Some \x1b[1mbold\x1b[0m and \x1b[36mcode\x1b[0m:",
                     "\x1b[2m```python\x1b[0m", "\x1b[35mreturn\x1b[0m \x1b[33m1\x1b[0m", "\x1b[2m```\x1b[0m",
                     "a \x1b[1mlast\x1b[0m line"):  # the last line has no newline: rendered when the turn ends
            dsh.expect_exact(line + "\r\n")
        assert dsh.wait_exit() == 0
    assert "**" not in dsh.raw and "# Plan" not in dsh.raw
    assert err.read_text() == ""


@pytest.mark.parametrize("how", ["piped", "NO_COLOR"])
def test_print_mode_writes_the_answer_as_written_when_piped_or_under_no_color(home: Path, spawn, how: str) -> None:
    _no_retry_config(home)
    answer = home / "answer.txt"
    with FaultServer(default=Behaviour("text", text=MARKDOWN_REPLY)) as server:
        if how == "piped":  # stdout a file, stderr still the terminal
            dsh = spawn("-p", "plan it", via_sh=f" >{_quote(str(answer))}", DEEPSEEK_API_KEY=KEY,
                        DEEPSEEK_BASE_URL=server.url)
            assert dsh.wait_exit() == 0
            assert answer.read_text() == MARKDOWN_REPLY
        else:
            dsh = spawn("-p", "plan it", DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url, NO_COLOR="1")
            dsh.expect_exact(MARKDOWN_REPLY.replace("\n", "\r\n"))
            assert dsh.wait_exit() == 0
    assert "\x1b[1;4m" not in dsh.raw


def test_ctrl_c_cancels_a_compaction_and_the_conversation_is_unchanged(home: Path, spawn) -> None:
    _no_retry_config(home)
    with FaultServer(script=["text", "stall_after_headers"], default=Behaviour("text", text="ok\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("hello")
        dsh.expect_exact("How can I help you today?")
        dsh.prompt()
        dsh.send("/compact")
        dsh.expect_exact("Ctrl-C cancels")  # the live view of the compaction
        # The summary request took the stall (a Ctrl-C before that would leave it to the next turn).
        dsh._wait(lambda: not server.pending, "the summary request to take the stall", PROMPTLY)
        dsh.child.sendintr()
        dsh.expect_exact("[compact cancelled] the conversation is unchanged\r\n")
        dsh.prompt()
        dsh.send("again")
        dsh.expect_exact("ok")
        dsh.prompt()
    assert [m["role"] for m in server.requests[-1].json["messages"]] == ["system", "user", "assistant", "user"]


def test_the_unfinished_line_streams_raw_and_is_redrawn_rendered(home: Path, spawn) -> None:
    _no_retry_config(home)
    slow = Behaviour("slow_text", text="**bold** and then some more words\n", delay=0.25)
    with FaultServer(script=[slow], default=Behaviour("text", text="ok\n")) as server:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.send("go")
        dsh.wait_screen("[main turn 1] **bold**")  # live: the raw text while the line is unfinished
        dsh.expect_exact("[main turn 1] \x1b[1mbold\x1b[0m and then some more words\r\n")
        dsh.prompt()
        assert "[main turn 1] bold and then some more words" in dsh.screen
