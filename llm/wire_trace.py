"""``--record``: a masked wire trace of every model exchange, written as the bytes arrive.

The trace is JSON lines (docs/record-replay.md): a versioned header, then per exchange ``n`` a
``request`` record, a ``response`` record (status and headers), one ``data`` record per piece of
body with its offset ``t`` in seconds from the request's start, and an ``end`` record saying how
the exchange ended (``complete``, ``error`` with the transport error's class and where it struck,
or ``closed`` when dsh itself stopped reading: a deadline, a cancel).

Everything is masked before it is written: the configured secrets (the key, base-URL and proxy
credentials), ``Authorization``-like headers, key-shaped strings, URL credentials and queries. The
file is created 0600. The failure capsule's ring (:mod:`dsh.llm.exchange_ring`) is fed raw records
instead, masked by :meth:`TraceWriter.finish` only when a report reads them (docs/reporting.md).
The recorder hooks in below httpx's client as a transport that tees the byte stream, so the live
stream sees the same bytes at the same time; memory is bounded by one body line.

The transport that feeds the trace is :mod:`dsh.llm.wire_recorder` (it is built on httpx; this module is not).
"""

from __future__ import annotations

import argparse
import base64
import errno
import hashlib
import json
import math
import os
import re
import stat
import time
import zlib
from collections.abc import Iterable
from typing import Any

from dsh.llm._version import __version__
from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError, error_chain
from dsh.llm.exchange_ring import ExchangeRing
from dsh.llm.failure_chain import chain_record
from dsh.llm.redact import MASK, Redactor, json_spelled_pattern, redact_url

__all__ = ["CAPSULE_TYPE", "TRACE_TYPE", "TRACE_VERSION", "BodyTee", "TraceFileError", "TraceWriter", "not_regular",
           "parse_speed", "regular_file_problem"]

TRACE_TYPE = "dsh-wire-trace"
TRACE_VERSION = 1
CAPSULE_TYPE = "dsh-failure-capsule"  # a trace with a report record after its header (docs/reporting.md)
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"})
_HELD_LIMIT = 64 * 1024  # a body line longer than this is written in pieces (the memory bound)
_PIECE = 256 * 1024  # the most bytes one inflate step may produce
# A body line the redactor cannot change (Redactor.may_mask) is written as it is: the redaction regexes
# cost ~0.4 µs a byte, and a 40 MB stream must not slow down for its recording.
_BODY_LIMIT = 64 << 20  # body bytes recorded per exchange; past it (a gzip bomb, say) the trace notes the cut


class TraceFileError(HarnessError):
    """A ``--record`` (or ``/report``) path dsh will not write: one line naming it and why (exit 2)."""

    def __init__(self, path: str, problem: str, what: str = "record") -> None:
        super().__init__(f"{what} file {path} cannot be written: {problem}", ErrorCode.CONFIG)


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
)  # fmt: skip


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot take a trace (``it is a FIFO, not a regular file``), found without opening it.

    None when it does not exist or is a regular file. A symbolic link is refused like the session log's
    (docs/record-replay.md): a link planted where a trace goes must not aim the trace at another file.
    """
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return regular_file_problem(mode)


def regular_file_problem(mode: int) -> str | None:
    """``it is a FIFO, not a regular file`` for a file of ``mode`` that is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "something else")
    return f"it is {kind}, not a regular file"


def _open_regular(path: str, what: str = "record") -> int:
    """``path`` opened for writing, created 0600 and emptied; only ever a regular file.

    Checked before opening (opening a device can act on it), then opened ``O_NOFOLLOW | O_NONBLOCK``
    (a FIFO swapped in between answers at once instead of blocking start-up) and checked again on the
    descriptor, so nothing can be swapped in between.
    """
    problem = not_regular(path)
    if problem is None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise
            fd = -1  # swapped for a link, a FIFO or a folder since the check
        if fd >= 0:
            problem = regular_file_problem(os.fstat(fd).st_mode)
            if problem is None:
                os.set_blocking(fd, True)
                os.ftruncate(fd, 0)
                return fd
            os.close(fd)
        problem = problem or not_regular(path) or "it is not a regular file"
    raise TraceFileError(path, problem, what)


def _escape_marks(secrets: Iterable[str]) -> tuple[str, ...]:
    """The escapes a JSON spelling of one of ``secrets`` must hold (json_spelled_pattern)."""
    joined = "".join(secrets)
    return ("\\u", *(f"\\{char}" for char in '/"\\' if char in joined)) if joined else ()


_IMAGE_DATA = b"data:image/"
# An image in a request body: a data URL's base64, ended by the JSON string's quote (or by a ring's cut).
_IMAGE_URL = re.compile(rb"(data:image/[A-Za-z0-9.+-]{1,40};base64,)([A-Za-z0-9+/=]*)")


def omit_images(body: bytes) -> bytes:
    """``body`` with each image's bytes replaced by their size and sha256 (docs/prompt.md, "Images"): a record or
    a report says which image was sent, not what it showed, unless ``keep_images`` is on. An image a ring's cut
    left partial is named as cut."""

    def placeholder(match: re.Match[bytes]) -> bytes:
        encoded = match.group(2)
        try:
            data = base64.b64decode(encoded, validate=True)
        except ValueError:
            return match.group(1) + b"<image omitted: cut>"
        digest = hashlib.sha256(data).hexdigest().encode()
        return match.group(1) + b"<image omitted: %d bytes, sha256 %s>" % (len(data), digest)

    return _IMAGE_URL.sub(placeholder, body)


class TraceWriter:
    """Masks each record with ``secrets`` and hands it on: to the ``--record`` file at ``path`` (one ``write(2)``
    per record) and to ``ring``, the capsule's memory (:mod:`dsh.llm.exchange_ring`), either or both.

    A ring alone is handed a request's and a body's records raw, to be masked by :meth:`finish` when read: the
    stream does not pay for masking what a report almost never asks for. With a file, the ring keeps the
    file's masked line."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, secrets: Iterable[str] = (),
                 base_url: str = "", proxy: str | None = None, timeouts: dict[str, float] | None = None,
                 ring: ExchangeRing | None = None, kind: str = TRACE_TYPE, dialect: str | None = None,
                 keep_images: bool = False) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.keep_images = keep_images  # else a request's images are written as their hash (omit_images)
        self.ring = ring
        self.secrets = tuple(s for s in secrets if s)
        self._redactor = Redactor(self.secrets)
        # The secrets spelled with JSON escapes (a hostile server's \u0073k-…): see json_spelled_pattern.
        self._spelled = json_spelled_pattern(self._redactor.secrets)
        self._escape_marks = _escape_marks(self._redactor.secrets)
        self._exchanges = 0
        if ring is not None:
            # What it holds raw is masked as this writer masks a file's records (a report may add secrets).
            ring.render, ring.secrets = self.finish, self.secrets
        self.header: dict[str, Any] = {
            "type": kind, "version": TRACE_VERSION, "dsh": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "base_url": redact_url(base_url) if base_url else "",
            "proxy": redact_url(proxy) if proxy else None,
            "timeouts": dict(timeouts or {}),  # a replay uses them, so its deadlines fire as these did
            "dialect": dialect,  # and this, so it reads the answers (and continues a cut answer) as this run did
        }
        what = "report" if kind == CAPSULE_TYPE else "record"
        self._fd: int | None = _open_regular(self.path, what) if self.path is not None else None
        if self._fd is None:
            return
        try:
            if os.fstat(self._fd).st_mode & 0o077:
                os.fchmod(self._fd, 0o600)  # an older, looser file of the same name is tightened
            self._write(self.header, first=True)
        except BaseException:
            self.close()
            raise

    def mask(self, text: str) -> str:
        if self._spelled is not None and self._may_spell(text):
            text = self._spelled.sub(MASK, text)
        return self._redactor(text)

    def _may_spell(self, text: str) -> bool:
        """Whether ``text`` holds an escape that could spell a secret (a cheap check before the pattern)."""
        return any(mark in text for mark in self._escape_marks)

    def next_exchange(self) -> int:
        self._exchanges += 1
        return self._exchanges

    def _write(self, record: dict[str, Any], *, first: bool = False) -> None:
        if self._fd is None and (self.ring is None or first):
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        data = line.encode("utf-8", "surrogatepass")
        if self.ring is not None and not first:
            self.ring.add(record, data)
        if self._fd is None:
            return
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError:
            if first:
                raise  # a file that cannot take its header is a start-up failure
            self.close()  # later, a full disk ends the recording, never the turn

    def _emit(self, raw: dict[str, Any]) -> None:
        """A record of unmasked fields: masked now for the file, or kept raw by a ring alone (see :meth:`finish`)."""
        if self._fd is not None:
            self._write(self.finish(raw))
        elif self.ring is not None:
            self.ring.add(raw)

    def finish(self, raw: dict[str, Any]) -> dict[str, Any]:
        """A raw request, response or data record masked with this writer's secrets, as ``--record`` writes it: a
        request's URL, path, headers and body, a response's headers, a body's bytes (as text, or base64 when
        they are not UTF-8); the fields keep their order."""
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key == "url":
                out[key] = self.mask(redact_url(value))
            elif key == "path":
                out[key] = self.mask(value)
            elif key == "headers":
                out[key] = self._headers(value)
            elif key == "body" and isinstance(value, bytes):
                out[key] = self.mask(value.decode("utf-8", "replace"))
            elif key == "raw":
                out.update(self._body_text(value))
            else:
                out[key] = value
        return out

    def keeps_body(self, n: int) -> bool:
        """Whether exchange ``n``'s next body bytes go anywhere: a ring alone that has cut the exchange keeps
        no more of it, so the rest of a flood is not masked for nothing (docs/reporting.md)."""
        return self._fd is not None or (self.ring is not None and self.ring.keeps(n))

    def copy(self, record: dict[str, Any]) -> None:
        """Write ``record`` (one a ring kept, or a capsule's own) with every string in it masked again with
        this writer's secrets: a capsule knows more of them than the client did (docs/reporting.md)."""
        self._write(self._masked(record))

    def _masked(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._mask_body(value)
        if isinstance(value, dict):
            return {key: self._masked(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._masked(item) for item in value]
        return value

    def request(self, n: int, method: str, url: str, path: str, headers: list[tuple[str, str]],
                body: bytes) -> None:
        record: dict[str, Any] = {"type": "request", "n": n, "method": method, "url": url, "path": path,
                                  "headers": headers}
        if not self.keep_images and _IMAGE_DATA in body:
            body = omit_images(body)  # first: what is left may fit the ring whole
        if self._fd is None and self.ring is not None and self.ring.cuts_request(len(body)):
            # A ring alone keeps a big body's head only: hold and mask no more than that (a 100 MB tool
            # argument sent back must not cost copies of itself for a record that keeps 256 KiB).
            body, record["note"] = self.ring.request_head(body), "cut"
        record["body"] = body
        self._emit(record)

    def response(self, n: int, t: float, status: int, headers: list[tuple[str, str]],
                 decoded: str | None = None) -> None:
        record: dict[str, Any] = {"type": "response", "n": n, "t": round(t, 6), "status": status,
                                  "headers": self._headers(headers)}
        if decoded:
            record["decoded"] = decoded  # the body below is inflated; its Content-Encoding was dropped
        self._emit(record)

    def _mask_body(self, text: str) -> str:
        """:meth:`mask`, applied only to the lines that could hold something to mask."""
        if not self._suspect(text):
            return text
        if len(text) <= 4096 or "-----BEGIN " in text:  # a PEM block spans lines: masked whole
            return self.mask(text)
        return "\n".join(self.mask(line) if self._suspect(line) else line for line in text.split("\n"))

    def _suspect(self, text: str) -> bool:
        return self._redactor.may_mask(text) or self._may_spell(text)

    def data(self, n: int, t: float, chunk: bytes) -> None:
        self._emit({"type": "data", "n": n, "t": round(t, 6), "raw": chunk})

    def _body_text(self, chunk: bytes) -> dict[str, str]:
        """A piece of body masked: ``text``, or ``b64`` when it is not UTF-8."""
        try:
            return {"text": self._mask_body(chunk.decode())}
        except UnicodeDecodeError:
            masked = self._mask_body(chunk.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            return {"b64": base64.b64encode(masked).decode()}

    def end(self, n: int, t: float, how: str, *, where: str | None = None,
            error: BaseException | None = None, note: str | None = None) -> None:
        record: dict[str, Any] = {"type": "end", "n": n, "t": round(t, 6), "how": how}
        if where:
            record["where"] = where
        if error is not None:
            record["error"] = type(error).__name__
            record["message"] = self.mask(error_chain(error))
            if where in ("connect", "send", "headers"):  # before any response: what a replay raises again
                record["chain"] = chain_record(error, self.mask)
        if note:
            record["note"] = note
        self._write(record)

    def finding(self, n: int, text: str) -> None:
        """What dsh found out about exchange ``n``'s failure (a certificate's issuer and subject), for a replay
        that cannot find it out again (docs/record-replay.md)."""
        self._write({"type": "finding", "n": n, "text": self.mask(text)})

    def _headers(self, headers: list[tuple[str, str]]) -> list[list[str]]:
        return [[name, MASK if name.lower() in _SECRET_HEADERS else self.mask(value)] for name, value in headers]

    def close(self) -> None:
        """Closes the file; the ring stays readable (``/report`` after the client closed)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class BodyTee:
    """Cuts a body into whole lines for masking (a secret split across two reads is still masked).

    A line's bytes are written when its newline arrives, with that arrival's offset; what is left at the
    end is written then. A compressed body is inflated for the trace in bounded pieces.
    """

    def __init__(self, trace: TraceWriter, n: int, start: float, encoding: str | None) -> None:
        self.trace, self.n, self.start = trace, n, start
        self._held = b""
        self._inflate: Any = None
        self.undecodable = False
        self.cut = False  # more than _BODY_LIMIT bytes: the rest is not recorded
        self._recorded = 0
        if encoding == "gzip":
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":
            self._inflate = zlib.decompressobj()

    def _decoded(self, chunk: bytes) -> Iterable[bytes]:
        if self._inflate is None:
            yield chunk
            return
        if self.undecodable:
            return
        while chunk and not self._inflate.eof:
            try:
                piece = self._inflate.decompress(chunk, _PIECE)
            except zlib.error:
                self.undecodable = True  # the client reports it; the trace keeps what inflated
                return
            chunk = self._inflate.unconsumed_tail
            if piece:
                yield piece

    def feed(self, chunk: bytes) -> None:
        if self.cut or not self.trace.keeps_body(self.n):
            return
        t = time.monotonic() - self.start
        for piece in self._decoded(chunk):
            self._recorded += len(piece)
            if self._recorded > _BODY_LIMIT:
                self.cut = True
                self.flush()
                return
            held = self._held + piece
            cut = held.rfind(b"\n") + 1
            if not cut and len(held) > _HELD_LIMIT:
                cut = len(held)
            if cut:
                self.trace.data(self.n, t, held[:cut])
            self._held = held[cut:]

    def flush(self) -> None:
        if self._held:
            self.trace.data(self.n, time.monotonic() - self.start, self._held)
            self._held = b""


def parse_speed(text: str) -> float:
    """A replay's speed (``--replay-speed``, ``dsh replay-server --speed``): a positive, finite factor."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r:.40}")
    return value
