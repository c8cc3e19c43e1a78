"""``dsh`` that crashes inside a turn: a fault injection for the terminal-hygiene test.

``python tests/reliability/crashing_dsh.py ARGS...`` runs ``python -m repl ARGS...``, except that the first
streamed text delta of a turn raises :class:`InjectedCrash` from the REPL's display. It derives from
``BaseException`` so nothing on the way treats it as an ordinary turn failure: it unwinds the running turn,
the live view that owns the terminal in raw mode, and the event loop, up to the CLI's last-resort handler --
the path a real bug would take. What the test then checks is the terminal the user is left with.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dsh.repl import frontend


class InjectedCrash(BaseException):
    """A bug inside a turn (not an Exception, so no handler on the way swallows it)."""


_original = frontend.Display.show


def _crashing_show(self: Any, update: Any) -> None:
    _original(self, update)
    if getattr(update, "type", None) == "text/delta":
        raise InjectedCrash("injected crash inside a turn")


if __name__ == "__main__":
    frontend.Display.show = _crashing_show  # type: ignore[method-assign]
    from dsh.repl.cli import main

    main(sys.argv[1:])
