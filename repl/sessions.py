"""Sessions as the user sees them: the ``/sessions`` listing, the resume recap, ``dsh sessions``.

Every text here comes from a session log, so it is hostile (prompts, model output): lines are built
plain and one-lined here and reach the terminal through a sink or :func:`_out`, both of which run the
one sanitizer (:func:`~dsh.repl.styles.terminal_text`). Listing reads each log's head and tail only
(:func:`~dsh.agent_loop.session_list.list_sessions`); ``show`` streams the log one record at a time.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.agent_loop.events import AssistantMessage, ReasoningDelta, TextDelta, TurnStart, from_wire
from dsh.agent_loop.plan import plan_head, plan_lines
from dsh.agent_loop.project import project_root
from dsh.agent_loop.reasons import EndReason
from dsh.agent_loop.session_files import SessionLogError
from dsh.agent_loop.session_list import SessionInfo, list_sessions, remove_session, resolve_session
from dsh.agent_loop.session_read import load_session_file, read_header
from dsh.llm import error_chain, redact_text
from dsh.repl.config import state_dir
from dsh.repl.export_cli import sessions_export
from dsh.repl.renderer import Renderer
from dsh.repl.styles import terminal_text
from dsh.repl.turn_end import turn_end_line

if TYPE_CHECKING:
    from dsh.agent_loop.recap import Recap
    from dsh.llm.lines import LongLine

__all__ = [
    "LISTING_LIMIT",
    "SHOW_RECORD_LIMIT",
    "Transcript",
    "brief",
    "current_project",
    "listing_lines",
    "main",
    "recap_lines",
]

LISTING_LIMIT = 20  # sessions shown by /sessions (the newest)
# `dsh sessions show` reads no record longer than this (docs/configuration.md, sessions): more than a whole
# 1M-token context, so no record a model could take is cut, and one forged line cannot fill the memory.
SHOW_RECORD_LIMIT = 16 << 20
_RECAP_WIDTH = 100  # characters of a prompt or answer in the recap
_ELLIPSIS = "…"
USAGE = "usage: dsh sessions list [--all] | show ID | export ID [--format md|json|html] [-o FILE] | rm ID"
HELP = f"""{USAGE}

Sessions are kept per project under $XDG_STATE_HOME/dsh/sessions (~/.local/state/dsh/sessions).

  list [--all]   this project's sessions, newest first (--all: every project's)
  show ID        a session's transcript (ID: an id, a unique prefix, or last)
  export ID [--format md|json|html] [-o FILE] [--reasoning]
                 a session as a masked file to read or share (to stdout without -o)
  rm ID          remove a session's log
"""


def brief(text: str, width: int) -> str:
    """``text`` on one line (runs of whitespace, newlines included, become one space), cut to ``width``."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + _ELLIPSIS


def current_project(cwd: Path | None = None) -> str:
    """The project of a session started here: the git work tree, else the working directory."""
    return str(project_root(cwd if cwd is not None else Path.cwd()))


def _home_short(path: str, env: Mapping[str, str]) -> str:
    home = env.get("HOME", "")
    if home and home != "/" and (path == home or path.startswith(home.rstrip("/") + "/")):
        return "~" + path[len(home.rstrip("/")) :]
    return path


def _when(modified: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(modified))


def _turns(count: int) -> str:
    return f"{count} turn{'s' if count != 1 else ''}"


def listing_lines(
    sessions: Sequence[SessionInfo],
    *,
    project: str | None,
    current: str | None = None,
    env: Mapping[str, str] | None = None,
    limit: int | None = LISTING_LIMIT,
) -> list[str]:
    """One line per session, newest last: mark, date, id, turns, project (with ``--all``), first prompt.

    ``project`` None lists every project (``--all``), each line naming its project.
    """
    env = os.environ if env is None else env
    shown = list(sessions[-limit:]) if limit is not None else list(sessions)
    lines: list[str] = []
    if project is not None:
        lines.append(f"sessions of {_home_short(project, env)} (newest last; --all for every project):")
    else:
        lines.append("sessions of every project (newest last):")
    if limit is not None and len(sessions) > limit:
        lines.append(f"(last {limit} of {len(sessions)})")
    for info in shown:
        mark = "*" if info.id == current else " "
        where = f"  {_home_short(info.project, env)}" if project is None else ""
        title = f"  {brief(info.title, 60)}" if info.title else ""
        lines.append(f"{mark} {_when(info.modified)}  {info.id}  {_turns(info.turns):<9}{where}{title}".rstrip())
    return lines


def recap_lines(ident: str, turns: int, recap: Recap | None, *, repaired_turn: int | None,
                secrets: Sequence[str] = ()) -> list[str]:
    """``resumed session <id> (N turns)``, then the last turns in brief; after a crash, what /retry sends; the
    plan, while it has items."""
    lines = [f"resumed session {ident} ({_turns(turns)})"]
    if recap is None:
        return lines
    for summary in recap.turns:
        label = f"  turn {summary.turn}"
        prompt = "(background job notices)" if summary.notice else brief(summary.prompt, _RECAP_WIDTH)
        lines.append(f"{label} > {redact_text(prompt, secrets)}")
        pad = " " * len(label)
        if summary.answer:
            lines.append(f"{pad} < {redact_text(brief(summary.answer, _RECAP_WIDTH), secrets)}")
        if summary.end is not None:
            end = turn_end_line(EndReason.from_dict(summary.end), secrets)
            if end is not None:  # in parentheses: a recap, not the turn-end line of a turn just run
                end = "(" + end[1:].replace("]", ")", 1) if end.startswith("[") else end
                lines.append(f"{pad}   {brief(end, _RECAP_WIDTH)}")
    if repaired_turn is not None and recap.last_prompt is not None and recap.last_prompt_turn == repaired_turn:
        prompt = redact_text(brief(recap.last_prompt, _RECAP_WIDTH), secrets)
        lines.append(f"turn {repaired_turn} was interrupted; /retry sends its prompt again: {prompt}")
    plan = recap.plan
    if plan is not None and plan.total:  # the model's plan, as the log's last plan/update left it (/plan shows it)
        lines.append(plan_head(plan))
        lines.extend(f"  {redact_text(brief(line, _RECAP_WIDTH), secrets)}" for line in plan_lines(plan))
    return lines


class Transcript:
    """A readable transcript of a log: each prompt as ``> …``, then the turn as dsh drew it live.

    Call it with each record in order (a log streams through it), then :meth:`close`. Reasoning is
    plain (no terminal styles here); tool results show the same preview as the live view.
    """

    def __init__(self, header: Mapping[str, Any], write: Callable[[str], None], *, secrets: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self._write = write
        self._renderer = Renderer(color=False, secrets=secrets)
        project = _home_short(str(header.get("project") or header.get("cwd") or ""), os.environ if env is None else env)
        write(f"session {header.get('id', '?')} · project {project} · created {header.get('createdAt', '?')}\n")

    def __call__(self, record: dict[str, Any]) -> None:
        if not isinstance(record.get("data"), dict):
            return
        event = from_wire(record)
        renderer = self._renderer
        if isinstance(event, TurnStart):
            self._write(renderer.end_line())
            prompt = "(background job notices)" if event.source == "notice" else event.prompt
            self._write("> " + prompt.replace("\n", "\n  ") + "\n")
        elif isinstance(event, AssistantMessage):
            if event.reasoning_content:
                self._write(renderer.render(ReasoningDelta(event.reasoning_content)))
            if event.content:
                self._write(renderer.render(TextDelta(event.content)))
            return
        text = renderer.render(event)
        if text:
            self._write(text)

    def long_record(self, line: LongLine) -> None:
        """A record over :data:`SHOW_RECORD_LIMIT`, never read: one line in its place."""
        kind = line.field("type")
        self._write(self._renderer.end_line())
        self._write(f"({kind + ' ' if kind else ''}record of {line.size / 1e6:.1f} MB not shown)\n")

    def close(self) -> None:
        self._write(self._renderer.end_line())


# --- `dsh sessions list|show|rm` ----------------------------------------------------------------


def _out(text: str) -> None:
    sys.stdout.write(terminal_text(text))


def _err(text: str) -> None:
    sys.stderr.write(terminal_text(f"dsh sessions: {text}\n"))


def main(args: list[str], env: Mapping[str, str] | None = None) -> int:
    """``dsh sessions list [--all] | show ID | rm ID | export ID``: 0 done, 1 failed (not found, in use), 2 usage."""
    env = dict(os.environ if env is None else env)
    root = state_dir(env) / "sessions"
    secrets = tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s)
    command, rest = (args[0], args[1:]) if args else ("list", [])
    if command in ("-h", "--help", "help"):
        _out(HELP)
        return 0
    try:
        if command == "list" and rest in ([], ["--all"]):
            project = None if rest else current_project()
            sessions = list_sessions(root, project=project)
            if not sessions:
                where = f" of {_home_short(project, env)}" if project is not None else ""
                _out(f"no sessions{where} in {root}" + (" (--all lists every project)\n" if project else "\n"))
                return 0
            lines = listing_lines(sessions, project=project, env=env, limit=None)
            _out("".join(redact_text(line, secrets) + "\n" for line in lines))
            return 0
        if command == "show" and len(rest) == 1:
            path = resolve_session(rest[0], root, project=current_project())  # `last`: this project's
            view = Transcript(read_header(path), _out, secrets=secrets, env=env)
            _, _, warnings = load_session_file(path, on_record=view, max_record=SHOW_RECORD_LIMIT,
                                               on_long=view.long_record)
            view.close()
            for warning in warnings[:3]:
                _err(f"warning: {warning}")
            return 0
        if command == "export":  # docs/prompt.md, "Export"
            return sessions_export(rest, env, root, current_project())
        if command == "rm" and len(rest) == 1:
            path = remove_session(rest[0], root)
            _out(f"removed session {path.stem}\n")
            return 0
    except SessionLogError as exc:
        _err(redact_text(error_chain(exc), secrets))
        return 1
    except BrokenPipeError:
        return 0
    _err(USAGE)
    return 2

