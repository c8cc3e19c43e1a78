"""The always-on memory of the last exchanges with the endpoint, for a failure capsule (docs/reporting.md).

A :class:`~dsh.llm.wire_trace.TraceWriter` feeds it the same masked records it writes to a ``--record``
file, already serialized: one format, one masking. The ring keeps whole exchanges (request, response,
data, end, and any other record an exchange has) and drops the oldest exchange first once the total
passes ``cap`` bytes. One exchange bigger than the cap keeps its request (its body cut when the request
alone is over half the cap), its response and its end, and as much of its body as fits; the end then says
``"note":"cut"``. Nothing is written anywhere until a capsule is asked for.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

__all__ = ["DEFAULT_RING_BYTES", "MAX_RING_BYTES", "ExchangeRing"]

DEFAULT_RING_BYTES = 4 << 20  # 4 MiB: a long turn's exchanges, never a session's history
MAX_RING_BYTES = 64 << 20  # the most report_ring_bytes may ask for
_MASK_MARGIN = 64 * 1024  # bytes masked past a request body's cut point (far longer than any secret)


class _Held:
    """One exchange's serialized records, in the order they came."""

    __slots__ = ("cut", "lines", "size")

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.size = 0
        self.cut = False  # body records were left out to keep the cap


class ExchangeRing:
    """The last exchanges' masked records, at most about ``cap`` bytes of them (one end record over)."""

    def __init__(self, cap: int = DEFAULT_RING_BYTES) -> None:
        self.cap = cap
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self.size = 0
        self.last = 0  # the highest exchange number seen: a turn's exchanges are those after its start's

    def add(self, record: dict[str, Any], line: bytes) -> None:
        """Keep ``record`` (``line`` is its serialized form, newline included); header records are not kept."""
        n = record.get("n")
        if not isinstance(n, int):
            return
        held = self._held.get(n)
        if held is None:
            held = self._held[n] = _Held()
            self.last = max(self.last, n)
        kind = record.get("type")
        if kind == "request" and (len(line) > self.cap // 2 or record.get("note") == "cut"):
            line = self._cut_request(record)
        elif kind == "data":
            if held.cut or held.size + len(line) > self.cap:
                held.cut = True
                return
        elif kind == "end" and held.cut and not record.get("note"):
            line = _dumps({**record, "note": "cut"})
        held.lines.append(line)
        held.size += len(line)
        self.size += len(line)
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
        """The request with its body cut to fit (a replay answers by order, never by the body)."""
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

    def lines(self, after: int) -> Iterator[tuple[int, bytes]]:
        """``(n, line)`` for every record of the exchanges numbered above ``after``, in order."""
        for n, held in list(self._held.items()):
            if n > after:
                for line in held.lines:
                    yield n, line


def _dumps(record: dict[str, Any]) -> bytes:
    """A record serialized as :class:`~dsh.llm.wire_trace.TraceWriter` serializes it."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass")
