"""``dsh``: flags, config, the three modes, and startup failures.

Modes: interactive (stdin and stdout are terminals), piped (each stdin line is a turn; EOF waits for
the running turn, then exits 0), and ``-p PROMPT`` (one turn; the exit status says how it ended; the
answer alone on stdout, or the JSON of ``--output-format``, and everything else on stderr; ``-p -`` reads
the prompt from stdin; docs/scripting.md).
Nothing here prints a traceback unless ``DSH_DEBUG=1``.

``dsh --version`` answers before anything heavy is imported (no prompt_toolkit, no httpx).
"""

from __future__ import annotations

import contextlib
import os
import sys

from dsh.repl import __version__

TYPE_CHECKING = False  # typing costs ~15 ms to import; --version must not pay for it
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any, NoReturn

__all__ = ["main"]

EXIT_USAGE = 2
MAX_STDIN_PROMPT = 1 << 20  # bytes of a prompt read from stdin (`-p -`)
OUTPUT_FORMATS = ("text", "json", "stream-json")
_FROM_STDIN = "\x00stdin"  # what a bare `-p` parses to: read the prompt from stdin when it is piped


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):
        sys.stdout.write(f"dsh {__version__}\n")
        sys.stdout.flush()
        raise SystemExit(0)
    subcommand = _SUBCOMMANDS.get(args[0]) if args else None
    if subcommand is not None:
        finish(subcommand(args[1:]))
    finish(_guarded(args))


def finish(status: int) -> NoReturn:
    """Exit with ``status``, even if a worker thread is stuck in a system call.

    A file read that a cancelled turn abandoned (``abandon_on_cancel``) may still sit in its worker
    thread, and the interpreter would wait for it at exit forever. Idle workers end on their own within
    a moment; a thread still there after that is stuck, so the exit handlers run and the process leaves.
    """
    import threading
    import time

    deadline = time.monotonic() + 1.0
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    if not any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(status)
    import atexit

    atexit._run_exitfuncs()  # what a normal exit runs after joining threads (the log, peak RSS, ...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _debug() -> bool:
    return os.environ.get("DSH_DEBUG", "") not in ("", "0")


def _guarded(args: list[str], run: Any = None) -> int:
    """Run, and turn anything unexpected into one line on stderr (a traceback only with DSH_DEBUG=1)."""
    saved = _save_terminal()
    try:
        return (run or _run)(args)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except BaseException as exc:
        if _debug():
            raise
        from dsh.llm import error_chain, redact_text, unwrap_group

        secrets = tuple(s for s in (os.environ.get("DEEPSEEK_API_KEY", ""),) if s)
        line = redact_text(error_chain(unwrap_group(exc)), secrets)
        _stderr(f"dsh: internal error: {line} (DSH_DEBUG=1 shows a traceback)")
        return 1
    finally:
        _restore_terminal(saved)


def _serve(args: list[str]) -> int:
    """``dsh serve --stdio``: the child runtime lives in dsh.agent_loop.serve (subagent issue)."""
    try:
        from dsh.agent_loop import serve
    except ImportError:
        _stderr("dsh: failed to start: `dsh serve` is not available in this build")
        return EXIT_USAGE
    return int(serve.main(args) or 0)


def _doctor(args: list[str]) -> int:
    """``dsh doctor``: each step of one request, checked (dsh.repl.doctor, docs/doctor.md)."""
    from dsh.repl import doctor

    env = dict(os.environ)
    _setup_logging(env, tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s))  # not over the report
    return doctor.main(args, env)


def _replay_server(args: list[str]) -> int:
    """``dsh replay-server FILE --port P``: serve a recording to any client (docs/record-replay.md)."""
    from dsh.llm.loopback import replay_server

    return replay_server.main(args, out=_stdout, err=_stderr)


def _replay_speed(text: str) -> float:
    from dsh.llm.loopback.replay_server import parse_speed

    return parse_speed(text)


def _sessions(args: list[str]) -> int:
    """``dsh sessions list [--all] | show ID | rm ID`` (dsh.repl.sessions)."""
    from dsh.repl.sessions import main as sessions_main

    return sessions_main(args)


# ``dsh NAME ...``: words that are not prompts or flags; each takes the rest of the arguments.
_SUBCOMMANDS = {
    "serve": _serve,
    "sessions": _sessions,
    "doctor": _doctor,
    "replay-server": lambda rest: _guarded(rest, _replay_server),
}


# --- terminal safety net -------------------------------------------------------------------------


def _save_terminal() -> Any:
    try:
        import termios

        if os.isatty(0):
            return termios.tcgetattr(0)
    except Exception:
        pass
    return None


def _restore_terminal(saved: Any) -> None:
    """Whatever happened, hand the terminal back the way we found it (echo, icanon ...)."""
    if saved is None:
        return
    try:
        import termios

        termios.tcsetattr(0, termios.TCSADRAIN, saved)
    except Exception:
        pass


def _stdout(line: str) -> None:
    from dsh.repl.render import sanitize

    try:
        sys.stdout.write(sanitize(line) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _stderr(line: str) -> None:
    from dsh.repl.render import sanitize  # the sinks' sanitizer: an error chain is hostile text too

    try:
        sys.stderr.write(sanitize(line) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# --- flags -----------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    import argparse

    from dsh.llm.defaults import DEFAULT_MODEL

    parser = argparse.ArgumentParser(
        prog="dsh",
        description="A terminal harness for LLM agents that never fails silently.",
        epilog="Config: $XDG_CONFIG_HOME/dsh/config.toml. Environment: DEEPSEEK_API_KEY, DEEPSEEK_BASE_URL, "
        "DSH_MODEL, NO_COLOR, DSH_DEBUG. Also: dsh doctor (check each step of a request), "
        "dsh sessions list [--all] | show ID | rm ID, dsh serve --stdio (child runtime), "
        "dsh replay-server FILE --port P (serve a recording).",
    )
    parser.add_argument("-p", "--print", metavar="PROMPT", dest="print_prompt", nargs="?", const=_FROM_STDIN,
                        help="run one turn and exit: the answer on stdout, everything else on stderr; "
                        "PROMPT - (or none, with piped stdin) reads it from stdin. Exit 0 completed, 1 failed, "
                        "3 rejected, 4 output-token limit, 130 aborted by SIGINT, 143 by SIGTERM")
    parser.add_argument("--output-format", dest="output_format", choices=OUTPUT_FORMATS,
                        help="with -p: text (default), json (one object at the end), stream-json (one per event)")
    parser.add_argument("--resume", metavar="ID|last", help="continue a saved session")
    parser.add_argument("--demo", action="store_true", help="no key, no network: an embedded scripted endpoint")
    parser.add_argument("--scenario", metavar="NAME", help="demo scenario to start with (implies --demo)")
    parser.add_argument("--model", help=f"model name (default {DEFAULT_MODEL})")
    parser.add_argument("--base-url", dest="base_url", metavar="URL", help="API base URL")
    parser.add_argument("--proxy", metavar="URL", help="proxy for API requests (default: HTTPS_PROXY & co)")
    parser.add_argument("--config", metavar="PATH", help="config file (default $XDG_CONFIG_HOME/dsh/config.toml)")
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, metavar="N", help="output-token cap per step")
    parser.add_argument("--thinking", choices=("enabled", "disabled"), help="DeepSeek thinking mode")
    parser.add_argument("--reasoning-effort", dest="reasoning_effort", choices=("low", "high", "max"))
    parser.add_argument("--allow-edits", dest="allow_edits", action="store_true", default=None,
                        help="piped and -p runs may write files in the working tree without asking")
    parser.add_argument("--record", metavar="FILE", help="write a masked wire trace of every model exchange")
    parser.add_argument("--replay", metavar="FILE", help="answer from a --record trace instead of the API")
    parser.add_argument("--replay-speed", dest="replay_speed", type=_replay_speed, default=1.0, metavar="N",
                        help="replay the recorded timing N times faster")
    parser.add_argument("--version", action="version", version=f"dsh {__version__}")
    return parser


def _stdin_prompt(explicit: bool) -> str:
    """The ``-p`` prompt read from stdin (bounded); ConfigError when there is none."""
    from dsh.repl.config import ConfigError

    if not explicit and sys.stdin.isatty():
        raise ConfigError("-p needs a prompt: dsh -p PROMPT, or pipe one into dsh -p -")
    data = b""
    try:
        fd = sys.stdin.fileno()
        while len(data) <= MAX_STDIN_PROMPT:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except (OSError, ValueError) as exc:
        raise ConfigError("cannot read the prompt from stdin") from exc
    if len(data) > MAX_STDIN_PROMPT:
        raise ConfigError(f"the prompt on stdin is longer than {MAX_STDIN_PROMPT >> 20} MiB")
    text = data.decode("utf-8", "replace")
    if not text.strip():
        raise ConfigError("the prompt on stdin is empty")
    return text.rstrip("\r\n")


def _mode(args: Any) -> str:
    if args.print_prompt is not None:
        return "print"
    if sys.stdin.isatty() and sys.stdout.isatty():
        return "interactive"
    return "piped"


# --- startup failures --------------------------------------------------------------------------------


def _queued_stdin_lines(grace: float = 0.2, limit: int = 16 << 20) -> int:
    """Lines already waiting on a piped stdin (read without blocking past ``grace`` of silence)."""
    import select
    import stat

    try:
        fd = sys.stdin.fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (OSError, ValueError):
        return 0
    data = b""
    try:
        while len(data) < limit:
            if not regular:
                ready, _, _ = select.select([fd], [], [], grace)
                if not ready:
                    break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return sum(1 for line in data.split(b"\n") if line.strip())


def _startup_failure(exc: BaseException, *, mode: str, secrets: tuple[str, ...]) -> None:
    from dsh.llm import error_chain, redact_text

    chain = redact_text(error_chain(exc), secrets)
    queued = _queued_stdin_lines() if mode == "piped" else 0
    if queued:
        _stderr(f"dsh: main agent failed to start; dropped queued stdin ({queued} line(s)): {chain}")
    else:
        _stderr(f"dsh: failed to start: {chain}")


# --- running -------------------------------------------------------------------------------------------


def _run(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.output_format is not None and args.print_prompt is None:
        parser.error("--output-format works only with -p/--print")
    mode = _mode(args)
    if args.scenario:
        args.demo = True
    env = dict(os.environ)
    env_secrets = tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s)

    from pathlib import Path

    from dsh.repl.config import ConfigError, load_config

    flags = {
        "model": args.model,
        "base_url": args.base_url,
        "proxy": args.proxy,
        "max_tokens": args.max_tokens,
        "thinking": args.thinking,
        "reasoning_effort": args.reasoning_effort,
        "allow_edits": args.allow_edits,
        "record": args.record,
    }
    try:
        if args.print_prompt in (_FROM_STDIN, "-"):
            args.print_prompt = _stdin_prompt(explicit=args.print_prompt == "-")
        config = load_config(
            flags, env, require_key=not (args.demo or args.replay),
            config_path=Path(args.config) if args.config else None,
        )
        if args.replay:
            from dsh.llm.loopback.replay_server import ReplayError, load_trace

            if args.demo:
                raise ConfigError("--replay and --demo each pick the endpoint; give one of them")
            try:
                args.trace = load_trace(args.replay)
            except ReplayError as exc:
                args.trace = exc
            if isinstance(args.trace, ReplayError):
                raise ConfigError(args.trace.message)  # outside the handler: one line, no chain beneath
        if args.demo and config.record:
            raise ConfigError("--record records a real endpoint or a --replay; the demo's scenarios are scripted")
        if config.record:
            _check_record_path(config.record)
        if args.demo:
            from dsh.repl.demo.catalogue import SCENARIOS

            if args.scenario and args.scenario not in SCENARIOS:
                raise ConfigError(f"no demo scenario {args.scenario!r} (known: {', '.join(SCENARIOS)})")
    except ConfigError as exc:
        _startup_failure(exc, mode=mode, secrets=env_secrets)
        return EXIT_USAGE
    for warning in config.warnings:
        _stderr(f"dsh: warning: {warning}")
    _setup_logging(env, config.secrets)

    import asyncio

    from dsh.llm.codes import ErrorCode
    from dsh.repl.shell import StartupError

    try:
        # asyncio, prompt_toolkit's loop, with anyio inside it: anyio loads its backend on first use,
        # which in the interactive mode comes after the first prompt is drawn.
        return asyncio.run(_async_main(args, config, env, mode))
    except StartupError as exc:
        cause = exc.__cause__ or exc
        _startup_failure(cause, mode=mode, secrets=config.secrets + env_secrets)
        return EXIT_USAGE if getattr(cause, "code", None) == ErrorCode.CONFIG else 1


def _check_record_path(path: str) -> None:
    """Fail before the first prompt, not at the first request, when the trace cannot be written.

    Nothing is opened here: a FIFO, a device or a link is refused by its ``lstat`` alone (the writer
    checks again on what it opens; docs/record-replay.md)."""
    from dsh.llm.wire_trace import not_regular
    from dsh.repl.config import ConfigError

    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        problem: str | None = "its folder does not exist"
    elif not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        problem = "permission denied"
    else:
        problem = not_regular(path)
    if problem is not None:
        raise ConfigError(f"record file {path} cannot be written: {problem}")


def _setup_logging(env: dict[str, str], secrets: tuple[str, ...]) -> None:
    """Warnings from the loop go to a host log file (never over the prompt), masked."""
    import logging

    from dsh.llm import RedactingFilter
    from dsh.repl.config import state_dir

    root = logging.getLogger()
    if root.handlers:
        return
    try:
        directory = state_dir(env)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        handler: logging.Handler = logging.StreamHandler(_open_private_log(directory / "dsh.log"))
    except OSError:
        handler = logging.NullHandler()
    handler.addFilter(RedactingFilter(secrets))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if _debug() else logging.INFO)


def _open_private_log(path: Path) -> Any:
    """dsh.log holds child stderr and task text: created 0600, and an older, looser one is tightened."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
    except BaseException:
        os.close(fd)
        raise


def _color(env: dict[str, str], stream: Any) -> bool:
    return stream.isatty() and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


async def _async_main(args: Any, config: Any, env: dict[str, str], mode: str) -> int:
    import contextlib

    from dsh.repl.shell import Shell, StartupError

    # -p: the answer alone on stdout (or the JSON of --output-format), everything else on stderr.
    printing = mode == "print"
    sink = StreamSink(sys.stderr if printing else sys.stdout)
    output = None
    if printing:
        from dsh.repl.print_output import PrintOutput

        output = PrintOutput(args.output_format or "text", StreamSink(sys.stdout))
    try:
        async with contextlib.AsyncExitStack() as stack:
            client = demo = retry = None
            if args.demo:
                try:
                    demo, client, retry = await _start_demo(stack, args.scenario or "text")
                except Exception as exc:
                    raise StartupError(exc)
            elif args.replay:
                try:
                    client = await _start_replay(stack, args.trace, args.replay_speed, config)
                except Exception as exc:
                    raise StartupError(exc)
            shell = Shell(config, sink, color=_color(env, sys.stderr if printing else sys.stdout), env=env,
                          client=client, demo=demo, retry=retry, approvals=mode == "interactive",
                          show_usage=mode == "interactive", answer=output.answer if output is not None else None)
            stack.push_async_callback(shell.aclose)
            # The interactive prompt is drawn first and the agent built behind it (the app sees to it).
            await shell.start(resume=args.resume, defer_agent=mode == "interactive")
            if args.resume is not None and mode != "print":  # -p keeps stdout for the answer
                shell.report_resumed()
            if output is not None:
                return await _run_print(shell, args.print_prompt, output)
            if mode == "piped":
                return await _run_piped(shell)
            from dsh.repl.app import InteractiveApp
            from dsh.repl.config import history_path

            sink.flush()  # what start-up said (a repaired turn), before the app's own writes
            banner = _banner(shell)
            if args.replay:
                banner += f" · replaying {len(args.trace.exchanges)} recorded exchange(s) from {args.replay}"
            return await InteractiveApp(shell, history=history_path(env), banner=banner).run()
        return 1  # pragma: no cover - the exit stack does not swallow
    finally:
        sink.flush()  # nothing written, even while closing down, is left behind
        if output is not None:
            output.flush()


def _banner(shell: Any) -> str:
    session = shell.session_id or "?"
    if shell.demo is not None:
        return (
            f"dsh {__version__} demo · no key, no network: scripted endpoint {shell.endpoint} · "
            f"scenario {shell.demo.scenario.name} · /scenario lists the failure kit · /help"
        )
    return f"dsh {__version__} · {shell.model} · {shell.endpoint} · session {session} · /help · Ctrl-D exits"


async def _start_demo(stack: Any, scenario: str) -> tuple[Any, Any, Any]:
    from dsh.llm.loopback.fault_server import FaultServer, closed_port
    from dsh.repl.demo.catalogue import Demo, DemoClient, demo_retry_policy

    server = await stack.enter_async_context(FaultServer(default="text", tls=True))
    refused_port = stack.enter_context(closed_port())
    client = DemoClient(server.url, f"http://127.0.0.1:{refused_port}")
    client.urls.update(plain_https=server.plain_url_for_https, tls=server.tls_url)
    stack.push_async_callback(client.aclose)
    retry = demo_retry_policy()
    return Demo(server, client, retry, scenario), client, retry


async def _start_replay(stack: Any, trace: Any, speed: float, config: Any) -> Any:
    """The embedded replay server and a client that names the recorded endpoint in its messages."""
    from dsh.llm.deepseek import DeepSeekClient
    from dsh.llm.loopback.replay_server import ReplayServer

    stack.callback(trace.close)  # the recording is read as it is served
    server = await stack.enter_async_context(ReplayServer(trace, speed=speed))
    # The recorded deadlines, so a recorded timeout fires again; one set on this run wins.
    timeouts = {key: getattr(config, key) if key in config.sources else trace.timeouts.get(key, getattr(config, key))
                for key in ("stream_idle_timeout", "first_token_timeout")}
    client = DeepSeekClient(base_url=server.url, api_key=None, proxy=None, trust_env=False, env={},
                            record=config.record, shown_as=(trace.base_url or server.url, trace.proxy), **timeouts)
    stack.push_async_callback(client.aclose)
    return client


class StreamSink:
    """Piped and ``-p`` output: plain writes; a closed pipe silences, not crashes.

    Writes are collected and flushed once per event-loop iteration (a long turn streams 100 000s of
    tiny deltas; one ``write(2)`` each costs a second on a terminal), so a reader still sees every
    line as soon as the loop is free. :meth:`flush` writes out what is collected at once: the
    front end calls it after a turn's end line and on the way out. Outside an event loop every
    write is flushed at once.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.broken = False
        self._pending: list[str] = []
        self._scheduled = False

    def write(self, text: str) -> None:
        if self.broken or not text:
            return
        from dsh.repl.render import terminal_text  # loaded with the shell already

        self._pending.append(terminal_text(text))  # the one sanitizer in front of stdout
        if self._scheduled:
            return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._scheduled = True
        loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Everything written so far, to the stream now."""
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        if self.broken:
            return
        try:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:
                # A character the stream cannot encode is not a closed pipe: write it replaced, go on.
                encoding = getattr(self.stream, "encoding", None) or "utf-8"
                self.stream.write(text.encode(encoding, "replace").decode(encoding))
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self.broken = True
            try:  # keep the interpreter's final flush from complaining about the dead pipe
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass


def _flush(shell: Any) -> None:
    flush = getattr(shell.sink, "flush", None)
    if flush is not None:
        flush()


class _Signals:
    """SIGINT/SIGTERM outside the interactive app: cancel the running turn, else stop reading.

    Remembers the last signal, so that the exit status says which one ended dsh (130 or 143).
    """

    def __init__(self, shell: Any, on_idle: Any) -> None:
        self.shell = shell
        self.on_idle = on_idle
        self.received: int | None = None

    async def watch(self, *, task_status: Any) -> None:
        import signal

        import anyio

        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()  # installed before the first turn starts
            async for signum in signals:
                self.received = signum
                if self.shell.turn_running:
                    self.shell.cancel_turn()
                self.on_idle()

    def exit_status(self, default: int) -> int:
        """``128 + signal`` once a signal stopped the work, else ``default``."""
        return 128 + self.received if self.received is not None else default


async def _run_print(shell: Any, prompt: str, output: Any) -> int:
    import time

    import anyio

    from dsh.repl.shell import exit_code_for

    signals = _Signals(shell, lambda: None)
    started = time.monotonic()
    async with anyio.create_task_group() as tasks:
        await tasks.start(signals.watch)
        with output.watching(shell):
            reason = await shell.run_turn(prompt)
        _flush(shell)
        tasks.cancel_scope.cancel()
    aborted = reason is not None and reason.get("kind") == "aborted"
    status = signals.exit_status(exit_code_for(reason)) if aborted else exit_code_for(reason)
    output.finish(shell, reason, status, time.monotonic() - started)
    return status


async def _stdin_lines() -> Any:
    """Lines of stdin, read without blocking the event loop (regular files are read directly)."""
    import stat

    import anyio

    fd = sys.stdin.fileno()
    pollable = not stat.S_ISREG(os.fstat(fd).st_mode)
    pending = b""
    while True:
        if pollable:
            try:
                await anyio.wait_readable(fd)
            except PermissionError:  # /dev/null and the like: epoll cannot watch them, and reads never block
                pollable = False
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace").rstrip("\r")


async def _run_piped(shell: Any) -> int:
    import contextlib

    import anyio

    status = 0
    stopped = False

    def stop() -> None:
        nonlocal stopped
        stopped = True
        reading.cancel()

    signals = _Signals(shell, stop)
    async with anyio.create_task_group() as tasks:
        await tasks.start(signals.watch)
        with anyio.CancelScope() as reading:
            async with contextlib.aclosing(_stdin_lines()) as lines:
                async for line in lines:
                    with anyio.CancelScope(shield=True):  # a signal cancels the turn, not the loop
                        await shell.handle_line(line)
                        await shell.deliver_notices()
                    _flush(shell)  # the turn's end line, before reading the next one
                    if shell.exit_code is not None:
                        status = shell.exit_code
                        break
                    if stopped:
                        break
                else:
                    # EOF: background jobs still owe their completion notice; wait for them (a signal
                    # still stops this), then let the owner read the notices in one more turn.
                    toolkit = shell.toolkit
                    if toolkit is not None:
                        await toolkit.jobs.wait_all()
                        with anyio.CancelScope(shield=True):
                            await shell.deliver_notices()
        tasks.cancel_scope.cancel()
    if stopped and shell.exit_code is None:
        status = signals.exit_status(130)
    return status
