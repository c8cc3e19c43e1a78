"""Session ids: ``YYYYMMDD-HHMMSS-xxxxxx``, local time then six random hex digits.

A module of its own so that the front end can name a new session (in its banner) before it loads
the session log, which creates the file with this id a moment later.
"""

from __future__ import annotations

import secrets
import time

__all__ = ["new_session_id"]


def new_session_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
