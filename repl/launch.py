"""``dsh`` past ``--version``: flags, config, logging, the subcommands, and which mode runs.

Modes: interactive (stdin and stdout are terminals; :mod:`dsh.repl.app`), piped (each stdin line is a
turn; EOF waits for the running turn, then exits 0; :mod:`dsh.repl.piped`), and ``-p PROMPT`` (one turn;
the exit status says how it ended; the answer alone on stdout, or the JSON of ``--output-format``, and
everything else on stderr; ``-p -`` reads the prompt from stdin; :mod:`dsh.repl.print_output`,
docs/scripting.md). The mode's module is imported once the mode is known, and imports what it needs at
its top (docs/architecture.md, "Start-up and lazy imports"). Nothing here prints a traceback unless
``DSH_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import select
import stat
import sys
import termios
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

from dsh.agent_loop.gc_pause import gc_paused
from dsh.llm import ErrorCode, HarnessError, RedactingFilter, error_chain, redact_text, unwrap_group
from dsh.llm.endpoint import legacy_warning
from dsh.llm.redact import redact_url
from dsh.llm.wire_trace import not_regular, parse_speed
from dsh.repl import __version__
from dsh.repl.config import (
    PERMISSION_MODES,
    Config,
    ConfigError,
    add_endpoint_flags,
    check_sandbox,
    load_config,
    state_dir,
)
from dsh.repl.first_prompt import FirstPrompt, banner_line
from dsh.repl.lazy import entry
from dsh.repl.options import LaunchOptions, check_endpoint
from dsh.repl.sanitize import sanitize

__all__ = ["run"]

EXIT_USAGE = 2
MAX_STDIN_PROMPT = 1 << 20  # bytes of a prompt read from stdin (`-p -`)
OUTPUT_FORMATS = ("text", "json", "stream-json")
_FROM_STDIN = "\x00stdin"  # what a bare `-p` parses to: read the prompt from stdin when it is piped
ModeMain = Callable[[LaunchOptions, Config, dict[str, str]], Coroutine[Any, Any, int]]


def run(args: list[str]) -> int:
    """The exit status of ``dsh ARGS`` (``--version`` aside)."""
    subcommand = _SUBCOMMANDS.get(args[0]) if args else None
    if subcommand is not None:
        return subcommand(args[1:])
    return _guarded(args)


def _debug() -> bool:
    return os.environ.get("DSH_DEBUG", "") not in ("", "0")


def _guarded(args: list[str], command: Callable[[list[str]], int] | None = None) -> int:
    """Run, and turn anything unexpected into one line on stderr (a traceback only with DSH_DEBUG=1)."""
    saved = _save_terminal()
    try:
        return (command or _main)(args)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except BaseException as exc:
        if _debug():
            raise
        secrets = tuple(s for s in (os.environ.get("DEEPSEEK_API_KEY", ""),) if s)
        line = redact_text(error_chain(unwrap_group(exc)), secrets)
        _stderr(f"dsh: internal error: {line} (DSH_DEBUG=1 shows a traceback)")
        return 1
    finally:
        _restore_terminal(saved)


def _serve(args: list[str]) -> int:
    """``dsh serve --stdio``: the JSON-RPC child runtime (dsh.repl.serve)."""
    serve_main: Callable[[list[str]], int] = entry("dsh.repl.serve", "main")
    return serve_main(args)


def _acp(args: list[str]) -> int:
    """``dsh acp``: dsh as an ACP agent on stdio, for editors (dsh.repl.acp_agent, docs/editors.md). It speaks
    the protocol itself: no extra to install."""
    with gc_paused():  # the session's modules: no collection passes while they load
        acp_main: Callable[..., int] = entry("dsh.repl.acp_agent", "main")  # ACP itself: repl/acp_wire.py, no SDK
    return acp_main(args, dict(os.environ), setup_logging=_setup_logging, stderr=_stderr)


def _doctor(args: list[str]) -> int:
    """``dsh doctor``: each step of one request, checked (dsh.repl.doctor, docs/doctor.md)."""
    doctor_main: Callable[[list[str], dict[str, str]], int] = entry("dsh.repl.doctor", "main")
    env = dict(os.environ)
    _setup_logging(env, tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s))  # not over the report
    return doctor_main(args, env)


def _replay_server(args: list[str]) -> int:
    """``dsh replay-server FILE --port P``: serve a recording to any client (docs/record-replay.md)."""
    replay_main: Callable[..., int] = entry("dsh.llm.loopback.replay_server", "main")
    return replay_main(args, out=_stdout, err=_stderr)


def _trust(args: list[str]) -> int:
    """``dsh trust [--revoke]``: trust this repository's project config (dsh.repl.trust, docs/configuration.md)."""
    trust_main: Callable[[list[str], dict[str, str]], int] = entry("dsh.repl.trust", "main")
    return trust_main(args, dict(os.environ))


def _sessions(args: list[str]) -> int:
    """``dsh sessions list [--all] | show ID | rm ID | export ID`` (dsh.repl.sessions)."""
    sessions_main: Callable[[list[str]], int] = entry("dsh.repl.sessions", "main")
    return sessions_main(args)


# ``dsh NAME ...``: words that are not prompts or flags; each takes the rest of the arguments.
_SUBCOMMANDS = {
    "serve": _serve,
    "acp": lambda rest: _guarded(rest, _acp),
    "sessions": _sessions,
    "doctor": _doctor,
    "trust": lambda rest: _guarded(rest, _trust),
    "replay-server": lambda rest: _guarded(rest, _replay_server),
}


# --- terminal safety net -------------------------------------------------------------------------


def _save_terminal() -> list[Any] | None:
    try:
        if os.isatty(0):
            return termios.tcgetattr(0)
    except Exception:
        pass
    return None


def _restore_terminal(saved: list[Any] | None) -> None:
    """Whatever happened, hand the terminal back the way we found it (echo, icanon ...)."""
    if saved is None:
        return
    try:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
    except Exception:
        pass


def _stdout(line: str) -> None:
    try:
        sys.stdout.write(sanitize(line) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _stderr(line: str) -> None:
    """One line on stderr, through the sinks' sanitizer: an error chain is hostile text too."""
    try:
        sys.stderr.write(sanitize(line) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# --- flags -----------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh",
        description="A terminal harness for LLM agents that never fails silently.",
        epilog="Config: $XDG_CONFIG_HOME/dsh/config.toml. Environment: DEEPSEEK_API_KEY, DEEPSEEK_BASE_URL, "
        "DSH_MODEL, DSH_DIALECT, DSH_MAX_PARALLEL, DSH_PROFILE, NO_COLOR, DSH_DEBUG. Also: dsh doctor (check each "
        "step of a request), dsh sessions list [--all] | show ID | rm ID | export ID --format md|json|html, dsh trust "
        "[--revoke] (run this repository's .dsh/config.toml hooks and servers), dsh serve --stdio (child runtime), "
        "dsh acp (ACP agent for editors), dsh replay-server FILE --port P (serve a recording).",
    )
    parser.add_argument("-p", "--print", metavar="PROMPT", dest="print_prompt", nargs="?", const=_FROM_STDIN,
                        help="run one turn and exit: the answer on stdout, everything else on stderr; "
                        "PROMPT - (or none, with piped stdin) reads it from stdin. Exit 0 completed, 1 failed, "
                        "3 rejected, 4 output-token limit, 130 aborted by SIGINT, 143 by SIGTERM")
    parser.add_argument("--output-format", dest="output_format", choices=OUTPUT_FORMATS,
                        help="with -p: text (default), json (one object at the end), stream-json (one per event)")
    parser.add_argument("--image", metavar="FILE", dest="images", action="append", default=[],
                        help="with -p: send this image (PNG, JPEG, GIF, WebP) with the prompt; repeatable")
    parser.add_argument("--resume", metavar="ID|last", help="continue a saved session")
    parser.add_argument("--demo", action="store_true", help="no key, no network: an embedded scripted endpoint")
    parser.add_argument("--scenario", metavar="NAME", help="demo scenario to start with (implies --demo)")
    add_endpoint_flags(parser)
    parser.add_argument("--max-cost", dest="max_cost", metavar="USD",
                        help="stop a turn before a request once this -p run or session has spent USD dollars")
    parser.add_argument("--allow-edits", dest="allow_edits", action="store_true", default=None,
                        help="piped and -p runs may write files in the working tree without asking")
    parser.add_argument("--web", dest="web", action="store_true", default=None,
                        help="give the model web_fetch: GET a URL, asked for unless its host is in web_allow")
    parser.add_argument("--allow-mcp", dest="allow_mcp", action="store_true",
                        help="MCP tools run without asking (-p and piped runs deny them otherwise; docs/mcp.md)")
    parser.add_argument("--permission-mode", dest="permission_mode", choices=PERMISSION_MODES,
                        help="default (ask for each command and edit), plan (read-only), accept-edits (edits in "
                        "the tree without asking), auto (commands and edits in the tree without asking; needs "
                        'sandbox = "bwrap"); Shift+Tab cycles them (docs/safety.md)')
    parser.add_argument("--record", metavar="FILE", help="write a masked wire trace of every model exchange")
    parser.add_argument("--report", metavar="FILE",
                        help="with -p: when the turn does not complete, write a failure capsule (docs/reporting.md)")
    parser.add_argument("--replay", metavar="FILE", help="answer from a --record trace instead of the API")
    parser.add_argument("--replay-speed", dest="replay_speed", type=parse_speed, default=1.0, metavar="N",
                        help="replay the recorded timing N times faster")
    parser.add_argument("--version", action="version", version=f"dsh {__version__}")
    return parser


def _stdin_prompt(explicit: bool) -> str:
    """The ``-p`` prompt read from stdin (bounded); ConfigError when there is none."""
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


def _mode(args: argparse.Namespace) -> str:
    if args.print_prompt is not None:
        return "print"
    if sys.stdin.isatty() and sys.stdout.isatty():
        return "interactive"
    return "piped"


# --- startup failures --------------------------------------------------------------------------------


def _queued_stdin_lines(grace: float = 0.2, limit: int = 16 << 20) -> int:
    """Lines already waiting on a piped stdin (read without blocking past ``grace`` of silence)."""
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
    chain = redact_text(error_chain(exc), secrets)
    queued = _queued_stdin_lines() if mode == "piped" else 0
    if queued:
        _stderr(f"dsh: main agent failed to start; dropped queued stdin ({queued} line(s)): {chain}")
    else:
        _stderr(f"dsh: failed to start: {chain}")


# --- running -------------------------------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    # Start-up allocates much and frees little: collection passes are ~20 ms of the way to a live prompt. The
    # collector runs again once the mode starts its work (_run_mode), or, interactive, once the agent is built behind
    # the prompt (dsh.repl.app); at the latest when dsh ends, for whoever called this in-process.
    with gc_paused():
        return _launch(argv)


def _launch(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.output_format is not None and args.print_prompt is None:
        parser.error("--output-format works only with -p/--print")
    if args.report is not None and args.print_prompt is None:
        parser.error("--report works only with -p/--print (in the REPL: /report [FILE])")
    if args.images and args.print_prompt is None:
        parser.error("--image works only with -p/--print (in the REPL: @FILE, or paste the image's path)")
    mode = _mode(args)
    env = dict(os.environ)
    env_secrets = tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s)
    try:
        config, options = _configure(args, env)
    except ConfigError as exc:
        _startup_failure(exc, mode=mode, secrets=env_secrets)
        return EXIT_USAGE
    # A legacy DeepSeek model name: one line, as the config's warnings (never for an endpoint of dsh's own).
    source = config.sources.get("model")
    legacy = None if options.own_endpoint else legacy_warning(config.model, config.base_url, source, config.dialect)
    for warning in (*config.warnings, *((legacy,) if legacy else ())):
        _stderr(f"dsh: warning: {warning}")
    if config.project is not None and config.project.held:
        config = _trusted(config, env, mode)
    early = _first_prompt(options, config) if mode == "interactive" else None
    try:
        if early is not None and early.draw():
            options = dataclasses.replace(options, first_prompt=early)  # taken over by the app (dsh.repl.app)
        return _run_mode(mode, options, config, env, env_secrets)
    finally:
        if early is not None:
            early.abandon()  # start-up ended before prompt_toolkit took the line over (else: nothing to do)


def _trusted(config: Config, env: dict[str, str], mode: str) -> Config:
    """What the project file runs, when the user trusts it: the REPL asks once, before the first prompt; the other
    modes never ask (docs/configuration.md, "Project config")."""
    # dsh.repl.trust only with a project file that runs something: json, hashlib and the store's file.
    gate: Callable[..., tuple[Config, list[str]]] = entry("dsh.repl.trust", "gate")
    ask = entry("dsh.repl.trust", "ask_terminal") if mode == "interactive" else None
    config, lines = gate(config, env, ask)
    for line in lines:
        _stderr(f"dsh: warning: {line}")
    return config


def _run_mode(mode: str, options: LaunchOptions, config: Config, env: dict[str, str],
              env_secrets: tuple[str, ...]) -> int:
    _setup_logging(env, config.secrets)
    import asyncio  # the loop: imported after the first prompt may have been drawn

    mode_main = _mode_main(mode)
    if mode != "interactive":
        gc.enable()  # a turn comes next, with its garbage; the interactive app enables it behind its first prompt
    try:
        # asyncio, prompt_toolkit's loop, with anyio inside it: anyio loads its backend on first use,
        # which in the interactive mode comes after the first prompt is drawn.
        return asyncio.run(mode_main(options, config, env))
    except HarnessError as exc:
        # The session's modules come after the first prompt (the terminal's even after prompt_toolkit takes keys):
        # its StartupError is looked up only when an error ends the mode.
        if not isinstance(exc, entry("dsh.agent_loop.session_types", "StartupError")):
            raise
        if options.first_prompt is not None:
            options.first_prompt.abandon()  # the failure goes where the prompt was
        cause = exc.__cause__ or exc
        _startup_failure(cause, mode=mode, secrets=config.secrets + env_secrets)
        return EXIT_USAGE if isinstance(cause, HarnessError) and cause.code == ErrorCode.CONFIG else 1


def _first_prompt(options: LaunchOptions, config: Config) -> FirstPrompt | None:
    """The banner and prompt to draw before prompt_toolkit and the agent's modules are imported
    (dsh.repl.first_prompt), when nothing else comes before the prompt: a new session with no subagent tables
    (their hints), not an endpoint of dsh's own (the demo's or a replay's: it starts first)."""
    if options.own_endpoint or options.resume is not None or config.subagents:
        return None
    from dsh.agent_loop.session_id import new_session_id  # only this prompt: secrets and random cost ~6 ms

    # The session's own spelling of its endpoint before its client exists (Session.endpoint).
    endpoint = redact_url(config.base_url.rstrip("/"))
    session_id = new_session_id()
    return FirstPrompt(banner_line(__version__, config.model, endpoint, session_id), session_id)


# Each mode's module and entry: imported once the mode is known (the terminal's brings prompt_toolkit).
_MODES = {
    "print": ("dsh.repl.print_output", "run_print"),
    "piped": ("dsh.repl.piped", "run_piped"),
    "interactive": ("dsh.repl.app", "run_interactive"),
}


def _mode_main(mode: str) -> ModeMain:
    """The mode's entry, its module imported now that the mode is known (each imports what it needs)."""
    mode_main: ModeMain = entry(*_MODES[mode])
    return mode_main


def _configure(args: argparse.Namespace, env: dict[str, str]) -> tuple[Config, LaunchOptions]:
    """The config of this run from flags, environment and file, and the options the mode reads (with the
    ``-p`` prompt read from stdin and the ``--replay`` recording loaded); ConfigError (exit 2) for what
    cannot work."""
    flags = {
        "model": args.model,
        "base_url": args.base_url,
        "proxy": args.proxy,
        "max_tokens": args.max_tokens,
        "thinking": args.thinking,
        "reasoning_effort": args.reasoning_effort,
        "dialect": args.dialect,
        "allow_edits": args.allow_edits,
        "web": args.web,
        "record": args.record,
        "permission_mode": args.permission_mode,
        "max_cost": args.max_cost,
        "profile": args.profile,  # [profiles.NAME] (repl/profiles.py)
    }
    print_prompt = args.print_prompt
    if print_prompt in (_FROM_STDIN, "-"):
        print_prompt = _stdin_prompt(explicit=print_prompt == "-")
    report = os.path.expanduser(args.report) if args.report else args.report
    options = LaunchOptions(
        print_prompt=print_prompt, output_format=args.output_format, report=report, resume=args.resume,
        demo=args.demo or bool(args.scenario), scenario=args.scenario, allow_mcp=args.allow_mcp, replay=args.replay,
        replay_speed=args.replay_speed, images=tuple(os.path.expanduser(image) for image in args.images))
    config = load_config(
        flags, env, require_key=not options.own_endpoint,
        config_path=Path(args.config) if args.config else None,
    )
    options, config = check_endpoint(options, config)
    if config.record:
        _check_record_path(config.record)
    if report:
        _check_record_path(report, "report")
    if config.sandbox is not None:
        check_sandbox(config)
    return config, options


def _check_record_path(path: str, what: str = "record") -> None:
    """Fail before the first prompt, not at the first request, when the trace cannot be written.

    Nothing is opened here: a FIFO, a device or a link is refused by its ``lstat`` alone (the writer
    checks again on what it opens; docs/record-replay.md)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        problem: str | None = "its folder does not exist"
    elif not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        problem = "permission denied"
    else:
        problem = not_regular(path)
    if problem is not None:
        raise ConfigError(f"{what} file {path} cannot be written: {problem}")


def _setup_logging(env: dict[str, str], secrets: tuple[str, ...]) -> None:
    """Warnings from the loop go to a host log file (never over the prompt), masked."""
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


def _open_private_log(path: Path) -> TextIO:
    """dsh.log holds child stderr and task text: created 0600, and an older, looser one is tightened."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
    except BaseException:
        os.close(fd)
        raise
