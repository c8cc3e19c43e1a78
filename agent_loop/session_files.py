"""Where session logs live, and what every reader and writer of one shares: the error, the safe open, the lock.

The log's format is described in agent_loop/session_log.py; docs/architecture.md (the session log).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

from dsh.agent_loop.safe_open import NotRegularFile, open_regular_fd
from dsh.llm import ErrorCode, HarnessError

__all__ = ["SUFFIX", "VERSION", "SessionLogError", "default_root"]

VERSION = 1
SUFFIX = ".jsonl"
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def default_root() -> Path:
    """``$XDG_STATE_HOME/dsh/sessions``, else ``~/.local/state/dsh/sessions`` (a relative XDG value is ignored)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "dsh" / "sessions"


class SessionLogError(HarnessError):
    """A session log that cannot be read, written, locked or found; ``code`` says which."""

    def __init__(self, message: str, code: str = ErrorCode.SESSION_LOG, *, cause: BaseException | None = None) -> None:
        super().__init__(message, code, cause=cause)


def log_error(message: str, cause: BaseException | None = None) -> SessionLogError:
    return SessionLogError(message, cause=cause)


def open_regular(path: Path, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` without following a symlink or blocking on a FIFO; only a regular file is kept.

    ``dsh.agent_loop.safe_open`` decides on what was opened, so nothing can be swapped in between; see
    docs/architecture.md (the session log).
    """
    refusal: str
    try:
        return open_regular_fd(path, flags, follow_symlinks=False)
    except NotRegularFile as exc:
        refusal = f"session log {path} is not a regular file ({exc.kind})"
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise log_error(f"cannot open session log {path}", exc)
        refusal = f"session log {path} is a symbolic link; dsh opens only regular files"
    # Raised here, outside the handlers: error_chain would show the OSError's own text beneath the line.
    raise log_error(refusal)


def lock_session(fd: int, path: Path) -> None:
    """Take the session's exclusive lock (``SESSION_LOCKED`` while another dsh holds it)."""
    locked = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        locked = True  # raised below, outside this block: error_chain would add EAGAIN's own text
    except OSError:
        pass  # a filesystem without flock: carry on unlocked rather than refuse to work
    if locked:
        raise SessionLogError(f"session {path.stem} is open in another dsh process", ErrorCode.SESSION_LOCKED)


def make_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise log_error(f"cannot create the session directory {directory}", exc)


def fsync_dir(directory: Path) -> None:
    # Make the new file's directory entry durable too; not every filesystem allows it.
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
