"""The one sanitizer for untrusted text on a terminal, and :func:`one_line`, which keeps a text on its line.

A module of its own, importing only ``re``, so that the first prompt can be drawn before the renderer
and the event vocabulary are imported (docs/architecture.md, "Start-up and lazy imports").
"""

from __future__ import annotations

import re

__all__ = ["one_line", "sanitize"]

# Everything that could drive the terminal or hide text: C0 controls but TAB and LF, DEL, C1 controls,
# format characters (bidi controls U+202A-U+202E and U+2066-U+2069, zero-width U+200B-U+200F, U+2060,
# U+FEFF, tags U+E0000...), line/paragraph separators, lone surrogates and the invisible Hangul fillers.
# tests/repl/test_render.py checks the class against Unicode categories Cc, Cf, Zl, Zp and Cs.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ud800-\udfff\ufeff\uffa0"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
_UNSAFE_ASCII = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # the same class within ASCII: ~4x faster to scan


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return chr(0x2400 + code)  # ␛ for ESC, ␇ for BEL ...
    if code == 0x7F:
        return "\u2421"
    return f"<U+{code:04X}>"


def sanitize(text: str) -> str:
    """Make untrusted text inert and visible on a terminal: CRLF -> LF, every unsafe character -> a picture.

    Idempotent, and its output holds no character of the unsafe class. The sinks call it
    (:func:`terminal_text`); nothing else needs to.
    """
    text = text.replace("\r\n", "\n")
    return (_UNSAFE_ASCII if text.isascii() else _UNSAFE).sub(_picture, text)


_SPACE_RUN = re.compile(r"\s*\n\s*")


def one_line(text: str) -> str:
    """``text`` on one line: each line break, with the blanks around it, becomes one space."""
    return _SPACE_RUN.sub(" ", text)
