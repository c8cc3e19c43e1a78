"""``dsh sessions export ID`` (docs/prompt.md, "Export"); ``/export`` is :mod:`dsh.repl.export_command`."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from dsh.agent_loop.session_files import SessionLogError
from dsh.agent_loop.session_list import resolve_session
from dsh.llm import HarnessError, error_chain, redact_text
from dsh.repl.export import FORMATS, export_format, read_conversation, session_secrets, write_export
from dsh.repl.export_formats import render
from dsh.repl.styles import terminal_text

__all__ = ["EXPORTED", "USAGE", "sessions_export"]

EXPORTED = "exported to {path} (secrets masked; it holds the conversation: read it before you share it)"
USAGE = "usage: dsh sessions export ID [--format md|json|html] [-o FILE] [--reasoning]"


def _options(args: list[str]) -> tuple[str, str, str | None, bool] | None:
    """``(ID, format, FILE or None, reasoning)`` from ``export``'s arguments; None when they do not parse."""
    ident: str | None = None
    fmt: str | None = None
    out: str | None = None
    reasoning = False
    rest = iter(args)
    for arg in rest:
        if arg in ("--format", "-f"):
            fmt = next(rest, None)
            if fmt not in FORMATS:
                return None
        elif arg.startswith("--format="):
            fmt = arg.partition("=")[2]
        elif arg in ("-o", "--output"):
            out = next(rest, None)
            if not out:
                return None
        elif arg == "--reasoning":
            reasoning = True
        elif ident is None and not arg.startswith("-"):
            ident = arg
        else:
            return None
    if ident is None or (fmt is not None and fmt not in FORMATS):
        return None
    return ident, fmt or (export_format(out) if out else "md"), out, reasoning


def sessions_export(args: list[str], env: Mapping[str, str], root: Path, project: str) -> int:
    """``dsh sessions export ID [--format md|json|html] [-o FILE] [--reasoning]``: 0 done, 1 failed, 2 usage.

    Without ``-o`` the export goes to stdout."""
    options = _options(args)
    if options is None:
        sys.stderr.write(f"dsh sessions: {USAGE}\n")
        return 2
    ident, fmt, out, reasoning = options
    secrets = session_secrets(env)
    try:
        path = resolve_session(ident, root, project=project)
        text = render(read_conversation(path, secrets, reasoning=reasoning), fmt)
        if out is None:
            sys.stdout.write(text)  # already inert: every text was sanitized when read (repl/export.py)
            return 0
        write_export(out, text.encode("utf-8"))
    except (SessionLogError, HarnessError) as exc:
        sys.stderr.write(terminal_text(f"dsh sessions: {redact_text(error_chain(exc), secrets)}\n"))
        return 1
    except BrokenPipeError:
        return 0
    sys.stderr.write(terminal_text(f"dsh sessions: {EXPORTED.format(path=out)}\n"))
    return 0
