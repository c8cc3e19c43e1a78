"""``/export [FILE]``: the REPL's current session to a file (docs/prompt.md, "Export").

Loaded only when ``/export`` runs (repl/commands.py imports it by name), so the prompt does not wait for it.
"""

from __future__ import annotations

import os

from dsh.repl.config import state_dir
from dsh.repl.export import default_path, export_format, read_conversation, write_export
from dsh.repl.export_cli import EXPORTED
from dsh.repl.export_formats import render
from dsh.repl.host import Host

__all__ = ["NOTHING_TO_EXPORT", "repl_export"]

NOTHING_TO_EXPORT = "nothing to export yet: this session has no turns"


async def repl_export(shell: Host, arg: str) -> None:
    """``/export [FILE]``: the current session; the format from FILE's name (``.json``, ``.html``, else md).
    Without FILE it goes under the state directory (``exports/``), and the line says where."""
    log = shell.session.log
    if log is None or not log.path.exists():
        shell.say(NOTHING_TO_EXPORT)
        return
    if arg:
        path = os.path.expanduser(arg)
        fmt = export_format(path)
    else:
        fmt = "md"
        path = str(default_path(state_dir(shell.env), log.id, fmt))
    conversation = read_conversation(log.path, shell.session.secrets)
    write_export(path, render(conversation, fmt).encode("utf-8"), make_parent=not arg)
    shell.say(EXPORTED.format(path=path))
