"""Text from the wire, made safe to keep: no lone UTF-16 surrogate survives decoding.

JSON may spell a character outside the Basic Multilingual Plane as a surrogate pair of ``\\uXXXX``
escapes, and a server may split that pair across two stream chunks (``\\ud83d`` in one delta,
``\\ude00`` in the next). Python's ``json`` joins a pair only inside one string, so a split pair
arrives as two lone surrogates, and a truly lone one (``"\\ud800"``) arrives as itself. Neither can
be encoded as UTF-8: left alone, one would break the terminal writer, the session log and every
later request body. So the decoding boundaries fix it once (see docs/architecture.md, "Hostile
text"):

* :class:`SurrogateJoiner` rejoins a pair split across deltas of one stream;
* :func:`scrub_surrogates` turns whatever is still lone into U+FFFD;
* :func:`loads` is ``json.loads`` for a whole document (a JSON-RPC line, a session-log line) whose
  strings come back scrubbed; :func:`loads_lines` reads many such lines at once (a session log's batch).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from itertools import accumulate
from typing import Any

__all__ = ["REPLACEMENT", "SurrogateJoiner", "loads", "loads_lines", "scrub_surrogates"]

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
# A surrogate can only come out of json.loads through an escape: raw UTF-8 cannot encode one.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_ESCAPED_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def scrub_surrogates(text: str) -> str:
    """``text`` with adjacent surrogate halves joined and every lone one replaced by U+FFFD.

    Free for ASCII text, one regex scan for the rest.
    """
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _is_high(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


def _is_low(char: str) -> bool:
    return "\udc00" <= char <= "\udfff"


class SurrogateJoiner:
    """Per-channel delta cleaner: a high surrogate ending one delta waits for the next delta's low one.

    ``channel`` is any hashable key (text, reasoning, one tool call's arguments), so deltas of other
    channels in between do not break a pair. :meth:`flush` hands back what is still held, as U+FFFD.
    """

    def __init__(self) -> None:
        self._held: dict[object, str] = {}

    def feed(self, channel: object, text: str) -> str:
        if not self._held and text.isascii():
            return text
        held = self._held.pop(channel, None)
        if held is not None:
            if text and _is_low(text[0]):
                pair = (ord(held) - 0xD800) * 0x400 + (ord(text[0]) - 0xDC00) + 0x10000
                text = chr(pair) + text[1:]
            else:
                text = REPLACEMENT + text
        if text and _is_high(text[-1]):
            self._held[channel] = text[-1]
            text = text[:-1]
        return scrub_surrogates(text)

    def flush(self) -> dict[object, str]:
        """The channels that still hold half a pair, each with its U+FFFD; nothing is held after."""
        held = {channel: REPLACEMENT for channel in self._held}
        self._held.clear()
        return held


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return scrub_surrogates(value)
    if isinstance(value, list):
        return [_scrub_value(item) for item in value]
    if isinstance(value, dict):
        return {scrub_surrogates(key): _scrub_value(item) for key, item in value.items()}
    return value


def loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads`` (same ``options``), with every string in the result free of lone surrogates.

    The walk over the result only happens when the document spells a surrogate escape at all.
    """
    value = json.loads(text, **options)
    if isinstance(text, bytes):
        # A substring test runs at memory speed; the regex only where an escape could start.
        if b"\\ud" not in text and b"\\uD" not in text:
            return value
        return _scrub_value(value) if _ESCAPED_SURROGATE_BYTES.search(text) else value
    if "\\ud" not in text and "\\uD" not in text:
        return value
    return _scrub_value(value) if _ESCAPED_SURROGATE.search(text) else value


def loads_lines(lines: list[bytes]) -> list[Any]:
    """Each line's JSON value, as :func:`loads` would give it, parsed in one ``json.loads`` of them all.

    One parse of the joined lines is several times faster than one per line. Only a line that spells a
    surrogate escape has its value walked: a batch of a session log that quotes ``\\ud83d`` somewhere
    (source code about surrogates, say) would otherwise be walked whole. ValueError when the joined lines
    are not valid JSON; the caller checks that there is one value per line.
    """
    if not lines:
        return []
    joined = b"[" + b",".join(lines) + b"]"
    values: list[Any] = json.loads(joined)
    if b"\\ud" not in joined and b"\\uD" not in joined:
        return values
    if len(values) != len(lines):  # not one value per line: the caller falls back; nothing leaves unscrubbed
        return [_scrub_value(value) for value in values]
    starts: list[int] | None = None  # where each line begins in ``joined``, once a line needs finding
    scrubbed = -1
    for match in _ESCAPED_SURROGATE_BYTES.finditer(joined):
        at = match.start()
        run = at
        while run > 0 and joined[run - 1] == 0x5C:  # backslashes before it: an even run escapes nothing more
            run -= 1
        if (at - run) % 2:
            continue  # ``\\ud8..``: an escaped backslash, then the letters
        if starts is None:
            starts = list(accumulate((len(line) + 1 for line in lines), initial=1))
        index = bisect_right(starts, at) - 1
        if index != scrubbed:
            values[index] = _scrub_value(values[index])
            scrubbed = index
    return values
