"""The chat requests one dsh and its child dsh subagents have in flight: counted in one place, and bounded by
``max_parallel``.

A request is in flight from the moment it is sent until its response is over (DeepSeek counts its concurrency
cap so: docs/endpoints.md, "DeepSeek"). The gate is held by the request's own task (no task of its own), so a
cancelled request leaves it as it found it.

Alone, a dsh counts in memory (an anyio semaphore when bounded). Once a child dsh is to run on the same endpoint,
the gate is shared (:meth:`RequestGate.share`): a private directory (mode 0700, made by the parent and removed when
its client closes) in which each request in flight of the family holds an exclusive ``flock`` on one slot file
(``slot-N``): at most ``max_parallel`` slots when bounded, as many as are needed when not. The parent hands the
directory to the child in ``initialize`` (``request_gate``, repl/serve.py). No daemon keeps the count: a process
that dies releases its locks with it (the kernel does), and the family's count is the number of slots held, each
probed with a non-blocking shared lock. A request's cost is one ``flock`` to take a slot this process held before
and one to give it back (docs/endpoints.md, "The concurrency cap").
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from itertools import count
from typing import Protocol, runtime_checkable

import anyio

__all__ = [
    "CONCURRENCY_CAP_ANSWER",
    "RequestGate",
    "concurrency_cap_message",
    "gate_directory_problem",
    "is_concurrency_cap",
    "shared_gate",
]

log = logging.getLogger(__name__)

# DeepSeek's documented 429 (its error codes page: "429 - Rate Limit Reached"), which its rate-limit page says is
# the answer once the account's concurrent requests for a model pass the cap.
CONCURRENCY_CAP_ANSWER = "Rate Limit Reached"

_SLOT = "slot-"
_KEPT_OPEN = 256  # slot files kept open for the next tries: trying one then costs one flock
_FIRST_WAIT, _LONGEST_WAIT = 0.005, 0.05  # seconds between tries while every slot is held, before the jitter
_ALONE, _UNGATED = -1, -2  # a request counted in memory only; one let through a gate that no longer works
_OPEN_SLOT = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def gate_directory_problem(path: object) -> str | None:
    """Why ``path`` is not a request gate this process may join, in words that do not repeat it; None when it
    is one: an absolute path of a directory (not a link) owned by this user with mode 0700."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return "must be an absolute path"
    try:
        info = os.lstat(path)
    except (OSError, ValueError):  # ValueError: a NUL or a lone surrogate in the path
        return "must be an existing directory"
    if not stat.S_ISDIR(info.st_mode):
        return "must be an existing directory"
    if info.st_uid != os.getuid():
        return "must be owned by this user"
    if stat.S_IMODE(info.st_mode) != 0o700:
        return "must have mode 0700"
    return None


def _locked(fd: int, how: int = fcntl.LOCK_EX) -> bool:
    """Whether a non-blocking ``flock`` got the lock (False: another open file holds it)."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _slot_index(name: str) -> int | None:
    digits = name.removeprefix(_SLOT)
    return int(digits) if name.startswith(_SLOT) and digits.isdigit() and len(digits) <= 9 else None


class _SlotDirectory:
    """The slot files of a shared gate, and this process's open ones: held by a request, or idle."""

    def __init__(self, path: str, limit: int, *, owned: bool) -> None:
        self.path = path
        self.limit = limit  # slots there are; 0: as many as requests in flight
        self.owned = owned  # made here: removed at close
        self._held: dict[int, int] = {}  # slot -> its open file, locked for one request of this process
        self._idle: dict[int, int] = {}  # slot -> its open file, unlocked (the slot may be another process's)

    @classmethod
    def create(cls, limit: int) -> _SlotDirectory:
        return cls(tempfile.mkdtemp(prefix="dsh-gate-"), limit, owned=True)  # mkdtemp: mode 0700

    def try_take(self) -> int | None:
        """A slot, locked for one request; None while every slot is held. OSError: the directory is unusable."""
        for slot, fd in list(self._idle.items()):
            if _locked(fd):
                del self._idle[slot]
                self._held[slot] = fd
                return slot
        opened = self._held.keys() | self._idle.keys()
        for slot in self._candidates():
            if slot in opened:
                continue
            fd = os.open(os.path.join(self.path, f"{_SLOT}{slot}"), _OPEN_SLOT, 0o600)
            if _locked(fd):
                self._held[slot] = fd
                return slot
            if len(self._idle) < _KEPT_OPEN:
                self._idle[slot] = fd
            else:
                os.close(fd)
        return None

    def _candidates(self) -> Iterable[int]:
        """Every slot from a random one on when bounded (processes of the family start apart); from the first
        upwards when not (the first slot free is taken, a new one made when all are held)."""
        if self.limit <= 0:
            return count()
        start = random.randrange(self.limit)
        return (*range(start, self.limit), *range(start))

    def give_back(self, slot: int) -> None:
        fd = self._held.pop(slot, None)
        if fd is None:  # closed meanwhile: nothing of it is open any more
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            os.close(fd)
            return
        if len(self._idle) < _KEPT_OPEN:
            self._idle[slot] = fd
        else:
            os.close(fd)

    def count(self) -> int:
        """The slots held now, by this process or any other of the family."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return len(self._held)
        held = len(self._held)
        for name in names:
            slot = _slot_index(name)
            if slot is not None and slot not in self._held and not self._free(slot):
                held += 1
        return held

    def _free(self, slot: int) -> bool:
        """A shared lock taken and dropped at once: it is refused only while a request holds the slot."""
        fd = self._idle.get(slot)
        if fd is not None:
            free = _locked(fd, fcntl.LOCK_SH)
            if free:
                fcntl.flock(fd, fcntl.LOCK_UN)
            return free
        try:
            fd = os.open(os.path.join(self.path, f"{_SLOT}{slot}"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return True
        try:
            return _locked(fd, fcntl.LOCK_SH)
        finally:
            os.close(fd)  # drops the probe's lock

    def close(self) -> None:
        for fd in (*self._held.values(), *self._idle.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held.clear()
        self._idle.clear()
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)


class RequestGate:
    """How many requests are in flight, and (``limit`` > 0) at most ``limit`` of them at once; the rest wait.

    ``directory``: a shared gate to join (a child dsh's, from ``initialize``); None: this process's own, shared
    with its children once :meth:`share` is called."""

    def __init__(self, limit: int = 0, directory: str | None = None) -> None:
        self.limit = limit
        self.in_flight = 0  # this process's
        self.peak = 0  # the most in flight at once, in this process
        self._slots = anyio.Semaphore(limit) if limit > 0 else None  # alone and bounded: the wait is in memory
        self._shared = None if directory is None else _SlotDirectory(directory, limit, owned=False)
        self._alone = 0  # requests in flight admitted before the gate was shared: they hold no slot of their own
        self._carried: list[int] = []  # slots taken for them when it was, given back as they end
        self._broken = False  # the shared directory failed (its parent closed it): requests go by unbounded

    @property
    def shared(self) -> bool:
        """Whether child dsh subagents share this gate (its count is then the family's)."""
        return self._shared is not None

    def share(self) -> str | None:
        """The directory a child dsh joins this gate by (made now, on the first call); None if none can be made
        (the child then counts and bounds its own requests, as before)."""
        if self._shared is None:
            try:
                shared = _SlotDirectory.create(self.limit)
            except OSError as exc:
                log.warning("no request gate for child dsh subagents: %s", type(exc).__name__)
                return None
            try:  # the requests already in flight hold slots there too, free in a new directory
                self._carried = [slot for _ in range(self._alone) if (slot := shared.try_take()) is not None]
            except OSError as exc:
                shared.close()
                log.warning("no request gate for child dsh subagents: %s", type(exc).__name__)
                return None
            self._shared = shared
        return self._shared.path

    def counted(self) -> int:
        """Requests in flight now: this process's, or with a shared gate the whole family's (slots held)."""
        if self._shared is None or self._broken:
            return self.in_flight
        return self._shared.count()

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Wait for a slot (when bounded), then count the request in flight until the block ends."""
        ticket = await self._enter()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            self._leave(ticket)

    async def _enter(self) -> int:
        """The request's slot in the shared gate, or ``_ALONE`` (counted in memory) or ``_UNGATED``."""
        if self._shared is None and self._slots is not None:
            await self._slots.acquire()
            if self._shared is not None:  # shared while this one waited: it takes a slot there instead
                self._slots.release()
        if self._shared is None:
            self._alone += 1
            return _ALONE
        return await self._take(self._shared)

    async def _take(self, shared: _SlotDirectory) -> int:
        wait = _FIRST_WAIT
        while not self._broken:
            try:
                slot = shared.try_take()
            except OSError as exc:
                self._broken = True
                log.warning("the shared request gate failed (%s): requests go on unbounded", type(exc).__name__)
                break
            if slot is not None:
                return slot
            # Every waiter of the family polls alike, this process's too: none is woken ahead of another's.
            await anyio.sleep(wait * random.uniform(0.5, 1.5))
            wait = min(wait * 2, _LONGEST_WAIT)
        return _UNGATED

    def _leave(self, ticket: int) -> None:
        if ticket == _ALONE:
            self._alone -= 1
            if self._slots is not None:
                self._slots.release()
            ticket = self._carried.pop() if self._carried else _UNGATED
        if ticket >= 0 and self._shared is not None:
            self._shared.give_back(ticket)

    def close(self) -> None:
        """Close the slot files; a gate made here has its directory removed (a child's is its parent's)."""
        if self._shared is not None:
            self._shared.close()
            self._broken = True


@runtime_checkable
class _GatedClient(Protocol):
    requests: RequestGate


def shared_gate(client: object) -> str | None:
    """The directory a child dsh on ``client``'s endpoint joins its request gate by, made on the first call; None
    for a client without a gate (the demo's) or when none can be made."""
    return client.requests.share() if isinstance(client, _GatedClient) else None


def is_concurrency_cap(status: int, provider: str | None, dialect: str) -> bool:
    """Whether an error answer is DeepSeek's concurrency cap: a 429 saying DeepSeek's words, on a ``deepseek``
    dialect endpoint (another dialect's 429 keeps the generic reading)."""
    return dialect == "deepseek" and status == 429 and (provider or "").strip() == CONCURRENCY_CAP_ANSWER


def concurrency_cap_message(model: str, in_flight: int, *, subagents: bool = False) -> str:
    """The failure's words: the account's cap for the model, and the requests in flight (this one included) of
    this dsh, or of this dsh and its child dsh subagents when they share its gate. Who answered is named by the
    turn's fix line, as for every failure."""
    requests = "request" if in_flight == 1 else "requests"
    who = "this dsh and its subagents" if subagents else "this dsh"
    return (f"{CONCURRENCY_CAP_ANSWER}: the account's cap on concurrent requests to {model} was reached; "
            f"{who} had {in_flight} {requests} in flight")
