"""The always-on memory of the last exchanges with the endpoint, for a failure capsule (docs/reporting.md).

A :class:`~dsh.llm.wire_trace.TraceWriter` feeds it. Alone (no ``--record`` file), it hands over each record
*raw*: the request's and the body's bytes as they went and came, nothing masked or serialized, so a turn pays
no more than a copy of the bytes for a ring it will almost never read. The records are masked and serialized
when they are read (:meth:`ExchangeRing.lines`), that is when a report is written: with the writer's secrets,
or with whatever ``render`` the reader passes (a capsule's, which knows every secret dsh knows then). Beside a
``--record`` file, the writer masks each record for the file anyway and the ring keeps that same line.

The ring keeps whole exchanges (request, response, data, end, and any other record an exchange has) and
drops the oldest exchange first once the total passes ``cap`` bytes (a raw record counts its bytes and a
little for its fields). One exchange bigger than the cap keeps its request (its body cut when the request
alone is over half the cap), its response and its end, and as much of its body as fits; the end then says
``"note":"cut"``. Nothing is written anywhere until a capsule is asked for.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DEFAULT_RING_BYTES", "MAX_RING_BYTES", "ExchangeRing", "Render"]

DEFAULT_RING_BYTES = 4 << 20  # 4 MiB: a long turn's exchanges, never a session's history
MAX_RING_BYTES = 64 << 20  # the most report_ring_bytes may ask for
_MASK_MARGIN = 64 * 1024  # bytes masked past a request body's cut point (far longer than any secret)
_FIELDS = 96  # what a raw record's fields other than its bytes count for (its JSON keys, n, t, type)

Render = Callable[[dict[str, Any]], dict[str, Any]]  # a raw record to its masked form


def _as_is(record: dict[str, Any]) -> dict[str, Any]:
    return record


class _Held:
    """One exchange's records in the order they came: serialized lines, or raw records not yet masked."""

    __slots__ = ("cut", "items", "size")

    def __init__(self) -> None:
        self.items: list[bytes | dict[str, Any]] = []
        self.size = 0
        self.cut = False  # body records were left out to keep the cap


class ExchangeRing:
    """The last exchanges' records, at most about ``cap`` bytes of them (one end record over)."""

    def __init__(self, cap: int = DEFAULT_RING_BYTES) -> None:
        self.cap = cap
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self.size = 0
        self.last = 0  # the highest exchange number seen: a turn's exchanges are those after its start's
        # How a raw record is masked when read, and with what secrets: set by the TraceWriter feeding it.
        self.render: Render = _as_is
        self.secrets: tuple[str, ...] = ()

    def add(self, record: dict[str, Any], line: bytes | None = None) -> None:
        """Keep ``record``: masked with ``line`` its serialized form (newline included), or raw (``line`` None:
        masked when read). Header records are not kept."""
        n = record.get("n")
        if not isinstance(n, int):
            return
        held = self._held.get(n)
        if held is None:
            held = self._held[n] = _Held()
            self.last = max(self.last, n)
        kind = record.get("type")
        size = len(line) if line is not None else _raw_size(record)
        item: bytes | dict[str, Any] = line if line is not None else record
        if kind == "request" and line is not None and (size > self.cap // 2 or record.get("note") == "cut"):
            item = self._cut_request(record)
            size = len(item)
        elif kind == "request" and record.get("note") == "cut":
            size = min(size, self.cap // 16 + _FIELDS)  # cut to that when read (_cut_request)
        elif kind == "data" and (held.cut or held.size + size > self.cap):
            held.cut = True
            return
        elif kind == "end" and held.cut and not record.get("note"):
            cut = {**record, "note": "cut"}
            item = _dumps(cut) if line is not None else cut
        held.items.append(item)
        held.size += size
        self.size += size
        self._evict(n)

    def cuts_request(self, size: int) -> bool:
        """Whether a request whose body is ``size`` bytes will have its body cut here."""
        return size > self.cap // 2

    def request_head(self, body: bytes) -> bytes:
        """The head of a body that will be cut: what is kept, and a margin beyond it, so that a secret across the
        cut point is whole when the head is masked (the cut then falls in masked text)."""
        return body[:self.cap // 16 + _MASK_MARGIN]

    def keeps(self, n: int) -> bool:
        """Whether more body records of exchange ``n`` would be kept (not once it has been cut)."""
        held = self._held.get(n)
        return held is None or not held.cut

    def _cut_request(self, record: dict[str, Any]) -> bytes:
        """The (masked) request with its body cut to fit (a replay answers by order, never by the body)."""
        body = record.get("body")
        keep = max(self.cap // 16, 0)
        cut = {**record, "body": body[:keep] if isinstance(body, str) else "", "note": "cut"}
        return _dumps(cut)

    def _evict(self, newest: int) -> None:
        """Drop whole exchanges, oldest first, until the cap holds (the newest one always stays)."""
        while self.size > self.cap and len(self._held) > 1:
            oldest = next(iter(self._held))
            if oldest == newest:
                break
            self.size -= self._held.pop(oldest).size

    def exchanges(self) -> list[int]:
        """The numbers of the exchanges held, oldest first."""
        return list(self._held)

    def lines(self, after: int, render: Render | None = None) -> Iterator[tuple[int, bytes]]:
        """``(n, line)`` for every record of the exchanges numbered above ``after``, in order, each masked and
        serialized: a raw one now, by ``render`` (default: the feeding writer's masking)."""
        render = render or self.render
        for n, held in list(self._held.items()):
            if n > after:
                for item in list(held.items):
                    yield n, item if isinstance(item, bytes) else self._line(render(item))

    def _line(self, record: dict[str, Any]) -> bytes:
        return self._cut_request(record) if record.get("type") == "request" and record.get("note") == "cut" \
            else _dumps(record)


def _raw_size(record: dict[str, Any]) -> int:
    """What a raw record counts for: its bytes (a body, a request's URL and headers) and its fields."""
    size = _FIELDS
    for value in record.values():
        if isinstance(value, bytes | str):
            size += len(value)
        elif isinstance(value, list):  # headers: (name, value) pairs
            size += sum(len(name) + len(text) + 8 for name, text in value)
    return size


def _dumps(record: dict[str, Any]) -> bytes:
    """A record serialized as :class:`~dsh.llm.wire_trace.TraceWriter` serializes it."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass")
