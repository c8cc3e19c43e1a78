#!/usr/bin/env python3
"""Every transcript and table in README.md and docs/*.md, produced by running the real dsh.

    python docs/transcripts.py --check     # run everything, compare with the checked-in text, print a diff
    python docs/transcripts.py --write     # run everything, rewrite the marked regions in place
    python docs/transcripts.py --only session,scenarios --write
    python docs/transcripts.py --slow --write   # also the reliability fault table (about a minute more)
    DSH_RELIABILITY_REPORT=/tmp/r.json python -m pytest -q    # then:
    python docs/transcripts.py --write --only reliability-counts --reliability-report /tmp/r.json

A generated region is marked in the Markdown source:

    <!-- transcript: NAME -->
    ...  (written by this script: do not edit by hand)
    <!-- /transcript -->

(``table:`` instead of ``transcript:`` for tables.) NAME is one of :data:`GENERATORS`. Each generator runs
``python -m dsh.repl`` (shown as ``dsh``) or the fault server in a subprocess, with ``NO_COLOR=1``, a fresh
temporary ``HOME`` (so the config file, session logs and history are the defaults under it) and a small
working directory holding ``notes.txt`` and ``src/``. The demo needs no key and no network.

Only what really varies between runs is replaced, each with a named placeholder: loopback ports
(``<port>``), session ids (``<session-id>``), timestamps in session logs (``<time>``), the temporary home
(``~``) and working directory (``~/project``), and OpenSSL source lines (``_ssl.c:…``). Runs are
independent, so they go through a small thread pool; ``tests/test_docs.py`` runs ``--check``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
REGION = re.compile(r"(<!-- (transcript|table): ([\w-]+) -->\n)(.*?)(<!-- /\2 -->)", re.S)
TIMEOUT = 120.0
WORKERS = 4  # most runs wait on sockets, timers and child processes, not on the CPU

# --- running dsh ------------------------------------------------------------------------------------


@dataclass
class Run:
    shown: str  # the command as the reader would type it
    returncode: int
    output: str  # stdout and stderr, interleaved as written, normalised


class Lab:
    """Fresh homes under one temporary folder, a thread pool, and the normalisation of outputs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pool = ThreadPoolExecutor(WORKERS)
        self.reliability_report: Path | None = None
        self.orchestrators = ThreadPoolExecutor(2)  # jobs that wait on runs in self.pool
        self._homes = 0
        self._cache: dict[str, Future] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.orchestrators.shutdown(wait=True, cancel_futures=True)
        self.pool.shutdown(wait=True, cancel_futures=True)

    def once(self, key: str, job: Callable[[], object], *, waits: bool = False) -> Future:
        """Run ``job`` once per key (several regions share one run); ``waits``: it submits runs itself."""
        with self._lock:
            if key not in self._cache:
                self._cache[key] = (self.orchestrators if waits else self.pool).submit(job)
            return self._cache[key]

    def home(self, config: str | None = None) -> Path:
        with self._lock:
            self._homes += 1
            home = self.root / f"home{self._homes}"
        work = home / "project"
        (work / "src").mkdir(parents=True)
        (work / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
        if config is not None:
            (home / ".config" / "dsh").mkdir(parents=True)
            (home / ".config" / "dsh" / "config.toml").write_text(config, encoding="utf-8")
        return home

    @staticmethod
    def env(home: Path, **extra: str) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "COLUMNS": "100",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(extra)
        return env

    def normalise(self, text: str, home: Path | None = None) -> str:
        if home is not None:
            text = text.replace(str(home / "project"), "~/project").replace(str(home), "~")
        text = text.replace(str(self.root), "<tmp>")
        text = re.sub(r"(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}\b", r"\1:<port>", text)
        text = re.sub(r"\('127\.0\.0\.1', \d+\)", "('127.0.0.1', <port>)", text)
        text = re.sub(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b", "<session-id>", text)
        text = re.sub(r'"(time|createdAt)":"[^"]+"', r'"\1":"<time>"', text)
        text = re.sub(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "<time>", text)  # dsh sessions show
        text = re.sub(r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b", "<date>", text)  # dsh sessions list
        return re.sub(r"_ssl\.c:\d+", "_ssl.c:…", text)

    def dsh(
        self,
        args: Iterable[str],
        *,
        stdin: str | None = None,
        config: str | None = None,
        home: Path | None = None,
        sigint_after: str | None = None,
        sigint_on_turn: bool = False,
        signum: int = signal.SIGINT,
        env: dict[str, str] | None = None,
        shown_env: str = "",
        stderr: bool = True,
    ) -> Run:
        """One real ``dsh`` process; ``sigint_after``: send ``signum`` once the output contains that text.

        ``sigint_on_turn``: once the session log shows the turn's first step (``-p`` prints nothing before).
        """
        args = list(args)
        home = home or self.home(config)
        command = [PYTHON, "-m", "dsh.repl", *args]
        shown = " ".join(shlex.quote(arg) for arg in ["dsh", *args])
        if shown_env:
            shown = f"{shown_env} {shown}"
        if not stderr:
            shown += " 2>/dev/null"
        child = subprocess.Popen(
            command, cwd=home / "project", env=self.env(home, **(env or {})),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
        )
        assert child.stdin is not None and child.stdout is not None
        if sigint_after is None and not sigint_on_turn:
            out, _ = child.communicate(stdin.encode() if stdin is not None else b"", timeout=TIMEOUT)
        else:
            out = _read_until(child, sigint_after.encode()) if sigint_after is not None else _await_step(child, home)
            time.sleep(0.5)  # the request is in flight: Ctrl-C now cancels the turn, not the start-up
            child.send_signal(signum)
            rest, _ = child.communicate(timeout=TIMEOUT)
            out += rest
        output = self.normalise(out.decode("utf-8", "replace"), home)
        return Run(self.normalise(shown, home), child.returncode, output)


def _read_until(child: subprocess.Popen, needle: bytes) -> bytes:
    assert child.stdout is not None and child.stdin is not None
    child.stdin.close()
    child.stdin = None  # communicate() later must not flush it
    os.set_blocking(child.stdout.fileno(), False)
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while needle not in data:
        if time.monotonic() > deadline or child.poll() is not None:
            raise RuntimeError(f"dsh never printed {needle!r}; got {data!r}")
        data += child.stdout.read() or b""
        time.sleep(0.02)
    os.set_blocking(child.stdout.fileno(), True)
    return data


def _await_step(child: subprocess.Popen, home: Path) -> bytes:
    """Wait until a session log under ``home`` has a ``step/start``: the request is on its way."""
    assert child.stdin is not None
    child.stdin.close()
    child.stdin = None  # communicate() later must not flush it
    sessions = home / ".local" / "state" / "dsh" / "sessions"
    deadline = time.monotonic() + TIMEOUT
    while not any('"step/start"' in path.read_text(encoding="utf-8") for path in sessions.glob("*.jsonl")):
        if time.monotonic() > deadline or child.poll() is not None:
            raise RuntimeError("dsh never started its turn")
        time.sleep(0.02)
    return b""


def fence(text: str, lang: str = "") -> str:
    return f"```{lang}\n{text.rstrip()}\n```\n"


def session_text(run: Run, stdin: str | None = None, *, status: bool = False) -> str:
    """A run as a terminal shows it: the command (with its here-document), the output, ``$?``."""
    lines = []
    if stdin is not None and stdin.count("\n") > 1:
        lines += [f"$ {run.shown} <<'EOF'", *stdin.rstrip("\n").split("\n"), "EOF"]
    elif stdin is not None:
        lines.append(f"$ echo {shlex.quote(stdin.strip())} | {run.shown}")
    else:
        lines.append(f"$ {run.shown}")
    lines.append(run.output.rstrip("\n"))
    if status:
        lines += ["$ echo $?", str(run.returncode)]
    return "\n".join(line for line in lines if line != "")


def _code(text: str) -> str:
    """A Markdown code span in a table cell; text holding a backtick needs a double-backtick fence."""
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def cell(lines: Iterable[str]) -> str:
    return "<br>".join(_code(line) for line in lines) or "(nothing)"


# --- the scenario catalogue ---------------------------------------------------------------------------

_HEADER = re.compile(r"^\[main turn \d+\] ")
_END = re.compile(r"^\[turn (failed|aborted|rejected|hit the output-token limit|stopped|interrupted)")
_RETRY = re.compile(r"^\[retry \d+/\d+ in ([0-9.]+)s\] ")
_DIAGNOSTIC = re.compile(r"^    (Subagent |Product subagent |Claude Code unattended |Codex unattended )")
SCENARIO_PROMPT = "hello"


def _catalogue() -> list[tuple[str, str, bool]]:
    from dsh.repl.demo.catalogue import SCENARIOS

    return [(s.name, s.summary, s.cancel) for s in SCENARIOS.values()]


def _chunks(names: list[str], count: int) -> list[list[str]]:
    return [names[i::count] for i in range(count) if names[i::count]]


def _split_by_scenario(output: str) -> dict[str, list[str]]:
    """A piped run of ``/scenario NAME`` + prompt pairs, cut at each ``scenario NAME: ...`` line."""
    turns: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.split("\n"):
        match = re.match(r"^scenario (\S+): ", line)
        if match:
            current = turns.setdefault(match.group(1), [])
        elif current is not None and line:
            current.append(_HEADER.sub("", line))
    return turns


BY_FLAG = {"budget-stop"}  # what they show needs --scenario NAME (the demo's cap): each its own -p run


def scenario_turns(lab: Lab) -> dict[str, list[str]]:
    """Every scenario's turn, header stripped: piped runs of a few scenarios each, in parallel."""

    def job() -> dict[str, list[str]]:
        catalogue = _catalogue()
        # their job notices arrive after the turn: no neighbour may share the run
        alone = {"dsh-background", "dsh-background-slow"}
        batched = [name for name, _, cancel in catalogue if not cancel and name not in alone | BY_FLAG]
        futures = [
            lab.pool.submit(lab.dsh, ["--demo"], stdin="".join(f"/scenario {n}\n{SCENARIO_PROMPT}\n" for n in chunk))
            for chunk in _chunks(batched, WORKERS)
        ]
        futures += [lab.pool.submit(lab.dsh, ["--demo"], stdin=f"/scenario {n}\n{SCENARIO_PROMPT}\n") for n in alone]
        cancelled = {name: print_run(lab, name) for name, _, cancel in catalogue if cancel or name in BY_FLAG}
        turns: dict[str, list[str]] = {}
        for future in futures:
            turns.update(_split_by_scenario(future.result().output))
        for name, future in cancelled.items():
            turns[name] = [_HEADER.sub("", line) for line in future.result().output.split("\n") if line]
        missing = [name for name, _, _ in catalogue if not turns.get(name)]
        if missing:
            raise RuntimeError(f"no output for scenarios: {', '.join(missing)}")
        return turns

    return lab.once("scenario-turns", job, waits=True).result()


def result_lines(lines: list[str]) -> list[str]:
    """The line that says how a scenario's turn ended (with the lines that belong to it)."""
    for index, line in enumerate(lines):
        if _END.match(line):
            fix = lines[index + 1 : index + 2]
            return [line, *[f for f in fix if f.startswith("  fix: ")]]
    jobs = [line for line in lines if line.startswith("[job] ")]
    if jobs:
        return jobs[:1]
    results = [i for i, line in enumerate(lines) if line.startswith("  [tool result] ")]
    if results:
        start = results[-1]
        picked = [lines[start].strip()]
        for line in lines[start + 1 :]:
            if not _DIAGNOSTIC.match(line):
                break
            picked.append(line.strip())
        return picked
    continued = [line for line in lines if line.startswith("[continuing after ")]  # the cut it survived
    return [*continued, *lines[-1:]]


def retry_waits(lines: list[str]) -> str:
    waits = [match.group(1) for line in lines if (match := _RETRY.match(line))]
    return ", ".join(waits) + " s" if waits else "–"


def table_scenarios(lab: Lab) -> str:
    from dsh.repl.demo.catalogue import SCENARIOS

    turns = scenario_turns(lab)
    rows = ["| scenario | what happens | retry waits | how the turn ends |",
            "|---|---|---|---|"]
    for name, summary, _ in _catalogue():
        lines = turns[name]
        what = summary.replace("|", "\\|")
        extra = SCENARIOS[name].extra  # marked whether or not it is installed where this table is written
        if extra is not None:
            what += f" (needs the `{extra}` extra)"
        rows.append(f"| `{name}` | {what} | {retry_waits(lines)} | {cell(result_lines(lines))} |")
    return "\n".join(rows) + "\n"


COMPACT_INPUT = "hello\n/compact the greeting\nwhat now?\n"


def compact_session(lab: Lab) -> str:
    """A turn, ``/compact``, and the next turn (whose request starts from the summary), then the log."""

    def run() -> tuple[Run, str]:
        home = lab.home()
        shown = lab.dsh(["--demo"], stdin=COMPACT_INPUT, home=home)
        (log,) = (home / ".local" / "state" / "dsh" / "sessions").glob("*.jsonl")
        records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()[1:]]
        compact = next(record for record in records if record["type"] == "context/compact")
        compact["time"] = "<time>"
        return shown, json.dumps(compact, ensure_ascii=False, separators=(",", ":"))

    shown, record = lab.once("compact", run).result()
    return (fence(session_text(shown, COMPACT_INPUT), "console").rstrip("\n")
            + "\n\nand its record in the session log:\n\n" + fence(record, "json"))


def scenario_session(name: str, prompt: str = SCENARIO_PROMPT, *, status: bool = False) -> Callable[[Lab], str]:
    def generate(lab: Lab) -> str:
        run = lab.once(f"scenario:{name}:{prompt}",
                       lambda: lab.dsh(["--demo", "--scenario", name], stdin=prompt + "\n"))
        return fence(session_text(run.result(), prompt + "\n", status=status), "console")

    return generate


def scenario_print(name: str) -> Callable[[Lab], str]:
    """``dsh --demo --scenario NAME -p PROMPT``, and its exit status."""

    def generate(lab: Lab) -> str:
        return fence(session_text(print_run(lab, name).result(), status=True), "console")

    return generate


def print_run(lab: Lab, name: str, signum: int = signal.SIGINT) -> Future:
    """``dsh --demo --scenario NAME -p hello`` (a signal, SIGINT unless told, for a scenario that waits), once."""
    from dsh.repl.demo.catalogue import SCENARIOS

    cancel = SCENARIOS[name].cancel
    return lab.once(f"print:{name}:{signum}", lambda: lab.dsh(["--demo", "--scenario", name, "-p", SCENARIO_PROMPT],
                                                              sigint_on_turn=cancel, signum=signum))


def stall_session(lab: Lab) -> str:
    run = print_run(lab, "stall").result()
    text = "\n".join([f"$ {run.shown}", "^C" + run.output.rstrip("\n"), "$ echo $?", str(run.returncode)])
    return fence(text, "console")


# --- README ---------------------------------------------------------------------------------------------

SESSION_INPUT = "hello\n/scenario refused\nis anyone there?\n/why\n/scenario max-tokens\nwrite a long poem\n"


def readme_session(lab: Lab) -> str:
    run = lab.once("session", lambda: lab.dsh(["--demo"], stdin=SESSION_INPUT)).result()
    return fence(session_text(run, SESSION_INPUT), "console")


# --- scripting (-p) --------------------------------------------------------------------------------------


def mentions_print(lab: Lab) -> str:
    """``dsh -p`` with three mentions (a file, a file holding a secret, a missing one) against a fault server, and
    the user message the endpoint received (docs/prompt.md)."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    home = lab.home("max_retries = 0\n")
    work = home / "project"
    (work / "src" / "app.py").write_text("def main():\n    return 1\n", encoding="utf-8")
    (work / ".env").write_text("DEEPSEEK_API_KEY=sk-mention0123456789abcdef\n", encoding="utf-8")
    with FaultServer(default=Behaviour("text", text="main() returns 1; .env holds your API key."),
                     models=None) as server:
        run = lab.dsh(["--base-url", server.url, "-p", "explain @src/app.py and @.env (see @nope.py)"], home=home,
                      env={"DEEPSEEK_API_KEY": "any"}, shown_env="DEEPSEEK_API_KEY=any")
        (request,) = server.requests
    sent = request.json["messages"][-1]["content"]
    text = "\n".join([session_text(run), "# the user message the endpoint received:", sent])
    return f"````console\n{text.rstrip()}\n````\n"  # four backticks: the message holds fences of three


SEARCH_FILES = {".gitignore": "node_modules/\n*.log\n", "src/client.py": "MAX_RETRIES = 3\n",
                "src/retry.py": "from client import MAX_RETRIES\n\n\ndef attempts():\n    return MAX_RETRIES + 1\n",
                "debug.log": "MAX_RETRIES overridden to 9\n", "node_modules/left-pad/index.js": "MAX_RETRIES = 99\n"}


def search_tools(lab: Lab) -> str:
    """``dsh -p`` in a git repository whose model calls glob, then search_text: ignored files never show
    (docs/tools.md, "Search: glob and search_text")."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    home = lab.home("max_retries = 0\n")
    work = home / "project"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    for number, (name, text) in enumerate(SEARCH_FILES.items()):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text, encoding="utf-8")
        os.utime(work / name, (1_700_000_000 + number, 1_700_000_000 + number))  # glob: newest first
    calls = [("glob", {"pattern": "**/*.py"}), ("search_text", {"pattern": "MAX_RETRIES"})]
    with FaultServer(models=None) as server:
        for number, (tool, arguments) in enumerate(calls, 1):
            server.push(Behaviour("tool_call", id=f"call_{number}", name=tool, arguments=json.dumps(arguments),
                                  reasoning=""))
        server.push(Behaviour("text", text="MAX_RETRIES = 3 in src/client.py; src/retry.py adds one."))
        run = lab.dsh(["--base-url", server.url, "-p", "where is the retry limit set?"], home=home,
                      env={"DEEPSEEK_API_KEY": "any"}, shown_env="DEEPSEEK_API_KEY=any")
    return fence(session_text(run), "console")


def print_answer_only(lab: Lab) -> str:
    """``-p`` with stderr thrown away: the answer alone (the reasoning and tool lines went to stderr)."""
    run = lab.once("print-answer", lambda: lab.dsh(["--demo", "--scenario", "tool-call", "-p", "look around"],
                                                  stderr=False)).result()
    return fence(session_text(run), "console")


def print_json(lab: Lab) -> str:
    """``--output-format json``, shown as ``jq .`` would pretty-print it (the duration varies: ``<seconds>``)."""
    run = lab.once("print-json", lambda: lab.dsh(["--demo", "--scenario", "http-402", "-p", "hello",
                                                 "--output-format", "json"], stderr=False)).result()
    answer = json.loads(run.output)
    answer["duration_s"] = "<seconds>"
    pretty = json.dumps(answer, indent=2, ensure_ascii=False).replace('"<seconds>"', "<seconds>")
    shown = run.shown.replace(" 2>/dev/null", " 2>/dev/null | jq .")
    return fence("\n".join([f"$ {shown}", pretty, "$ echo ${PIPESTATUS[0]}", str(run.returncode)]), "console")


def print_stream_json(lab: Lab) -> str:
    run = lab.once("print-stream-json", lambda: lab.dsh(["--demo", "--scenario", "retry-then-success", "-p", "hello",
                                                        "--output-format", "stream-json"], stderr=False)).result()
    return fence(session_text(run), "console")


def readme_help(lab: Lab) -> str:
    run = lab.once("help", lambda: lab.dsh(["--help"])).result()
    return fence(session_text(run), "console")


def readme_slash_help(lab: Lab) -> str:
    run = lab.once("slash-help", lambda: lab.dsh(["--demo"], stdin="/help\n")).result()
    return fence(session_text(run, "/help\n"), "console")


_CRASHED_LOG = [
    {"type": "session", "version": 1, "id": "20260101-000000-000000", "createdAt": "2026-01-01T00:00:00.000Z",
     "cwd": "/"},
    {"type": "turn/start", "seq": 1, "time": "2026-01-01T00:00:00.000Z", "data": {"turn": 1, "prompt": "hello"}},
    {"type": "step/start", "seq": 2, "time": "2026-01-01T00:00:00.001Z", "data": {"turn": 1, "step": 1}},
]


def _resumed_after_crash(lab: Lab) -> Run:
    """A session log whose last turn never ended (the process was killed), then ``dsh --resume last``."""
    home = lab.home()
    sessions = home / ".local" / "state" / "dsh" / "sessions"
    sessions.mkdir(parents=True, mode=0o700)
    log = sessions / "20260101-000000-000000.jsonl"
    project = str(home / "project")  # where the runs start: `last` is this project's latest session
    header = {**_CRASHED_LOG[0], "cwd": project, "project": project}
    log.write_text("".join(json.dumps(record) + "\n" for record in [header, *_CRASHED_LOG[1:]]), encoding="utf-8")
    log.chmod(0o600)
    return lab.dsh(["--demo", "--resume", "last"], stdin="hello again\n", home=home)


# how it ends, the scenario that shows it, and the signal that ends it (None: no signal)
_ENDS = [
    ("completed", "text", None),
    ("failed", "http-401", None),
    ("aborted (Ctrl-C)", "stall", signal.SIGINT),
    # `timeout` sends SIGTERM but exits 124 itself; `--preserve-status` passes dsh's 143 on (README.md)
    ("aborted (SIGTERM, e.g. `timeout --preserve-status`)", "stall", signal.SIGTERM),
    ("rejected", "prompt-rejected", None),
    ("output-token limit", "max-tokens", None),
    ("interrupted (shown first on `--resume`)", None, None),
]


def table_turn_ends(lab: Lab) -> str:
    runs: dict[tuple[str, int], Future] = {}
    for _, name, signum in _ENDS:
        if name is None:
            continue
        runs[name, signum or signal.SIGINT] = print_run(lab, name, signum or signal.SIGINT)
    crashed = lab.once("resume-crashed", lambda: _resumed_after_crash(lab))
    rows = ["| how the turn ends | try it | the turn-end line (and fix line) | `-p` exit status |",
            "|---|---|---|---|"]
    for what, name, signum in _ENDS:
        if name is None:
            run = crashed.result()
            first = _HEADER.sub("", run.output.split("\n")[0])
            rows.append(f"| {what} | `--resume` a session whose dsh was killed mid-turn | {cell([first])} | – |")
            continue
        run = runs[name, signum or signal.SIGINT].result()
        lines = [_HEADER.sub("", line) for line in run.output.split("\n") if line]
        ends = [line for line in lines if _END.match(line) or line.startswith("  fix: ")]
        rows.append(f"| {what} | `--scenario {name}` | {cell(ends)} | {run.returncode} |")
    return "\n".join(rows) + "\n"


def sessions_cli(lab: Lab) -> str:
    """Two sessions in one project, then ``dsh sessions list`` and ``dsh sessions show last``."""

    def job() -> str:
        home = lab.home()
        runs = [lab.dsh(["--demo", "-p", "hello"], home=home),
                lab.dsh(["--demo", "--scenario", "tool-call", "-p", "what is in this project?"], home=home),
                lab.dsh(["sessions", "list"], home=home),
                lab.dsh(["sessions", "show", "last"], home=home)]
        return fence("\n".join(session_text(run) for run in runs), "console")

    return lab.once("sessions-cli", job).result()


def export_md(lab: Lab) -> str:
    """A tool-call turn, then ``dsh sessions export last --format md`` (docs/prompt.md, "Export")."""
    home = lab.home()
    runs = [lab.dsh(["--demo", "--scenario", "tool-call", "-p", "what is in this project?"], home=home),
            lab.dsh(["sessions", "export", "last", "--format", "md"], home=home)]
    text = "\n".join(session_text(run) for run in runs)
    return f"````console\n{text.rstrip()}\n````\n"  # four backticks: the export holds fences of three


def resume_session(lab: Lab) -> str:
    run = lab.once("resume-crashed", lambda: _resumed_after_crash(lab)).result()
    return fence(session_text(run, "hello again\n"), "console")


# --- configuration --------------------------------------------------------------------------------------


def config_errors(lab: Lab) -> str:
    bad = lab.once("config-bad", lambda: lab.dsh(["-p", "hello"], config='max_tokens = "lots"\n',
                                                 env={"DEEPSEEK_API_KEY": "sk-not-a-real-key"},
                                                 shown_env="DEEPSEEK_API_KEY=sk-..."))
    unknown = lab.once("config-unknown", lambda: lab.dsh(["--demo", "-p", "hello"], config="colour = true\n"))
    nokey = lab.once("config-nokey", lambda: lab.dsh(["-p", "hello"]))
    parts = []
    for run, before in ((bad, ['$ cat ~/.config/dsh/config.toml', 'max_tokens = "lots"']),
                        (unknown, ["$ cat ~/.config/dsh/config.toml", "colour = true"]),
                        (nokey, ["$ rm ~/.config/dsh/config.toml; unset DEEPSEEK_API_KEY"])):
        result = run.result()
        parts += [*before, session_text(result, status=True)]
    return fence("\n".join(parts), "console")


def prompt_guard(lab: Lab) -> str:
    prompt = "deploy with sk-live-0123456789abcdefghij"
    run = lab.once("prompt-guard", lambda: lab.dsh(["--demo"], stdin=prompt + "\n")).result()
    return fence(session_text(run, prompt + "\n"), "console")


# --- subagents ------------------------------------------------------------------------------------------

DELEGATE_PROMPT = "Summarise the README with a helper"

# --- MCP servers (docs/mcp.md) -------------------------------------------------------------------------
# The servers are the test fixtures (fixtures/mcp_servers.py, run from this checkout); the model is the fault
# server scripted in-process to call the tool (its CLI script cannot spell JSON arguments). The config as shown
# names this checkout /path/to/dsh and the interpreter `python`; the file dsh reads holds the real paths.

MCP_OK = "fixture"
_MCP_SHOWN_CHECKOUT = "/path/to/dsh"


def _mcp_table(name: str, mode: str, extra: str = "") -> str:
    argv = json.dumps([PYTHON, "-m", "fixtures.mcp_servers", mode])
    return f'[mcp_servers.{name}]\ncommand = {argv}\ncwd = "{REPO}"\n{extra}'


def _mcp_shown(text: str) -> str:
    return text.replace(json.dumps(PYTHON)[1:-1], "python").replace(str(REPO), _MCP_SHOWN_CHECKOUT)


def _mcp_config_lines(config: str) -> list[str]:
    return ["$ cat ~/.config/dsh/config.toml", *_mcp_shown(config).rstrip("\n").split("\n")]


def _mcp_model_run(lab: Lab, config: str, turns: list[tuple[str, object]], args: list[str],
                   stdin: str | None) -> Run:
    """dsh against a fault server that answers each turn with ``(tool name, arguments)`` then a sentence."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    with FaultServer() as server:
        for index, (tool, arguments) in enumerate(turns, 1):
            server.push(Behaviour("tool_call", id=f"call_{index}", name=tool, arguments=json.dumps(arguments),
                                  reasoning="The user asked for this tool; call it."),
                        Behaviour("text", text="Done: the tool answered."))
        run = lab.dsh(["--base-url", server.url, *args], stdin=stdin, config=config,
                      env={"DEEPSEEK_API_KEY": "any"}, shown_env="DEEPSEEK_API_KEY=any")
    return Run(_mcp_shown(run.shown), run.returncode, _mcp_shown(run.output))


MCP_CALL_INPUT = "echo hello from dsh\n"


def mcp_call(lab: Lab) -> str:
    """A piped turn whose model calls the fixture's read-only ``echo``: no approval asked."""
    config = "max_retries = 0\n\n" + _mcp_table(MCP_OK, "ok")
    run = lab.once("mcp-call", lambda: _mcp_model_run(
        lab, config, [(f"mcp__{MCP_OK}__echo", {"text": "hello from dsh"})], [], MCP_CALL_INPUT)).result()
    return fence("\n".join([*_mcp_config_lines(config), session_text(run, MCP_CALL_INPUT)]), "console")


MCP_FAILURE_INPUT = "hello\n/why\n"


def mcp_failure(lab: Lab) -> str:
    """A server that exits at start: the announcement, a turn that carries on without it, ``/why``."""
    config = _mcp_table("notes", "exit-at-start")
    run = lab.once("mcp-failure", lambda: lab.dsh(["--demo"], stdin=MCP_FAILURE_INPUT, config=config)).result()
    run = Run(_mcp_shown(run.shown), run.returncode, _mcp_shown(run.output))
    return fence("\n".join([*_mcp_config_lines(config), session_text(run, MCP_FAILURE_INPUT)]), "console")


MCP_BAD_CONFIGS = ('[mcp_servers.files]\ncommand = "my-mcp-server"\nurl = "http://127.0.0.1:8931/mcp"\n',
                   '[mcp_servers.files]\ncommand = "my-mcp-server"\ntimeout = 30\n')


def mcp_config_errors(lab: Lab) -> str:
    """A bad ``[mcp_servers.NAME]`` table stops dsh with one line naming the table and the key."""
    runs = [lab.once(f"mcp-config:{index}", lambda config=config: lab.dsh(["--demo", "-p", "hello"], config=config))
            for index, config in enumerate(MCP_BAD_CONFIGS)]
    parts: list[str] = []
    for config, future in zip(MCP_BAD_CONFIGS, runs, strict=True):
        parts += [*_mcp_config_lines(config), session_text(future.result(), status=True)]
    return fence("\n".join(parts), "console")


def mcp_allow(lab: Lab) -> str:
    """``-p`` and a tool that is not read-only: denied, then run with ``--allow-mcp`` (needs mcprepl)."""
    config = "max_retries = 0\n\n" + _mcp_table(MCP_OK, "ok")
    add = [(f"mcp__{MCP_OK}__add", {"a": 2, "b": 3})]
    denied = lab.once("mcp-denied", lambda: _mcp_model_run(lab, config, add, ["-p", "add 2 and 3"], None))
    allowed = lab.once("mcp-allowed", lambda: _mcp_model_run(lab, config, add, ["-p", "add 2 and 3", "--allow-mcp"],
                                                             None))
    parts = [*_mcp_config_lines(config)]
    for future in (denied, allowed):
        parts.append(session_text(future.result(), status=True))
    return fence("\n".join(parts), "console")


MCP_LIST_INPUT = "/mcp\n/mcp restart nope\n"


def mcp_list(lab: Lab) -> str:
    """``/mcp`` with a ready, a failed and a disabled server; ``/mcp restart`` of an unknown name (needs mcprepl)."""
    config = "\n".join([_mcp_table(MCP_OK, "ok"), _mcp_table("notes", "exit-at-start"),
                        _mcp_table("later", "ok", "enabled = false\n")])
    # the first turn waits for the servers to settle, so /mcp shows them started or failed
    stdin = "hello\n" + MCP_LIST_INPUT
    run = lab.once("mcp-list", lambda: lab.dsh(["--demo"], stdin=stdin, config=config)).result()
    run = Run(_mcp_shown(run.shown), run.returncode, _mcp_shown(run.output))
    return fence("\n".join([*_mcp_config_lines(config), session_text(run, stdin)]), "console")


# --- the fault server -----------------------------------------------------------------------------------

FAULT_SCRIPT = "text,http_503,reset_mid_stream"
FAULT_TURNS = "one\ntwo\nthree\n"


@dataclass
class _FaultServerProcess:
    """``python -m dsh.llm.loopback.fault_server --port 0 ...`` started by hand: its banner lines, then (once
    :func:`_fault_server` has stopped it with Ctrl-C) the rest of its log."""

    process: subprocess.Popen[bytes]
    rest: str = ""

    def readline(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().decode()


@contextlib.contextmanager
def _fault_server(lab: Lab, home: Path, args: list[str]) -> Iterator[_FaultServerProcess]:
    process = subprocess.Popen([PYTHON, "-m", "dsh.llm.loopback.fault_server", "--port", "0", *args],
                               env=lab.env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    server = _FaultServerProcess(process)
    try:
        yield server
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=TIMEOUT)
        server.rest = rest.decode()


def _report_session(lab: Lab) -> str:
    """An HTTP 500 met with ``-p --report``, what the capsule holds (jq), and ``--replay`` of the capsule."""
    home = lab.home("max_retries = 0\n")
    with _fault_server(lab, home, ["--script", "http_500"]) as server:
        url = re.search(r"listening on (\S+)", server.readline())
        if url is None:
            raise RuntimeError("fault server did not start")
        live = lab.dsh(["--base-url", url.group(1), "-p", "hello", "--report", "capsule.jsonl"], home=home,
                       env={"DEEPSEEK_API_KEY": "sk-secret0123456789"},
                       shown_env="DEEPSEEK_API_KEY=sk-secret0123456789")
    path = home / "project" / "capsule.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    report = next(record for record in records if record["type"] == "report")

    def line(value: object) -> str:
        return lab.normalise(json.dumps(value, ensure_ascii=False, separators=(",", ":")), home)

    replayed = lab.dsh(["--replay", "capsule.jsonl", "-p", "hello"], home=home)
    return fence("\n".join([
        "$ python -m dsh.llm.loopback.fault_server --port 0 --script http_500 &",
        session_text(live, status=True),
        "$ ls -l capsule.jsonl | cut -c1-10", f"{stat.filemode(path.stat().st_mode)}",
        "$ jq -c '{type}' capsule.jsonl", *(line({"type": record["type"]}) for record in records),
        "$ jq -c 'select(.type == \"report\") | {turn, fix, why}' capsule.jsonl",
        line({key: report[key] for key in ("turn", "fix", "why")}),
        "$ jq -c 'select(.type == \"report\") | .settings.api_key, .settings.max_retries, .exchanges' capsule.jsonl",
        line(report["settings"]["api_key"]), line(report["settings"]["max_retries"]), line(report["exchanges"]),
        "$ jq -r 'select(.type == \"report\") | .doctor.steps[] | \"\\(.status) \\(.step)\"' capsule.jsonl",
        *(f"{step['status']} {step['step']}" for step in report["doctor"]["steps"]),
        session_text(replayed, status=True),
    ]), "console")


def _fault_server_session(lab: Lab) -> tuple[str, Run, str]:
    """The fault server by hand, and a dsh (no retries) whose three turns meet its three behaviours."""
    home = lab.home("max_retries = 0\n")
    with _fault_server(lab, home, ["--script", FAULT_SCRIPT]) as server:
        head = [server.readline() for _ in range(3)]
        url = re.search(r"listening on (\S+)", head[0])
        if url is None:
            raise RuntimeError(f"fault server did not start: {head!r}")
        run = lab.dsh(["--base-url", url.group(1)], stdin=FAULT_TURNS, home=home,
                      env={"DEEPSEEK_API_KEY": "any"}, shown_env="DEEPSEEK_API_KEY=any")
        time.sleep(0.2)
    log = "".join(head) + server.rest
    log = log.replace("fault server stopping", "^Cfault server stopping")
    shown = "python -m dsh.llm.loopback.fault_server --port 0 --script " + FAULT_SCRIPT
    return f"$ {shown}\n{lab.normalise(log, home)}", run, FAULT_TURNS


def fault_server_log(lab: Lab) -> str:
    log, _, _ = lab.once("fault-server", lambda: _fault_server_session(lab)).result()
    return fence(log, "console")


def fault_server_dsh(lab: Lab) -> str:
    _, run, stdin = lab.once("fault-server", lambda: _fault_server_session(lab)).result()
    return fence("$ cat ~/.config/dsh/config.toml\nmax_retries = 0\n" + session_text(run, stdin), "console")


def _record_replay_session(lab: Lab) -> str:
    """A mid-stream reset met live with ``--record``, the trace, and ``--replay`` printing the same line."""
    home = lab.home("max_retries = 0\n")
    script = "reset_mid_stream:delay=0.05"  # a pause between frames: one read, one data record each
    with _fault_server(lab, home, ["--script", script]) as server:
        url = re.search(r"listening on (\S+)", server.readline())
        if url is None:
            raise RuntimeError("fault server did not start")
        live = lab.dsh(["--base-url", url.group(1), "-p", "hello", "--record", "trace.jsonl"], home=home,
                       env={"DEEPSEEK_API_KEY": "sk-secret0123456789"},
                       shown_env="DEEPSEEK_API_KEY=sk-secret0123456789")
    records = [json.loads(line) for line in (home / "project" / "trace.jsonl").read_text(encoding="utf-8").splitlines()]
    shown = []
    for record in records:
        if "t" in record:
            record["t"] = "<t>"
        if "created" in record:
            record["created"], record["dsh"] = "<time>", "<version>"
        brief = {key: value for key, value in record.items() if key not in ("headers", "body")}
        shown.append(lab.normalise(json.dumps(brief, ensure_ascii=False, separators=(",", ":")), home)[:110])
    request = next(record for record in records if record["type"] == "request")
    headers = [[name, "<n>" if name.lower() == "content-length" else value]  # the prompt holds the tmp path
               for name, value in request["headers"]]
    replayed = lab.dsh(["--replay", "trace.jsonl", "-p", "hello"], home=home)
    return fence("\n".join([
        "$ cat ~/.config/dsh/config.toml", "max_retries = 0",
        f"$ python -m dsh.llm.loopback.fault_server --port 0 --script {script} &",
        session_text(live, status=True),
        "$ jq -c 'del(.headers, .body)' trace.jsonl | cut -c1-110", *shown,
        "$ jq -c 'select(.type == \"request\") | .headers' trace.jsonl",
        lab.normalise(json.dumps(headers, separators=(",", ":")), home),
        session_text(replayed, status=True),
    ]), "console")


def _record_replay_refused(lab: Lab) -> str:
    """A refused connection met live with ``--record``, its end record's chain, and ``--replay`` refused again."""
    from dsh.llm.loopback.fault_server import closed_port

    home = lab.home("max_retries = 0\n")
    with closed_port() as port:
        live = lab.dsh(["--base-url", f"http://127.0.0.1:{port}", "-p", "hello", "--record", "trace.jsonl"],
                       home=home, env={"DEEPSEEK_API_KEY": "sk-secret0123456789"},
                       shown_env="DEEPSEEK_API_KEY=sk-secret0123456789")
        replayed = lab.dsh(["--replay", "trace.jsonl", "-p", "hello"], home=home)
    records = [json.loads(line) for line in (home / "project" / "trace.jsonl").read_text(encoding="utf-8").splitlines()]
    end = next(record for record in records if record["type"] == "end")
    chain = [lab.normalise(json.dumps(link, ensure_ascii=False, separators=(",", ":")), home) for link in end["chain"]]
    return fence("\n".join([
        "$ cat ~/.config/dsh/config.toml", "max_retries = 0",
        session_text(live, status=True),
        "$ jq -c 'select(.type == \"end\") | .chain[]' trace.jsonl", *chain,
        session_text(replayed, status=True),
    ]), "console")


# What each behaviour does, in words (checked against llm/loopback/fault_server.py); the table's last column
# is what dsh printed against it. A behaviour missing here fails the run, so the table stays complete.
BEHAVIOURS: dict[str, str] = {
    "text": "a normal streamed answer (`text=` to choose it; a prefix-completion request gets the rest of it), "
            "usage, `[DONE]`",
    "slow_text": "the same, with `delay=` seconds between chunks (default 0.05)",
    "reasoning": "`reasoning_content` deltas first, then the answer",
    "tool_call": "one tool call with fragmented arguments (`name=`, `arguments=`, `id=`, `fragments=`)",
    "parallel_tool_calls": "two tool calls whose argument fragments interleave by `index`",
    "keepalive_bomb": "a gzip body of `inflated_mb=` MiB of `:\\n` keep-alives (default 5 120, ~1/1000 of it "
                      "on the wire), then silence",
    "tool_call_flood": "`count=` tool calls in one response (default 10^6; dsh runs 128 and drops the rest)",
    "huge_arguments": "one tool call whose `path` argument is `mb=` MiB long (default 100), in 1 MiB deltas",
    "length": "finish reason `length`: the output-token limit",
    "content_filter": "finish reason `content_filter`",
    "insufficient_system_resource": "finish reason `insufficient_system_resource`",
    "empty": "finish `stop` with no content at all",
    "empty_body": "200 with an empty body",
    "no_done": "a whole stream with its finish reason, but no `data: [DONE]` (completes)",
    "surrogates": "an emoji's surrogate pair split across two chunks, then a lone surrogate",
    "no_finish": "text, then a clean close with neither a finish reason nor `data: [DONE]`",
    "partial_eof": "the body ends cleanly in the middle of a `data:` line",
    "malformed_json": "a `data:` payload that is not JSON (`payload=` to choose it)",
    "malformed_shape": "valid JSON of the wrong shape",
    "keepalive_then_text": "`count=` `: keep-alive` comments `interval=` apart, then an answer",
    "keepalive_only": "only keep-alive comments until the client gives up (`text=` streams some text first)",
    "stall_before_headers": "the request is read, then nothing comes back",
    "stall_after_headers": "`200` and headers, then silence",
    "stall_mid_stream": "some text, then silence",
    "reset_before_headers": "TCP reset (RST) before any response byte",
    "disconnect_before_response": "a clean close before any response byte",
    "reset_mid_stream": "some text, then a TCP reset",
    "reset_mid_tool_call": "a tool call's name and first argument fragment, then a TCP reset (`reasoning=` or "
                           "`text=` first)",
    "fin_mid_stream": "some text, then a clean close inside the chunked body",
    "huge_text": "`n=` deltas of one to three characters (default 200 000, `seed=` picks them), sent in 1 MiB writes",
    "http_400": "400 with DeepSeek's thinking-mode wording",
    "http_400_context": "400 with the context-overflow wording",
    "http_401": "authentication failure",
    "http_402": "insufficient balance",
    "http_403": "permission failure",
    "http_413": "request too large",
    "http_422": "invalid parameters",
    "http_429": "rate limit with `Retry-After: 2` (`retry_after=` to change it; `retry_after_date_in=N`: an HTTP "
                "date N seconds after the answer)",
    "http_429_concurrency": "DeepSeek's concurrency-cap 429, without `Retry-After` (`FaultServer(concurrency_cap=N)` "
                            "answers it to a request past N in flight); `--dialect deepseek` names the cap",
    "http_500": "server error",
    "http_502_html": "502 with an nginx HTML page instead of JSON",
    "proxy_407": "407 as a forward proxy refusing its credentials (echoing them in the body)",
    "proxy_503": "503 as squid answers when its upstream refused (X-Squid-Error, Via)",
    "http_503": "server overloaded",
    "http_error": "any status: `status=`, `message=`, `body=` for a verbatim body (also spelled `http_NNN`)",
    "error_event": "a relay's in-stream `data: {\"error\": {...}}` event, then a close, as LiteLLM ends a failed "
                   "stream (`text=` first, `message=`, `type=`, `code=`)",
    "gateway_upstream_401": "401 as LiteLLM relays its upstream's refusal of LiteLLM's own key, with LiteLLM's headers",
    "gateway_upstream_402": "LiteLLM's relay of its upstream's 402 (its own account out of credit), with LiteLLM's "
                            "headers",
}
# dsh runs the tools, then asks again
_FOLLOW_UP = {"tool_call": "text", "parallel_tool_calls": "text", "tool_call_flood": "text", "huge_arguments": "text"}
_BEHAVIOUR_PARAMS = {"http_error": "http_error:status=418:message=I'm a Teapot", "huge_text": "huge_text:n=12",
                     "keepalive_bomb": "keepalive_bomb:inflated_mb=20", "tool_call_flood": "tool_call_flood:count=2",
                     "huge_arguments": "huge_arguments:mb=1"}
_BEHAVIOUR_CONFIG = "max_retries = 0\nstream_idle_timeout = 1\nfirst_token_timeout = 1\n"


def _behaviour_names(lab: Lab) -> list[str]:
    listed = subprocess.run([PYTHON, "-m", "dsh.llm.loopback.fault_server", "--list"], capture_output=True, text=True,
                            env=lab.env(lab.root), timeout=TIMEOUT, check=True)
    names = listed.stdout.split()
    unknown = sorted(set(names) - set(BEHAVIOURS))
    if unknown:
        raise RuntimeError(f"describe these fault-server behaviours in docs/transcripts.py: {', '.join(unknown)}")
    return names


def _behaviour_run(lab: Lab, names: list[str]) -> dict[str, list[str]]:
    """One fault server scripted with every behaviour in turn; one piped dsh turn per behaviour."""
    home = lab.home(_BEHAVIOUR_CONFIG)
    script = []
    for name in names:
        script.append(_BEHAVIOUR_PARAMS.get(name, name))
        if name in _FOLLOW_UP:
            script.append(_FOLLOW_UP[name])
    with _fault_server(lab, home, ["--script", ",".join(script)]) as server:
        url = re.search(r"listening on (\S+)", server.readline())
        if url is None:
            raise RuntimeError("fault server did not start")
        run = lab.dsh(["--base-url", url.group(1)], stdin="".join(f"{name}\n" for name in names), home=home,
                      env={"DEEPSEEK_API_KEY": "any"})
    served = re.findall(r"-> (\S+) \(fault-", server.rest)
    expected = [item.split(":")[0] for item in script]
    if served != expected:
        raise RuntimeError(f"the turns did not meet the behaviours in order: {served} != {expected}")
    turns: dict[int, list[str]] = {}
    current: list[str] = []
    for line in run.output.split("\n"):
        match = re.match(r"^\[main turn (\d+)\] ", line)
        if match:
            current = turns.setdefault(int(match.group(1)), [])
            line = line[match.end():]
        if line:
            current.append(line)
    return {name: turns.get(number, []) for number, name in enumerate(names, 1)}


def table_behaviours(lab: Lab) -> str:
    names = lab.once("behaviour-names", lambda: _behaviour_names(lab)).result()
    turns = lab.once("behaviours", lambda: _behaviour_run(lab, names)).result()
    rows = ["| behaviour | what the server does | what dsh printed (`max_retries = 0`, 1 s deadlines) |",
            "|---|---|---|"]
    for name in names:
        lines = turns[name]
        shown = _BEHAVIOUR_PARAMS.get(name, name)
        rows.append(f"| `{shown}` | {BEHAVIOURS[name]} | {cell(lines)} |")
    return "\n".join(rows) + "\n"


# --- architecture ---------------------------------------------------------------------------------------


def session_log(lab: Lab) -> str:
    def job() -> str:
        home = lab.home()
        lab.dsh(["--demo"], stdin="/scenario retry-then-success\nhello\n/scenario tool-call\nwhat is here?\n",
                home=home)
        logs = sorted((home / ".local" / "state" / "dsh" / "sessions").glob("*.jsonl"))
        if len(logs) != 1:
            raise RuntimeError(f"expected one session log, found {logs}")
        return lab.normalise(logs[0].read_text(encoding="utf-8"), home)

    text = lab.once("session-log", job).result()
    return fence("$ cat ~/.local/state/dsh/sessions/<session-id>.jsonl\n" + text, "console")


# What each code means, in words; retried or not and the fix line come from the code itself.
ERROR_CODES: list[tuple[str, str, str | None]] = [
    ("TRANSPORT", "connect, TLS, DNS, reset or close before or during the response", "mid-stream-drop"),
    ("TIMEOUT", "no response headers, or only keep-alives until `first_token_timeout` (retried once at most), "
     "or no content for `stream_idle_timeout` after content; the message says which", "keepalive-stall"),
    ("AUTH", "HTTP 401 or 403", "http-401"),
    ("QUOTA", "HTTP 402, or the provider's balance or quota wording (a 429 too); relayed by a gateway from its "
              "upstream, the fix names the gateway's upstream account instead", "http-402"),
    ("RATE_LIMIT", "HTTP 429 (a `Retry-After` is waited for up to 60 s; a longer one ends the turn, saying when to "
                   "retry)", "http-429"),
    ("SERVER", "HTTP 5xx", "http-503"),
    ("INVALID_REQUEST", "HTTP 400 (other than context overflow) and 413", "http-400"),
    ("CONTEXT_WINDOW_EXCEEDED", "HTTP 400 with the context-overflow wording", "http-400-context"),
    ("HTTP_<status>", "any other HTTP status", "http-422"),
    ("EMPTY_RESPONSE", "a 2xx with no body, or `stop` with no content at all", None),
    ("STREAM_CLOSED", "the stream ended with neither `[DONE]` nor a finish reason", "stream-closed"),
    ("MALFORMED_RESPONSE", "a payload that is not JSON, or JSON of the wrong shape", "malformed"),
    ("CONTENT_FILTER", "finish reason `content_filter` (any unknown finish reason becomes its upper-case code)",
     "content-filter"),
    ("ABORTED", "the caller cancelled the request (the turn then ends `aborted`, not `error`)", None),
    ("MAX_STEPS", "the model kept calling tools for 50 steps", None),
    ("SESSION_LOG", "the session log could not be written (the turn stops; `/new` starts a fresh log)", None),
    ("CONFIG", "a setting the turn needs is wrong or missing: `max_cost` on a model with no price, a provider's "
               "extra not installed (at start-up the same code is the config line, exit 2)", None),
    ("UNKNOWN", "a failure that is not a dsh error (a bug: `DSH_DEBUG=1` shows the traceback)", None),
]


# Rows for codes that only some versions of the code declare (shown when dsh.llm.ErrorCode has them).
DECLARED_ONLY: list[tuple[str, str, str | None]] = [
    ("PROXY", "the proxy that carried the request failed it (`httpx.ProxyError`, HTTP 407, a proxy's 5xx)", None),
    ("UNKNOWN_FINISH", "a finish reason with no letters or digits to name a code by", None),
]

# Codes that reach the user as a start-up, command or protocol line, never as a turn end (architecture.md
# names them in prose).
NOT_TURN_ENDS = {"STARTUP", "SESSION_NOT_FOUND", "SESSION_AMBIGUOUS", "SESSION_LOCKED", "TURN_BUSY",
                 "AGENT_CLOSED", "PROTOCOL", "TRANSPORT_CLOSED", "PROCESS_START", "LINE_TOO_LONG", "COMPACT",
                 "SUBAGENT", "MCP", "HOOK"}


def _fix_line(fix_line: Callable[..., str | None], code: str) -> str | None:
    """The renderer's fix line for a failure with ``code`` (it takes a reason dict, or a typed reason)."""
    from dsh.agent_loop import reasons

    reason = {"kind": "error", "code": code, "message": "example", "step": 1}
    typed = getattr(reasons, "EndReason", None) or reasons.TurnEnd
    try:
        return fix_line(typed.from_dict(reason))
    except (AttributeError, TypeError):
        return fix_line(reason)


_RETRIED_ANCHOR = "reliability.md#which-failures-before-a-response-are-retried"


def _retry_table() -> types.ModuleType:
    """docs/retry_table.py: the retry table read from the client and the retry policy."""
    if str(REPO / "docs") not in sys.path:
        sys.path.insert(0, str(REPO / "docs"))
    import retry_table  # type: ignore[import-not-found]  # beside this script: loaded only when a table asks

    return retry_table


def table_error_codes(lab: Lab) -> str:
    import dsh.llm
    from dsh.agent_loop.retry import RetryPolicy
    from dsh.repl.turn_end import fix_line

    rows_in = list(ERROR_CODES)
    declared = getattr(dsh.llm, "ErrorCode", None)  # one enum of every code, where the code has one
    if declared is not None:
        values = {str(member.value) for member in declared}
        rows_in += [row for row in DECLARED_ONLY if row[0] in values]
        described = {code for code, _, _ in rows_in} | NOT_TURN_ENDS
        missing = sorted(str(member.value) for member in declared if str(member.value) not in described)
        if missing:
            raise RuntimeError(f"describe these error codes in ERROR_CODES (docs/transcripts.py): {missing}")
    turns = scenario_turns(lab)
    policy = RetryPolicy()
    # A code some of whose failures cap themselves at no retry says so, linking the generated table.
    capped = {code for _, code, _, retried in _retry_table().outcomes() if not retried}
    rows = ["| code | when | retried | fix line | in the demo |", "|---|---|---|---|---|"]
    for code, when, scenario in rows_in:
        probe = "HTTP_422" if code == "HTTP_<status>" else code
        retried = "yes" if policy.should_retry(probe, 0) else "no"
        if retried == "yes" and probe in capped:
            retried = f"yes, [not all]({_RETRIED_ANCHOR})"
        fix = _fix_line(fix_line, probe)
        fix_cell = _code(fix.strip()) if fix else "–"
        demo = "–"
        if scenario is not None:
            ends = [line for line in turns[scenario] if _END.match(line)]
            if not ends or f"[turn failed {probe}]" not in ends[0]:
                raise RuntimeError(f"scenario {scenario} did not end with {probe}: {ends}")
            demo = f"`{scenario}`"
        rows.append(f"| `{code}` | {when} | {retried} | {fix_cell} | {demo} |")
    return "\n".join(rows) + "\n"


# --- reliability (slow) ---------------------------------------------------------------------------------


def table_fault_matrix(lab: Lab) -> str:
    sys.path.insert(0, str(REPO / "tests" / "reliability"))
    from fault_matrix import markdown_table, run_all  # type: ignore[import-not-found]

    folder = lab.root / "fault-matrix"
    folder.mkdir()
    outcomes = run_all(folder)
    bad = [outcome.fault.name for outcome in outcomes if not outcome.matches()]
    if bad:
        raise RuntimeError(f"fault-matrix rows that did not produce their expected line: {', '.join(bad)}")
    return markdown_table(outcomes)


# --- reliability counts (from a report) ---------------------------------------------------------------

REPORT_ENV = "DSH_RELIABILITY_REPORT"


def table_reliability_counts(lab: Lab) -> str:
    """The counts a whole-suite run wrote to ``$DSH_RELIABILITY_REPORT`` (``--reliability-report PATH``)."""
    path = lab.reliability_report
    if path is None:
        raise RuntimeError("pass --reliability-report PATH (a JSON file written by a run with "
                           f"{REPORT_ENV}=PATH python -m pytest)")
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = ["| what | measured |", "|---|---|"]
    def number(value: object) -> str:
        return f"{value:,}".replace(",", " ") if isinstance(value, int) else str(value)

    for key, value in sorted(report.get("counts", {}).items()):
        rows.append(f"| {key} | {number(value)} |")
    if report.get("fuzz_total"):
        rows.append(f"| fuzz cases (total) | {number(report['fuzz_total'])} |")
    for key, value in sorted(report.get("figures", {}).items()):
        rows.append(f"| {key} | {value} |")
    return "\n".join(rows) + "\n"


def edits_session(lab: Lab) -> str:
    """``-p`` denies an edit; ``--allow-edits`` lets it write (inside the working tree); the file it wrote."""

    def job() -> str:
        home = lab.home()
        prompt = "Write a demo file"
        denied = lab.dsh(["--demo", "--scenario", "write-file", "-p", prompt], home=home)
        allowed = lab.dsh(["--demo", "--scenario", "write-file", "--allow-edits", "-p", prompt], home=home)
        wrote = (home / "project" / "dsh-demo.txt").read_text(encoding="utf-8")
        parts = [session_text(denied, status=True), session_text(allowed, status=True),
                 "$ cat dsh-demo.txt\n" + wrote.rstrip("\n")]
        return fence("\n".join(parts), "console")

    return lab.once("edits", job).result()


# --- the sandbox (docs/safety.md) ---------------------------------------------------------------------------

SANDBOX_CONFIG = 'sandbox = "bwrap"\n'
SANDBOX_AFTER = "cat made.txt; ls .git/hooks/pre-commit /etc/planted"
SANDBOX_COMMAND = "echo hello > made.txt; touch /etc/planted; echo x > .git/hooks/pre-commit"
# The terminal app's approval, answered y: the REPL's own Shell and approval question, driven in a child with
# a front end that answers yes (a pty transcript would carry prompt_toolkit's redraws).
_SANDBOX_TURN = """import sys, anyio, os
from dsh.repl.config import load_config
from dsh.repl.frontend import PlainFrontEnd, StreamSink
from dsh.repl.approvals import question_for
from dsh.repl.shell import Shell
class Yes(PlainFrontEnd):
    can_approve = True
    async def ask_approval(self, request):
        self.out.write(question_for(request, rows=24, cols=80, color=False).question + "y\\n")
        return "yes"
async def main():
    sink = StreamSink(sys.stdout)
    shell = Shell(load_config({"base_url": sys.argv[1]}, os.environ), Yes(sink), color=False, env=os.environ)
    await shell.start()
    try:
        sys.stdout.write("> run it\\n")
        await shell.handle_line("run it")
    finally:
        await shell.aclose()
        sink.flush()
anyio.run(main)
"""


def sandbox_run(lab: Lab) -> str:
    """A turn whose model runs a command in a git repository: the approval, and what the sandbox refused."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    def job() -> str:
        home = lab.home(SANDBOX_CONFIG)
        subprocess.run(["git", "init", "-q", str(home / "project")], check=True)
        with FaultServer() as server:
            server.push(Behaviour("tool_call", id="call_1", name="run_shell",
                                  arguments=json.dumps({"command": SANDBOX_COMMAND}),
                                  reasoning="The user asked for this command; run it."),
                        Behaviour("text", text="Done: made.txt is written; the rest was refused."))
            out = subprocess.run([PYTHON, "-c", _SANDBOX_TURN, server.url], cwd=home / "project",
                                 env=lab.env(home, DEEPSEEK_API_KEY="any"), capture_output=True, text=True,
                                 timeout=TIMEOUT)
        text = lab.normalise(out.stdout + out.stderr, home)
        after = subprocess.run(["sh", "-c", SANDBOX_AFTER], cwd=home / "project", capture_output=True, text=True,
                               env=lab.env(home), timeout=TIMEOUT)
        parts = ["$ cat ~/.config/dsh/config.toml", SANDBOX_CONFIG.rstrip("\n"), "$ dsh", text.rstrip("\n"),
                 f"$ {SANDBOX_AFTER}", lab.normalise(after.stdout + after.stderr, home).rstrip("\n")]
        return fence("\n".join(parts), "console")

    return lab.once("sandbox-run", job).result()


def sandbox_refusal(lab: Lab) -> str:
    """``sandbox = "bwrap"`` where there is no bwrap: dsh does not start, and says how to get it."""
    run = lab.once("sandbox-refusal", lambda: lab.dsh(
        ["-p", "hello"], config=SANDBOX_CONFIG, env={"DEEPSEEK_API_KEY": "any", "PATH": "/nowhere"},
        shown_env="PATH=/nowhere")).result()
    return fence("\n".join(["$ cat ~/.config/dsh/config.toml", SANDBOX_CONFIG.rstrip("\n"),
                            session_text(run, status=True)]), "console")


# --- permission modes -------------------------------------------------------------------------------------

_MODES_CALLS = [("read_file", {"path": "notes.txt"}),
                ("write_file", {"path": "notes.txt", "content": "remember the oat milk\n"}),
                ("run_shell", {"command": "rm -rf build"})]


def _scripted_calls(calls: list[tuple[str, dict[str, object]]], reasoning: str) -> object:
    from dsh.llm.loopback.fault_server import Behaviour

    return Behaviour("parallel_tool_calls", reasoning=reasoning, calls=[
        {"id": f"call_{index}", "name": name, "arguments": arguments} for index, (name, arguments) in enumerate(calls)])


def modes_plan(lab: Lab) -> str:
    """``--permission-mode plan`` in a -p run: the read runs, the write and the command are refused."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    def job() -> str:
        home = lab.home()
        with FaultServer() as server:
            server.push(_scripted_calls(_MODES_CALLS, "Read the notes, then change them and clean up."),
                        Behaviour("text", text="Plan: change the milk line, then remove build/."))
            run = lab.dsh(["-p", "tidy up the notes", "--permission-mode", "plan"], home=home,
                          env={"DEEPSEEK_API_KEY": "any", "DEEPSEEK_BASE_URL": server.url})
        after = (home / "project" / "notes.txt").read_text(encoding="utf-8").rstrip("\n")
        return fence("\n".join([session_text(run), "$ cat notes.txt", after]), "console")

    return lab.once("modes-plan", job).result()


def modes_auto_refusal(lab: Lab) -> str:
    """``--permission-mode auto`` without a sandbox: dsh does not start, and says how to get one."""
    run = lab.once("modes-auto-refusal", lambda: lab.dsh(
        ["-p", "hello", "--permission-mode", "auto"], env={"DEEPSEEK_API_KEY": "any"})).result()
    return session_text(run, status=True).join(("```console\n", "\n```\n"))


_MODE_ROWS = ("read_file notes.txt", "write_file new.txt (inside the tree)", "write_file ../outside.txt",
              "run_shell echo ran > shell.txt", "MCP tool add (not read-only)", "MCP tool echo (read-only)",
              "subagent (a child dsh)")
# The subagent of the modes table: the scripted child dsh (repl/demo), which answers without touching anything.
_MODES_SUBAGENT = ('[subagents.helper]\nprovider = "dsh"\n'
                   f'command = {json.dumps([PYTHON, "-m", "dsh.repl.demo.scripted_dsh_child"])}\n'
                   f"env = {{ DSH_SCRIPTED_CHILD = {json.dumps(json.dumps({'text': 'delegated'}))} }}\n")


def _mode_cell(result: str) -> str:
    from dsh.agent_loop.permissions import PLAN_REFUSAL

    if result == PLAN_REFUSAL:
        return "refused: plan mode is on"
    if result.startswith("Error: ") and "no one" in result:
        return "asks (denied under -p: no one to approve)"
    return f"runs: {_code(result.split(chr(10))[-1] if result.endswith('(sandboxed)') else result.rstrip())}"


def modes_table(lab: Lab) -> str:
    """The same scripted turn under each mode in a real ``dsh -p`` (tests/repl/test_permission_modes.py asserts
    the same results): what ran, what asked and what was refused."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    server_table = _mcp_table("fx", "ok")
    modes = ("default", "plan", "accept-edits", "auto")

    def one(mode: str) -> list[str]:
        home = lab.home(('sandbox = "bwrap"\n' if mode == "auto" else "") + server_table + _MODES_SUBAGENT)
        subprocess.run(["git", "init", "-q", str(home / "project")], check=True, timeout=TIMEOUT)
        calls = [("read_file", {"path": "notes.txt"}), ("write_file", {"path": "new.txt", "content": "inside\n"}),
                 ("write_file", {"path": "../outside.txt", "content": "outside\n"}),
                 ("run_shell", {"command": "echo ran > shell.txt"}), ("mcp__fx__add", {"a": 2, "b": 3}),
                 ("mcp__fx__echo", {"text": "hi"}), ("subagent", {"description": "look", "prompt": "look around"})]
        with FaultServer() as server:
            server.push(_scripted_calls(calls, "All seven."), Behaviour("text", text="done"))
            run = lab.dsh(["-p", "go", "--permission-mode", mode], home=home,
                          env={"DEEPSEEK_API_KEY": "any", "DEEPSEEK_BASE_URL": server.url})
            if run.returncode != 0:
                raise RuntimeError(f"{mode}: {run.output}")
            answers = {m["tool_call_id"]: m["content"] for m in server.requests[1].json["messages"]
                       if m["role"] == "tool"}
        return [_mode_cell(answers[f"call_{index}"]) for index in range(len(calls))]

    columns = {mode: lab.once(f"modes-table-{mode}", lambda mode=mode: one(mode)).result() for mode in modes}
    lines = ["| call | " + " | ".join(f"`{mode}`" for mode in modes) + " |", "|---" * (len(modes) + 1) + "|"]
    for index, row in enumerate(_MODE_ROWS):
        lines.append(f"| {row} | " + " | ".join(columns[mode][index] for mode in modes) + " |")
    return "\n".join(lines) + "\n"
# --- undo (docs/safety.md) -------------------------------------------------------------------------------

UNDO_SHELL = "echo 'and buy bread' >> notes.txt"


def undo_run(lab: Lab) -> str:
    """One turn edits two files and creates one; the user changes one of them; ``/undo`` after a resume."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    def call(name: str, **arguments: str) -> Behaviour:
        return Behaviour("tool_call", name=name, arguments=json.dumps(arguments), reasoning="")

    def job() -> str:
        with FaultServer() as server:
            home = lab.home(f'base_url = "{server.url}"\n')
            work = home / "project"
            (work / "todo.txt").write_text("write the report\n", encoding="utf-8")
            server.push(call("read_file", path="notes.txt"),
                        call("edit_file", path="notes.txt", old_string="milk", new_string="oat milk"),
                        call("read_file", path="todo.txt"), call("write_file", path="todo.txt", content="done\n"),
                        call("write_file", path="src/plan.md", content="# Plan\n"),
                        Behaviour("text", text="Edited notes.txt and todo.txt; added src/plan.md."))
            key = {"DEEPSEEK_API_KEY": "any"}
            edit = lab.dsh(["--allow-edits", "-p", "tidy up"], home=home, env=key)
            subprocess.run(["sh", "-c", UNDO_SHELL], cwd=work, env=lab.env(home), timeout=TIMEOUT, check=True)
            undo = lab.dsh(["--resume", "last"], stdin="/undo\n/undo\n", home=home, env=key)
        after = subprocess.run(["sh", "-c", "cat notes.txt todo.txt; ls src"], cwd=work, capture_output=True,
                               text=True, env=lab.env(home), timeout=TIMEOUT)
        parts = [session_text(edit), f"$ {UNDO_SHELL}", session_text(undo, "/undo\n/undo\n"),
                 "$ cat notes.txt todo.txt; ls src", after.stdout.rstrip("\n")]
        return fence("\n".join(parts), "console")

    return lab.once("undo-run", job).result()


# --- dsh doctor ------------------------------------------------------------------------------------------

DOCTOR_KEY = "sk-0123456789abcdef0123456789abcdef"  # DeepSeek's key shape; the fault server takes any key
# The DNS transcript must not send a query to any resolver, so the resolver's answer is injected: the same
# `dsh doctor` code runs, with getaddrinfo answering as it does for a name that does not exist.
_NO_SUCH_NAME = """import socket, sys
from dsh.repl import cli, doctor
async def resolver(host, port):
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
doctor._getaddrinfo = resolver
cli.main(["doctor", *sys.argv[1:]])
"""


def _doctor_normalise(text: str) -> str:
    text = re.sub(r"\b\d+\.\d ms\b", "<n> ms", text)
    text = re.sub(r"(Python|httpx|prompt_toolkit) \d+(\.\d+)*[\w+-]*", r"\1 <version>", text)
    return re.sub(r"/\S*/fault-ca-\w+\.pem", "<ca.pem>", text)


def _doctor_session(lab: Lab, server_args: list[str], url_of: Callable[[str], str], shown: str,
                    *, env: dict[str, str] | None = None, resolver: bool = False) -> str:
    """A fault server started by hand, then ``dsh doctor`` against it (or, with ``resolver``, against no server)."""
    home = lab.home()
    with _fault_server(lab, home, server_args) as server:
        head = "".join(server.readline() for _ in range(4 if "--tls" in server_args else 3))
        extra = {"DEEPSEEK_API_KEY": DOCTOR_KEY, **(env or {})}
        ca = re.search(r"CA: (\S+)\)", head)
        extra = {key: value.replace("<ca>", ca.group(1) if ca else "") for key, value in extra.items()}
        url = url_of(head)
        argv = ["doctor", "--base-url", url]
        command = [PYTHON, "-c", _NO_SUCH_NAME, *argv[1:]] if resolver else [PYTHON, "-m", "dsh.repl", *argv]
        run = subprocess.run(command, cwd=home / "project", env=lab.env(home, **extra), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    output = _doctor_normalise(lab.normalise(run.stdout.decode("utf-8", "replace"), home))
    shown_command = lab.normalise(f"{shown} dsh doctor --base-url {url}", home)
    text = f"$ {shown_command}\n{output.rstrip()}\n$ echo $?\n{run.returncode}"
    return fence(_doctor_normalise(text), "console")


def _listening(head: str, kind: str) -> str:
    pattern = r"tls listener: (\S+)" if kind == "tls" else r"listening on (\S+)"
    found = re.search(pattern, head)
    if found is None:
        raise RuntimeError(f"fault server did not start: {head!r}")
    return found.group(1)


def doctor_healthy(lab: Lab) -> str:
    return _doctor_session(lab, ["--tls"], lambda head: _listening(head, "tls"),
                           f"DEEPSEEK_API_KEY={DOCTOR_KEY} SSL_CERT_FILE=<ca.pem>", env={"SSL_CERT_FILE": "<ca>"})


def doctor_dns(lab: Lab) -> str:
    return _doctor_session(lab, [], lambda head: "https://api.deepseek.invalid", f"DEEPSEEK_API_KEY={DOCTOR_KEY}",
                           resolver=True)


def doctor_tls(lab: Lab) -> str:
    return _doctor_session(lab, ["--tls"], lambda head: _listening(head, "tls"), f"DEEPSEEK_API_KEY={DOCTOR_KEY}")


def doctor_balance(lab: Lab) -> str:
    return _doctor_session(lab, ["--account", "balance_unavailable"], lambda head: _listening(head, "plain"),
                           f"DEEPSEEK_API_KEY={DOCTOR_KEY}")


# --- other endpoints: dsh through a real LiteLLM proxy (slow: `make test` installs it in .venv/litellm) ----

_GATEWAY_CONFIG = "max_retries = {retries}\nstream_idle_timeout = 2\nfirst_token_timeout = 2\n"
_GATEWAY_PRICES = "[models.deepseek-flash]\ninput_cache_hit = 1.0\ninput_cache_miss = 10.0\noutput = 100.0\n"
_CACHED_USAGE = {"prompt_tokens": 1000, "prompt_cache_hit_tokens": 800, "prompt_cache_miss_tokens": 200,
                 "completion_tokens": 9, "total_tokens": 1009}


@dataclass(frozen=True)
class GatewayCase:
    """One row of docs/endpoints.md's LiteLLM table: the fault server (LiteLLM's upstream) is scripted, dsh asks.

    ``sends`` is what LiteLLM answered dsh, in words, as recorded by hand (status, type, code, headers)."""

    row: str
    script: tuple[object, ...]
    sends: str
    config: str = ""
    retries: int = 0
    key: str | None = None  # None: the proxy's master key
    usage: bool = False  # show `--output-format json`'s usage and cost instead of the lines


def _relayed(status: int, kind: str) -> str:
    """LiteLLM's answer when its upstream answered an HTTP error: the upstream's body inside its own message."""
    body = f'"message": "litellm.…Error: DeepseekException - <upstream body> …", "type": "{kind}", "code": "{status}"'
    return f"{status}, `{{\"error\": {{{body}}}}}`"


def gateway_cases() -> list[GatewayCase]:
    from dsh.llm.loopback.fault_server import Behaviour

    read_notes = Behaviour("tool_call", name="read_file", arguments='{"path": "notes.txt"}')
    event = '`data: {"error": {"message": "litellm.APIConnectionError: …", "type": null, "code": "500", …}}`'
    return [
        GatewayCase("an answer", ("text",), "200, the stream re-framed, `x-litellm-call-id` and other `x-litellm-*`"),
        GatewayCase("reasoning", ("reasoning",), "200, `reasoning_content` deltas passed through"),
        GatewayCase("a tool round trip", (read_notes, "text"),
                    "200, `tool_calls` passed through; the result goes up in the next request"),
        GatewayCase("usage with 800 cached tokens", (Behaviour("text", usage=_CACHED_USAGE),),
                    "usage rewritten to OpenAI's shape: `prompt_tokens_details.cached_tokens: 800`",
                    config=_GATEWAY_PRICES, usage=True),
        GatewayCase("upstream 401", ("http_401",), _relayed(401, "authentication_error")),
        GatewayCase("upstream 429, `Retry-After: 2`", ("http_429",),
                    _relayed(429, "throttling_error") + "; `llm_provider-retry-after: 2`, no `retry-after`"),
        GatewayCase("the same, `max_retries = 1`", ("http_429", "text"), "429 as above, then 200", retries=1),
        GatewayCase("upstream 500", ("http_500",), _relayed(500, "internal_server_error")),
        GatewayCase("upstream 402", ("http_402",), _relayed(402, "invalid_request_error")),
        GatewayCase("upstream 400, context too long", ("http_400_context",), _relayed(400, "invalid_request_error")),
        GatewayCase("upstream resets mid-stream", ("reset_mid_stream",),
                    f"200, the text so far, then the event {event} and a close without `[DONE]`"),
        GatewayCase("upstream sends a payload that is not JSON", ("malformed_json",),
                    "200, the payload dropped, `finish_reason: stop` and `[DONE]` added: the fault is hidden"),
        GatewayCase("upstream body ends mid-line", ("partial_eof",),
                    "200, `finish_reason: stop` and `[DONE]` added: the cut is hidden"),
        GatewayCase("upstream holds its headers", ("stall_before_headers",),
                    "nothing: no headers until the upstream's (its `request_timeout`, 600 s here)"),
        GatewayCase("upstream stalls mid-stream", ("stall_mid_stream",), "200, the text so far, then silence"),
        GatewayCase("your key is not LiteLLM's (no database)", (),
                    "400 `No connected db.` (type `no_db_connection`), no `x-litellm-*` header",
                    key="sk-notTheMasterKey"),
    ]


def _gateway_lines(lab: Lab, case: GatewayCase, proxy_url: str, key: str) -> list[str]:
    config = _GATEWAY_CONFIG.format(retries=case.retries) + case.config
    env = {"DEEPSEEK_API_KEY": case.key or key, "DEEPSEEK_BASE_URL": proxy_url}
    if case.usage:
        run = lab.dsh(["-p", "hi", "--output-format", "json"], config=config, env=env, stderr=False)
        answer = json.loads(run.output)
        return [f"usage {json.dumps(answer['usage'])}", f"cost_usd {answer['cost_usd']}"]
    run = lab.dsh([], stdin="read my notes\n", config=config, env=env)
    return [_HEADER.sub("", line) for line in run.output.split("\n") if line]


def litellm_table(lab: Lab, proxy_url: str, upstream: object, key: str) -> str:
    """The table, from runs through a running proxy whose upstream is the fault server ``upstream``."""
    rows = ["| case | what LiteLLM sent dsh | what dsh printed (`max_retries = 0`, 2 s deadlines) |", "|---|---|---|"]
    for case in gateway_cases():  # one after another: the upstream's script is one queue
        upstream.clear_script()  # type: ignore[attr-defined]
        upstream.push(*case.script)  # type: ignore[attr-defined]
        rows.append(f"| {case.row} | {case.sends} | {cell(_gateway_lines(lab, case, proxy_url, key))} |")
    return "\n".join(rows) + "\n"


def table_litellm(lab: Lab) -> str:
    sys.path.insert(0, str(REPO))
    from dsh.llm.loopback.fault_server import FaultServer
    from tests.llm.litellm_proxy import LITELLM, MASTER_KEY, LiteLLMProxy

    if not LITELLM.exists():
        raise RuntimeError("no LiteLLM proxy: make test installs it in .venv/litellm")
    folder = lab.root / "litellm"
    folder.mkdir()
    with FaultServer() as upstream:
        proxy = LiteLLMProxy(upstream.url, folder).start()
        try:
            return litellm_table(lab, proxy.url, upstream, MASTER_KEY)
        finally:
            proxy.stop()


# --- dsh in an editor: the real acpx client driving `dsh acp` (slow: `make test` installs acpx in .venv/npm) ----

ACPX_CONFIG = "max_retries = 0\n"
ACPX_KEY = "sk-docs0000000000000000000000"
ACPX_SHELL_PROMPT = "say hi in the shell"


def _acpx_run(lab: Lab, script: list[object], prompt: str, *, flags: tuple[str, ...] = (),
              base_url: str | None = None, interrupt_after: str | None = None) -> str:
    """One ``acpx ... --agent 'dsh acp' exec PROMPT`` against a fault server playing ``script``, as a terminal
    shows it (the command, the client's output verbatim, ``$?``); ``interrupt_after``: Ctrl-C there (``^C``)."""
    sys.path.insert(0, str(REPO))
    from dsh.llm.loopback.fault_server import FaultServer
    from tests.acp_client_run import ACPX, INSTALL, client_env, dsh_acp, run_client

    if not ACPX.exists():
        raise RuntimeError(f"no acpx: {INSTALL}")
    home = lab.home(ACPX_CONFIG)
    with FaultServer(script=script) as server:  # type: ignore[arg-type]
        env = client_env(home, DEEPSEEK_API_KEY=ACPX_KEY, DEEPSEEK_BASE_URL=base_url or server.url)
        run = run_client(dsh_acp(), prompt, cwd=home / "project", env=env, flags=flags,
                         interrupt_after=interrupt_after)
    output = run.output
    if interrupt_after is not None:
        at = output.index(interrupt_after) + len(interrupt_after)
        output = output[:at] + "^C" + output[at:]
    shown = " ".join(["acpx", *map(shlex.quote, flags), "--agent", "'dsh acp'", "exec", shlex.quote(prompt)])
    text = "\n".join([f"$ {shown}", output.rstrip("\n"), "$ echo $?", str(run.returncode)])
    return lab.normalise(text, home)


def _acpx_session(lines: Callable[[Lab], str]) -> Callable[[Lab], str]:
    def generate(lab: Lab) -> str:
        return fence(lines(lab), "console")

    return generate


def _acpx_turn(lab: Lab) -> str:
    from dsh.llm.loopback.fault_server import Behaviour

    call = Behaviour("tool_call", name="run_shell", arguments=json.dumps({"command": "echo hi"}))
    return _acpx_run(lab, [call, "text"], ACPX_SHELL_PROMPT, flags=("--approve-all",))


def _acpx_refused(lab: Lab) -> str:
    from dsh.llm.loopback.fault_server import closed_port

    with closed_port() as port:
        return _acpx_run(lab, [], "hello", base_url=f"http://127.0.0.1:{port}")


def _acpx_401(lab: Lab) -> str:
    from dsh.llm.loopback.fault_server import Behaviour

    echoed = Behaviour("http_401", message=f"Authentication Fails, Your api key: {ACPX_KEY} is invalid")
    return _acpx_run(lab, [echoed], "hello")


def _acpx_cancel(lab: Lab) -> str:
    return _acpx_run(lab, ["stall_mid_stream"], "hello", interrupt_after="Partial")


def _acpx_denied(lab: Lab) -> str:
    from dsh.llm.loopback.fault_server import Behaviour

    call = Behaviour("tool_call", name="run_shell", arguments=json.dumps({"command": "echo hi"}))
    return _acpx_run(lab, [call, "text"], ACPX_SHELL_PROMPT, flags=("--deny-all",))


# --- hooks, skills and commands (docs/hooks.md, docs/extending.md) -------------------------------------------

HOOK_SCRIPT = """#!/bin/sh
case "$(cat)" in *'rm -rf'*) echo "no rm -rf here, use trash" >&2; exit 2 ;; esac
"""
HOOK_CONFIG = '[[hooks.PreToolUse]]\nmatcher = "run_shell"\ncommand = "~/bin/check-cmd"\ntimeout = 10\n'
HOOKS_INPUT = "/hooks\nclean the build folder\n"


def hooks_session(lab: Lab) -> str:
    """A PreToolUse hook blocks the model's ``rm -rf``: /hooks lists it, the model is told its words."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    def job() -> str:
        home = lab.home(HOOK_CONFIG)
        (home / "bin").mkdir()
        (home / "bin" / "check-cmd").write_text(HOOK_SCRIPT, encoding="utf-8")
        (home / "bin" / "check-cmd").chmod(0o755)
        with FaultServer() as server:
            server.push(Behaviour("tool_call", id="call_1", name="run_shell",
                                  arguments=json.dumps({"command": "rm -rf build"}),
                                  reasoning="Remove the build folder."),
                        Behaviour("text", text="The hook refused rm -rf; I will move build/ to the trash instead."))
            run = lab.dsh([], stdin=HOOKS_INPUT, home=home,
                          env={"DEEPSEEK_API_KEY": "any", "DEEPSEEK_BASE_URL": server.url})
        return fence("\n".join(["$ cat ~/bin/check-cmd", HOOK_SCRIPT.rstrip("\n"), "$ cat ~/.config/dsh/config.toml",
                                 HOOK_CONFIG.rstrip("\n"), session_text(run, HOOKS_INPUT)]))

    return lab.once("hooks", job).result()


SKILL_FILE = """---
name: changelog
description: Write a changelog entry for the staged changes. Use when asked for release notes.
---
Read `git diff --staged`, then write one entry under "Unreleased" in CHANGELOG.md.
"""
COMMAND_FILE = """---
description: Review one file for bugs
argument-hint: "[path]"
---
Review $1 for bugs and say which lines are wrong.
"""
EXTENDING_INPUT = "/skill\n/review src/app.py\n"


def extending_session(lab: Lab) -> str:
    """A repository laid out for Claude Code: its skill listed, its command sent with the argument in place."""
    from dsh.llm.loopback.fault_server import Behaviour, FaultServer

    def job() -> str:
        home = lab.home()
        project = home / "project"
        (project / ".claude" / "skills" / "changelog").mkdir(parents=True)
        (project / ".claude" / "skills" / "changelog" / "SKILL.md").write_text(SKILL_FILE, encoding="utf-8")
        (project / ".claude" / "commands").mkdir()
        (project / ".claude" / "commands" / "review.md").write_text(COMMAND_FILE, encoding="utf-8")
        with FaultServer() as server:
            server.push(Behaviour("text", text="src/app.py has no bugs I can see."))
            run = lab.dsh([], stdin=EXTENDING_INPUT, home=home,
                          env={"DEEPSEEK_API_KEY": "any", "DEEPSEEK_BASE_URL": server.url})
            sent = server.requests[-1].json["messages"][-1]["content"] if server.requests else "(nothing sent)"
        return fence("\n".join(["$ cat .claude/commands/review.md", COMMAND_FILE.rstrip("\n"),
                                 session_text(run, EXTENDING_INPUT), "# what the model was sent for /review:",
                                 sent.rstrip("\n")]))

    return lab.once("extending", job).result()


# --- the registry ---------------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[Lab], str]] = {
    "front-failure": scenario_print("mid-stream-drop"),
    "session": readme_session,
    "compact": compact_session,
    "help": readme_help,
    "print-answer": print_answer_only,
    "print-json": print_json,
    "print-stream-json": print_stream_json,
    "slash-help": readme_slash_help,
    "turn-ends": table_turn_ends,
    "scenarios": table_scenarios,
    "stall": stall_session,
    "http-429": scenario_session("http-429"),
    "retry-then-success": scenario_session("retry-then-success"),
    "resume": resume_session,
    "sessions-cli": sessions_cli,
    "export-md": export_md,
    "config-errors": config_errors,
    "prompt-guard": prompt_guard,
    "edits": edits_session,
    "dsh-child-error": scenario_session("dsh-child-error", DELEGATE_PROMPT),
    "dsh-background": scenario_session("dsh-background", "Run the summary in the background"),
    "acp-remote-limit": scenario_session("acp-remote-limit", DELEGATE_PROMPT),
    "acp-permission": scenario_session("acp-permission", DELEGATE_PROMPT),
    "acp-agent-error": scenario_session("acp-agent-error", DELEGATE_PROMPT),
    "acp-reject-mode": scenario_session("acp-reject-mode", DELEGATE_PROMPT),
    "claude-max-turns": scenario_session("claude-max-turns", DELEGATE_PROMPT),
    "codex-approval": scenario_session("codex-approval", DELEGATE_PROMPT),
    "fault-server-log": fault_server_log,
    "doctor-healthy": doctor_healthy,
    "doctor-dns": doctor_dns,
    "doctor-tls": doctor_tls,
    "doctor-balance": doctor_balance,
    "fault-server-dsh": fault_server_dsh,
    "record-replay": lambda lab: lab.once("record-replay", lambda: _record_replay_session(lab)).result(),
    "record-replay-refused": _record_replay_refused,
    "behaviours": table_behaviours,
    "report": lambda lab: lab.once("report", lambda: _report_session(lab)).result(),
    "session-log": session_log,
    "error-codes": table_error_codes,
    "retried": lambda lab: _retry_table().markdown(),
    "retry-summary": lambda lab: _retry_table().summary(),
    "fault-matrix": table_fault_matrix,
    "reliability-counts": table_reliability_counts,
    "litellm": table_litellm,
    "mcp-call": mcp_call,
    "mentions-print": mentions_print,
    "search-tools": search_tools,
    "mcp-failure": mcp_failure,
    "mcp-config-errors": mcp_config_errors,
    "mcp-allow": mcp_allow,
    "mcp-list": mcp_list,
    "sandbox-run": sandbox_run,
    "hooks": hooks_session,
    "extending": extending_session,
    "sandbox-refusal": sandbox_refusal,
    "modes-plan": modes_plan,
    "modes-auto-refusal": modes_auto_refusal,
    "modes": modes_table,
    "undo-run": undo_run,
    "acpx-turn": _acpx_session(_acpx_turn),
    "acpx-denied": _acpx_session(_acpx_denied),
    "acpx-refused": _acpx_session(_acpx_refused),
    "acpx-401": _acpx_session(_acpx_401),
    "acpx-cancel": _acpx_session(_acpx_cancel),
}
SLOW = {"fault-matrix"}  # a minute, not seconds: only with --slow (test_fault_matrix checks the same rows)
SLOW |= {"litellm"}  # needs .venv/litellm: only with --slow (tests/llm/test_litellm_gateway.py checks the table)
# need acpx from .venv/npm: only with --slow (tests/e2e/test_acp_client_acpx.py asserts the same lines)
SLOW |= {"acpx-turn", "acpx-denied", "acpx-refused", "acpx-401", "acpx-cancel"}
MEASURED = {"reliability-counts"}  # vary from run to run: only from --reliability-report, never checked


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def regions(path: Path) -> list[tuple[str, str]]:
    return [(match.group(3), match.group(4)) for match in REGION.finditer(path.read_text(encoding="utf-8"))]


def generate(names: set[str], reliability_report: Path | None = None) -> dict[str, str | BaseException]:
    """Every named region's text, generated concurrently; a failed generator's exception instead."""
    # Imported here, in one thread: generators importing the package for the first time concurrently
    # have seen a half-initialised module.
    import dsh.agent_loop.retry
    import dsh.repl.turn_end  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="dsh-docs-") as folder:
        lab = Lab(Path(os.path.realpath(folder)))
        lab.reliability_report = reliability_report
        try:
            with ThreadPoolExecutor(len(names) or 1) as outer:  # generators mostly wait on lab.pool
                futures = {name: outer.submit(GENERATORS[name], lab) for name in sorted(names)}
                results: dict[str, str | BaseException] = {}
                for name, future in futures.items():
                    try:
                        results[name] = future.result()
                    except Exception as exc:
                        results[name] = exc
                return results
        finally:
            lab.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare with the checked-in text; exit 1 on a diff")
    mode.add_argument("--write", action="store_true", help="rewrite the marked regions in place")
    parser.add_argument("--only", default="", help="comma-separated region names")
    parser.add_argument("--slow", action="store_true", help=f"also the slow regions ({', '.join(sorted(SLOW))})")
    parser.add_argument("--reliability-report", type=Path, metavar="PATH",
                        help=f"also {', '.join(sorted(MEASURED))}, from this {REPORT_ENV} file (with --write)")
    args = parser.parse_args(argv)
    report = args.reliability_report.resolve() if args.reliability_report else None
    os.chdir(REPO)  # the fault matrix runs dsh from the repository

    found = {path: regions(path) for path in documents()}
    used = {name for items in found.values() for name, _ in items}
    unknown = sorted(used - set(GENERATORS))
    if unknown:
        print(f"unknown region names: {', '.join(unknown)}", file=sys.stderr)
        return 2
    wanted = set(args.only.split(",")) - {""} if args.only else used
    if not args.slow:
        wanted -= SLOW
    if args.reliability_report is None or args.check:
        wanted -= MEASURED
    started = time.monotonic()
    results = generate(wanted & used, report)
    failures = {name: value for name, value in results.items() if isinstance(value, BaseException)}
    for name, exc in failures.items():
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)

    diffs: list[str] = []
    for path in found:
        source = path.read_text(encoding="utf-8")

        def replace(match: re.Match[str]) -> str:
            value = results.get(match.group(3))
            if not isinstance(value, str):
                return match.group(0)
            return match.group(1) + value + match.group(5)

        updated = REGION.sub(replace, source)
        if updated == source:
            continue
        relative = str(path.relative_to(REPO))
        if args.write:
            path.write_text(updated, encoding="utf-8")
            print(f"wrote {relative}", file=sys.stderr)
        else:
            diffs.append("".join(difflib.unified_diff(
                source.splitlines(keepends=True), updated.splitlines(keepends=True),
                f"{relative} (checked in)", f"{relative} (what dsh prints now)")))
    skipped = sorted(used - wanted)
    print(f"{len(results)} region(s) generated in {time.monotonic() - started:.1f}s"
          + (f"; skipped: {', '.join(skipped)}" if skipped else ""), file=sys.stderr)
    if diffs:
        sys.stdout.write("".join(diffs))
        print("docs are out of date: run python docs/transcripts.py --write", file=sys.stderr)
    return 1 if failures or diffs else 0


if __name__ == "__main__":
    sys.exit(main())
