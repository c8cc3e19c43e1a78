"""Listing, finding and removing session logs: each read only at its start and end, never whole.

The log's format is described in agent_loop/session_log.py; docs/architecture.md (the session log).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.agent_loop.events import TurnStart
from dsh.agent_loop.journal import remove_journal
from dsh.agent_loop.session_files import (
    SAFE_ID,
    SUFFIX,
    SessionLogError,
    default_root,
    fsync_dir,
    lock_session,
    log_error,
    open_regular,
)
from dsh.agent_loop.session_read import read_header
from dsh.llm import ErrorCode
from dsh.llm.text import loads

__all__ = ["SessionInfo", "list_sessions", "lock_holder", "remove_session", "resolve_session", "session_in_use"]

_TURN_START_MARK = b'"type":"%s"' % TurnStart.type.encode()
_TITLE_LIMIT = 60


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    path: Path
    created_at: str
    cwd: str
    modified: float  # st_mtime
    turns: int  # the turn of the last record that names one (turns are numbered from 1)
    title: str  # the first prompt, shortened; "" for a session without turns
    project: str = ""  # the header's project (the git work tree, else cwd); older logs: their cwd


_HEAD = 1 << 16  # bytes read from a log's start to list it: the header and the first prompt
_TAIL = 1 << 16  # bytes read from its end: the last record's turn
_TAIL_SCAN = 1 << 24  # how far back a listing looks for the start of a long last line
_RECORD_PREFIX = re.compile(rb'\{"type":"[^"\\]*","seq":\d+,"time":"[^"\\]*","data":\{"turn":(\d{1,12})[,}]')
_PROMPT_PREFIX = re.compile(rb'^\{"type":"turn/start","seq":\d+,"time":"[^"\\]*","data":\{"turn":\d+,"prompt":"')


def _record_turn(record: Any) -> int | None:
    """The turn a record belongs to, if it says (``job/notice`` does not)."""
    if isinstance(record, dict) and isinstance(record.get("type"), str):
        data = record.get("data")
        if isinstance(data, dict):
            turn = data.get("turn")
            if isinstance(turn, int) and not isinstance(turn, bool):
                return turn
    return None


def _line_turn(line: bytes) -> int | None:
    if len(line) > _TAIL:  # a huge line: its turn is in the prefix dsh writes, no need to parse it all
        match = _RECORD_PREFIX.match(line, 0, 256)
        return int(match.group(1)) if match else None
    try:
        return _record_turn(loads(line))
    except ValueError:
        return None


def _title(prompt: str) -> str:
    title = " ".join(prompt.split())
    return title[: _TITLE_LIMIT - 1] + "…" if len(title) > _TITLE_LIMIT else title


def _partial_prompt(line: bytes) -> str:
    """The start of a prompt from a ``turn/start`` line cut by the head window."""
    match = _PROMPT_PREFIX.match(line)
    if not match:
        return ""
    text = line[match.end() : match.end() + 4 * _TITLE_LIMIT].decode("utf-8", "ignore")
    end = text.find('"')
    while end > 0 and text[end - 1] == "\\":  # an escaped quote, not the end of the string
        end = text.find('"', end + 1)
    text = text if end < 0 else text[:end]
    for cut in range(len(text), max(len(text) - 12, -1), -1):  # drop a half escape at the cut
        with contextlib.suppress(ValueError):
            value = loads('"' + text[:cut] + '"')
            return value if isinstance(value, str) else ""
    return ""


def _last_line_turn(fd: int, good_end: int, head_end: int) -> tuple[int | None, int]:
    """The turn of the last complete record that names one, reading back from ``good_end`` in windows.

    Returns ``(turn, scanned_from)``; gives up (None) after ``_TAIL_SCAN`` bytes.
    """
    end = good_end - 1  # the newline that ends the last complete line
    window = _TAIL
    while True:
        start = max(head_end, end - window)
        data = os.pread(fd, end - start, start)
        # complete lines are those whose start we see: after a newline in the window
        starts = [index + 1 for index in _newlines_backward(data)]
        if start == head_end:
            starts.append(0)
        line_end = len(data)
        for line_start in starts:
            turn = _line_turn(data[line_start:line_end])
            if turn is not None:
                return turn, start
            line_end = line_start - 1
        if start == head_end or end - start >= _TAIL_SCAN:
            return None, start
        window *= 4


def _newlines_backward(data: bytes) -> Iterator[int]:
    index = data.rfind(b"\n")
    while index >= 0:
        yield index
        index = data.rfind(b"\n", 0, index)


def _good_end(fd: int, size: int) -> int:
    """Where complete lines end (one past the last newline), looking back at most ``_TAIL_SCAN``; 0 if unseen."""
    end = size
    while end > 0 and size - end < _TAIL_SCAN:
        start = max(0, end - _TAIL)
        data = os.pread(fd, end - start, start)
        index = data.rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def _info(path: Path) -> SessionInfo | None:
    """A listing entry from the header, the first prompt and the last record: a bounded read.

    A log is read at its start (``_HEAD``) and its end (``_TAIL``, further back only while the last
    line is longer), never whole, so listing 1 000 logs of gigabytes stays fast; see
    docs/architecture.md (the session log). Anything that is not a regular dsh log is left out.
    """
    try:
        fd, info = open_regular(path, os.O_RDONLY)
    except SessionLogError:
        return None
    try:
        good_end = _good_end(fd, info.st_size)
        head = os.pread(fd, min(_HEAD, good_end), 0)
        lines, cut = _head_lines(head)
        header = _session_header(lines)
        if header is None:
            return None
        title = _first_prompt_title(lines[1:], cut)
        if len(head) == good_end:  # the whole log was in the head window
            turns = next((turn for turn in map(_line_turn, reversed(lines[1:])) if turn is not None), 0)
        else:
            turns = _last_line_turn(fd, good_end, len(lines[0]) + 1)[0] or 0
    except OSError:
        return None
    finally:
        os.close(fd)
    return SessionInfo(
        id=str(header.get("id") or path.stem),
        path=path,
        created_at=str(header.get("createdAt") or ""),
        cwd=str(header.get("cwd") or ""),
        modified=info.st_mtime,
        turns=turns,
        title=title,
        project=str(header.get("project") or header.get("cwd") or ""),
    )


def _head_lines(head: bytes) -> tuple[list[bytes], bytes | None]:
    """The whole lines of the head window, and the line it cut (longer than the window) if any."""
    lines = head.split(b"\n")
    cut = lines.pop()  # after the last newline: b"" when the window ends on one
    return lines, None if head.endswith(b"\n") else cut


def _session_header(lines: list[bytes]) -> dict[str, Any] | None:
    """The first line's ``session`` record, or None when the file is not a dsh session log."""
    if not lines:
        return None
    try:
        header = loads(lines[0])
    except ValueError:
        return None
    return header if isinstance(header, dict) and header.get("type") == "session" else None


def _first_prompt_title(lines: list[bytes], cut: bytes | None) -> str:
    """The listing title: the first ``turn/start``'s prompt, from a whole line or else the cut one."""
    for line in lines:
        if _TURN_START_MARK in line:  # a cheap filter; the parsed type decides
            with contextlib.suppress(ValueError):
                record = loads(line)
                if isinstance(record, dict) and record.get("type") == TurnStart.type:
                    data = record.get("data")
                    prompt = data.get("prompt") if isinstance(data, dict) else None
                    return _title(prompt) if isinstance(prompt, str) else ""
    if cut is not None and _TURN_START_MARK in cut[:200]:
        return _title(_partial_prompt(cut))
    return ""


def list_sessions(
    root: str | os.PathLike[str] | None = None, *, project: str | os.PathLike[str] | None = None
) -> list[SessionInfo]:
    """Sessions under ``root``, least recently written first (the last one is what ``last`` means).

    With ``project``, only the sessions of that project (see :attr:`SessionInfo.project`).
    """
    directory = Path(root) if root is not None else default_root()
    try:
        paths = sorted(directory.glob("*" + SUFFIX))
    except OSError:
        return []
    infos = [info for info in map(_info, paths) if info is not None]
    if project is not None:
        wanted = os.fspath(project)
        infos = [info for info in infos if info.project == wanted]
    infos.sort(key=lambda info: (info.modified, info.created_at, info.id))
    return infos


def session_in_use(path: Path) -> bool:
    """True when another open log (in this process or another) holds the session's lock."""
    try:
        fd, _ = open_regular(path, os.O_RDONLY)
    except SessionLogError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # no flock on this filesystem: nothing can say
    finally:
        os.close(fd)  # also drops the probe's lock
    return False


def lock_holder(path: Path) -> int | None:
    """The pid of the process holding the session's lock, from Linux's /proc/locks; None where it cannot be told
    (another system, another pid namespace, or the lock went in between)."""
    try:
        info = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2220488 0 EOF": the device as the kernel prints it, then the inode.
    # A process waiting for the lock has its own line, "1: -> FLOCK ...", which this shape does not match.
    file = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for fields in map(str.split, lines):
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == file and fields[4].isdigit():
            return int(fields[4]) or None  # 0: a holder outside this pid namespace
    return None


def remove_session(id_or_path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Delete a session log and its undo journal (agent_loop/journal.py); refused (``SESSION_LOCKED``) while a
    dsh process has it open."""
    path = resolve_session(id_or_path, root)
    fd, _ = open_regular(path, os.O_RDONLY)
    try:
        lock_session(fd, path)  # held while unlinking: nobody opens it in between
        read_header(path)
        try:
            path.unlink()
        except OSError as exc:
            raise log_error(f"cannot remove session log {path}", exc)
        remove_journal(path)  # still under the lock: nobody is writing it
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return path


def _last(directory: Path, project: str | os.PathLike[str] | None, exclude: str | None) -> Path:
    busy: SessionInfo | None = None
    for info in reversed(list_sessions(directory, project=project)):
        if info.turns > 0 and info.id != exclude:
            if not session_in_use(info.path):
                return info.path
            busy = busy or info
    where = f" of project {project}" if project is not None else ""
    if busy is None:
        raise SessionLogError(f"no session with turns to resume{where} in {directory}", ErrorCode.SESSION_NOT_FOUND)
    pid = lock_holder(busy.path)
    holder = f"another dsh (pid {pid})" if pid is not None else "another dsh"
    raise SessionLogError(
        f"session {busy.id} is open in {holder}, and no other session{where} has turns to resume",
        ErrorCode.SESSION_LOCKED,
    )


def resolve_session(
    id_or_last: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
    exclude: str | None = None,
) -> Path:
    """A session file from ``last``, an id, a unique id prefix, or a path to a ``.jsonl`` file.

    ``last`` is the most recently written session that has turns, of ``project`` when given, other
    than ``exclude`` (the caller's own session) and not open in another process. When every one with turns
    is open elsewhere, the error (``SESSION_LOCKED``) names the latest of them and the pid holding it.
    """
    directory = Path(root) if root is not None else default_root()
    text = os.fspath(id_or_last)
    if text == "last":
        return _last(directory, project, exclude)
    if os.sep in text or text.endswith(SUFFIX):
        path = Path(text)
        if os.path.lexists(path):  # opening it decides whether it is a regular file
            return path
        raise SessionLogError(f"no session log at {path}", ErrorCode.SESSION_NOT_FOUND)
    if not SAFE_ID.match(text):
        raise SessionLogError(f"invalid session id {text!r}", ErrorCode.SESSION_NOT_FOUND)
    exact = directory / (text + SUFFIX)
    if os.path.lexists(exact):
        return exact
    matches = sorted(directory.glob(text + "*" + SUFFIX)) if directory.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise SessionLogError(
            f"session id {text!r} is ambiguous ({len(matches)} sessions match)", ErrorCode.SESSION_AMBIGUOUS
        )
    raise SessionLogError(f"no session {text!r} in {directory}", ErrorCode.SESSION_NOT_FOUND)
