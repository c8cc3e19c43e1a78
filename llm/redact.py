"""Masking for anything that reaches a screen, a log or a model: known secrets and key-shaped strings.

Two kinds of secret are masked (docs/architecture.md, "Redaction"):

* **known values** -- the configured API key, URL and proxy credentials, the values of environment
  variables whose names look secret (``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``AUTH``, ...). They
  are matched literally, longest first, in one pass;
* **shapes** -- strings that are credentials whatever their source: ``sk-`` / ``sk-ant-`` keys, Google
  ``AIza`` keys, GitHub ``ghp_`` / ``github_pat_`` tokens, Slack ``xox?-`` tokens, AWS ``AKIA`` ids, PEM
  private-key blocks, ``Authorization`` / ``Bearer`` / ``Basic`` values, URL userinfo and queries.

A :class:`Redactor` holds one set of known values. Every pattern is bounded, so the cost is linear in
the text whatever it holds (a hostile 10 MB line of ``a://a://…`` included). Text that arrives in pieces
(a subagent's output while it streams) goes through :class:`GrowingText`, which holds back the tail
that could still turn out to be the start of a secret. A model's answer and reasoning go through
:class:`KnownValueStream`: the known values only, masked whole however the stream splits them.
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from dsh.llm.errors import error_chain

__all__ = [
    "MASK",
    "GrowingText",
    "KnownValueStream",
    "RedactingFilter",
    "Redactor",
    "environment_secrets",
    "json_spelled_pattern",
    "looks_secret",
    "redact_text",
    "redact_url",
    "url_secrets",
]

MASK = "***"
MIN_SECRET_CHARS = 4  # shorter known values would mask ordinary text
_MIN_ENVIRONMENT_CHARS = 8  # a value found by its variable's name, not configured as a secret
_HOLD_BACK_CHARS = 256  # the longest tail of a streamed text held back when no secret is longer
_SHORT_START_CHARS = 64  # starts of known values up to this long are kept in a set (longer: bisection)

# Scheme starts are anchored (no letter before them) and every run is bounded, so no pattern rescans
# the text from each position: see the module docstring.
_SCHEME = r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}://)"
_URL_USERINFO = re.compile(_SCHEME + r"[^/\s@?#]{1,512}@")
_URL_QUERY = re.compile(r"(?P<url>" + _SCHEME + r"[^\s?#\"'<>]{0,2048})[?#][^\s\"'<>]{0,4096}")
_AUTH_HEADER = re.compile(
    r"(?i)\b(?P<name>(?:proxy-)?authorization|x-api-key|api-key)(?P<sep>\"?\s{0,8}[:=]\s{0,8}\"?)"
    r"(?:(?:bearer|basic|token|digest)\s{1,8})?[^\s\"',}]{1,4096}"
)
_SCHEME_VALUE = re.compile(r"(?i)\b(?P<scheme>bearer|basic)\s{1,8}[A-Za-z0-9._~+/=-]{1,4096}")

_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{6,}"), "sk-" + MASK),
    (re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{30,}"), "AIza" + MASK),
    (re.compile(r"(?<![A-Za-z0-9_])(?P<p>gh[pousr])_[A-Za-z0-9]{20,}"), r"\g<p>_" + MASK),
    (re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    (re.compile(r"(?<![A-Za-z0-9_-])(?P<p>xox[abposr])-[A-Za-z0-9-]{10,}"), r"\g<p>-" + MASK),
    (re.compile(r"(?<![A-Z0-9])(?P<p>AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])"), r"\g<p>" + MASK),
)
# What a word that is still being written could become: see Redactor.releasable.
_SHAPE_STARTS = (
    "sk-", "AIza", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    *(f"xox{kind}-" for kind in "abposr"), "AKIA", "ASIA", "-----BEGIN",
)
# Every pattern above needs one of these in the text (Redactor.may_mask); a new shape adds its own.
_MARKS = ("://", *_SHAPE_STARTS[:-1], "-----BEGIN ")
_TRIGGERS = ("bearer", "basic", "authorization", "api-key")  # matched case-insensitively
_HOLD_WORD = re.compile(r"[:@=?#]")  # URLs, userinfo, header and query values
_HEADER_BEFORE = re.compile(r"(?i)(bearer|basic|token|digest|authorization|api-key)\W{0,3}\s+$")
_PEM_BEGIN = re.compile(r"-----BEGIN (?P<kind>(?:[A-Z0-9]+ ){0,4})PRIVATE KEY-----")
_PEM_END = "-----END "
_PEM_MASK = "-----BEGIN {kind}PRIVATE KEY-----" + MASK
_BACKSLASHES = r"\\{1,16}"  # one escape, in JSON held in JSON strings up to 5 levels deep (1, 2, 4 … 16)

_SECRET_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|AUTH(?!OR)|CREDENTIAL|COOKIE|SESSION)")
_NOT_SECRET_NAME = re.compile(r"(?i)(_SOCK|_FILE|_PATH|_DIR|_TYPE|_MODE)$")


def redact_url(url: str) -> str:
    """``https://user:pw@h/v1?key=x`` -> ``https://***@h/v1``: no userinfo, no query, no fragment."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def url_secrets(url: str) -> tuple[str, ...]:
    """The credential-like parts of a URL (userinfo, query values), to mask even when echoed bare."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ()
    values: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        values.extend(unquote(piece) for piece in userinfo.split(":", 1))
    values.extend(value for _, value in parse_qsl(parts.query, keep_blank_values=False))
    return tuple(value for value in values if len(value) >= MIN_SECRET_CHARS)


def looks_secret(name: str) -> bool:
    """Whether an environment variable's *name* says its value is a secret (``GITHUB_TOKEN``: yes)."""
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def environment_secrets(env: Mapping[str, str], *, min_chars: int = _MIN_ENVIRONMENT_CHARS) -> tuple[str, ...]:
    """The values of ``env`` that are secrets by their variable's name, plus credentials inside URL values.

    ``min_chars`` keeps flags such as ``AUTH_ENABLED=true`` from masking every ``true``; pass
    :data:`MIN_SECRET_CHARS` for a table the user wrote on purpose (a subagent's ``env``).
    """
    found: list[str] = []
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            continue
        if "://" in value:
            found.extend(url_secrets(value))
        if looks_secret(name) and len(value) >= min_chars and not value.startswith("/"):
            found.append(value)
    return tuple(dict.fromkeys(found))


class Redactor:
    """Masks one set of known secret values plus every secret shape. Immutable; cheap to call.

    >>> Redactor(["hunter2hunter2"])("pw hunter2hunter2, key sk-abcdef123456")
    'pw ***, key sk-***'
    """

    __slots__ = ("_known", "_longest", "secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        self.secrets: tuple[str, ...] = tuple(sorted(kept, key=lambda s: (-len(s), s)))
        self._known = _known_pattern(self.secrets)
        self._longest = len(self.secrets[0]) if self.secrets else 0

    def __call__(self, text: str) -> str:
        if self._known is not None:
            text = self._known.sub(MASK, text)
        text = _mask_pem(text)
        text = _AUTH_HEADER.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", text)
        text = _SCHEME_VALUE.sub(lambda m: f"{m.group('scheme')} {MASK}", text)
        for pattern, mask in _SHAPES:
            text = pattern.sub(mask, text)
        text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
        return _URL_QUERY.sub(lambda m: m.group("url"), text)

    def may_mask(self, text: str) -> bool:
        """False only when :meth:`__call__` would return ``text`` unchanged: a cheap check for hot paths."""
        if any(mark in text for mark in _MARKS) or any(secret in text for secret in self.secrets):
            return True
        lowered = text.lower()
        return any(trigger in lowered for trigger in _TRIGGERS)

    def mask_known_counted(self, text: str) -> tuple[str, int]:
        """Only the known values, each as ``***(N chars)``; and how many were masked.

        For text a user approves as it will be written (an edit's diff, docs/configuration.md "Edits"):
        shapes are left alone there, since masking one would hide what is written, and the count
        tells the reader how much each masked spot hides.
        """
        if self._known is None:
            return text, 0
        return self._known.subn(lambda match: f"{MASK}({len(match.group(0))} chars)", text)

    def with_secrets(self, more: Iterable[str]) -> Redactor:
        """A redactor that masks these values too."""
        return Redactor((*self.secrets, *more))

    def safe_length(self, text: str) -> int:
        """How much of a still-growing text later pieces cannot turn into a secret.

        Held back: an unterminated PEM block, and the last word when it could still grow into
        something masked (the start of a known secret or of a key shape, a URL, a header value). A
        word longer than every secret is released up to that length.
        """
        cut = len(text)
        begin = _last_open_pem(text)
        if begin is not None:
            cut = begin
        start = max(0, cut - max(self._longest, _HOLD_BACK_CHARS))
        space = max(text.rfind(" ", start, cut), text.rfind("\n", start, cut), text.rfind("\t", start, cut))
        word_start = space + 1 if space >= 0 else start
        if word_start < cut and self._may_grow(text[word_start:cut], text[max(0, word_start - 24) : word_start]):
            cut = word_start
        return cut

    def _may_grow(self, word: str, before: str) -> bool:
        if _HOLD_WORD.search(word) or _HEADER_BEFORE.search(before):
            return True
        starts = _value_starts(self.secrets)
        for position in range(len(word)):
            piece = word[position:]
            if _starts_secret(piece, starts):
                return True
            boundary = position == 0 or not (word[position - 1].isalnum() or word[position - 1] in "_-")
            if boundary and any(shape.startswith(piece) or piece.startswith(shape) for shape in _SHAPE_STARTS):
                return True
        return False


class GrowingText:
    """The masked view of a text that keeps growing (a subagent's output while it runs).

    Each :meth:`view` masks the part of the text that is safe to show (:meth:`Redactor.safe_length`)
    and never shows less than before, so a reader that slices by length sees each piece once. Call
    the redactor itself on the final text.
    """

    __slots__ = ("_redactor", "_released")

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._released = ""

    def view(self, text: str) -> str:
        floor = len(self._released) if text.startswith(self._released) else 0
        self._released = text[: max(self._redactor.safe_length(text), floor)]
        return self._redactor(self._released)


class KnownValueStream:
    """One channel of a model's answer (its text or its reasoning) with the redactor's known values masked.

    Known values only, not shapes (docs/architecture.md, "Redaction"): an answer may rightly quote an
    ``sk-`` example or a URL with a query, never the configured key. The text comes in pieces that may
    split a value anywhere, so :meth:`feed` holds back the longest tail that could still be the start of
    a value and releases the rest, masked; ordinary text, whose tail cannot, is released whole at once.
    :meth:`flush` ends the text: a held tail of :data:`MIN_SECRET_CHARS` or more characters is a value the
    end of the stream (or a cancel) cut off, and is masked; a shorter one is released as it is. What the
    pieces release adds up to the whole text masked at once, whatever the split.

    Cost: each piece is read once, plus the held tail (shorter than the longest value) again.
    """

    __slots__ = ("_chars", "_firsts", "_held", "_known", "_shortest", "_starts", "_window")

    def __init__(self, redactor: Redactor) -> None:
        self._known = redactor._known
        self._starts = _value_starts(redactor.secrets)
        self._window = redactor._longest  # a longer tail is longer than every value
        self._shortest = min(map(len, redactor.secrets), default=0)  # a shorter text holds no value
        self._chars = frozenset("".join(redactor.secrets))
        self._firsts = frozenset(secret[0] for secret in redactor.secrets)
        self._held = ""

    @property
    def holding(self) -> bool:
        """Whether a tail is held back, waiting for the next piece or the end."""
        return bool(self._held)

    def feed(self, piece: str) -> str:
        """What can be shown of the text so far, masked, that was not shown before."""
        if not self._held:
            if self._firsts.isdisjoint(piece):
                return piece  # no value can begin in it: the hot path does nothing else
            text = piece
        else:
            text = self._held + piece
        released, self._held = self._release(text, self._tail_start(text))
        return released

    def flush(self) -> str:
        """The end of the text: what was held back, masked (a value cut off at 4+ characters included)."""
        text, self._held = self._held, ""
        pieces: list[str] = []
        while text:
            cut = self._tail_start(text)
            released, rest = self._release(text, cut)
            pieces.append(released)
            if len(rest) == len(text) - cut:  # all of the rest could start a value: the end cut it off
                pieces.append(MASK if len(rest) >= MIN_SECRET_CHARS else rest)
                break
            text = rest  # a value ran past the cut: what follows it is decided the same way
        return "".join(pieces)

    def _tail_start(self, text: str) -> int:
        """Where the longest tail of ``text`` that is the start of a known value begins; len(text) if none."""
        end = len(text)
        if text[-1] not in self._chars:
            return end
        firsts, starts = self._firsts, self._starts
        for at in range(max(0, end - self._window), end):
            if text[at] in firsts and _starts_secret(text[at:], starts):
                return at
        return end

    def _release(self, text: str, cut: int) -> tuple[str, str]:
        """``text`` masked up to ``cut`` (and to the end of a value that starts before it), and the rest.

        A match that starts before ``cut`` is final: no later piece can make a longer value match there.
        """
        assert self._known is not None
        match = self._known.search(text) if len(text) >= self._shortest else None
        if match is None or match.start() >= cut:
            return text[:cut], text[cut:]
        pieces: list[str] = []
        position = 0
        while match is not None and match.start() < cut:
            pieces += (text[position : match.start()], MASK)
            position = match.end()
            match = self._known.search(text, position)
        end = max(position, cut)
        pieces.append(text[position:end])
        return "".join(pieces), text[end:]


@functools.lru_cache(maxsize=64)
def _known_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    # Longest first, so a key that contains another configured value is masked whole.
    return re.compile("|".join(re.escape(s) for s in secrets)) if secrets else None


@functools.lru_cache(maxsize=64)
def json_spelled_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """The secrets in every spelling a JSON string allows, which decodes back to the secret.

    JSON may write any character as ``\\uXXXX`` (either case of hex; a surrogate pair beyond the BMP),
    ``/`` as ``\\/``, ``"`` and ``\\`` escaped. A run of backslashes stands for the same escape in JSON
    held in a JSON string (tool arguments), and that in another. Each character is a small group of fixed
    alternatives, so matching stays linear in the text (docs/record-replay.md, "What a recording holds").
    """
    kept = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=lambda s: (-len(s), s))
    if not kept:
        return None
    return re.compile("|".join("".join(_json_spellings(char) for char in secret) for secret in kept))


def _json_spellings(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escape = _BACKSLASHES + "u" + _hex4(high) + _BACKSLASHES + "u" + _hex4(low)
    else:
        escape = _BACKSLASHES + "u" + _hex4(code)
    spellings = [re.escape(char), escape]
    if char in '/"\\':
        spellings.append(_BACKSLASHES + re.escape(char))
    return "(?:" + "|".join(spellings) + ")"


def _hex4(code: int) -> str:
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{code:04x}")


class _ValueStarts(NamedTuple):
    """The known values indexed for "is this the start of one?": short starts in a set, the rest sorted."""

    short: frozenset[str]  # every start of every value, up to _SHORT_START_CHARS long
    ordered: tuple[str, ...]  # the values, sorted: longer starts are found by bisection


@functools.lru_cache(maxsize=64)
def _value_starts(secrets: tuple[str, ...]) -> _ValueStarts:
    short = frozenset(s[:n] for s in secrets for n in range(1, min(len(s), _SHORT_START_CHARS) + 1))
    return _ValueStarts(short, tuple(sorted(secrets)))


def _starts_secret(piece: str, starts: _ValueStarts) -> bool:
    """Whether ``piece`` is the start (or the whole) of a known value: one set lookup, or a binary search."""
    if len(piece) <= _SHORT_START_CHARS:
        return piece in starts.short
    at = bisect.bisect_left(starts.ordered, piece)
    return at < len(starts.ordered) and starts.ordered[at].startswith(piece)


def _mask_pem(text: str) -> str:
    """Each private-key block becomes its header plus the mask (an unterminated one runs to the end)."""
    if "-----BEGIN " not in text:
        return text
    pieces: list[str] = []
    position = 0
    for match in _PEM_BEGIN.finditer(text):
        if match.start() < position:
            continue  # inside a block already masked
        pieces.append(text[position : match.start()])
        pieces.append(_PEM_MASK.format(kind=match.group("kind")))
        end = text.find(_PEM_END, match.end())
        if end < 0:
            return "".join(pieces)
        close = text.find("-----", end + len(_PEM_END))
        position = len(text) if close < 0 else close + len("-----")
    pieces.append(text[position:])
    return "".join(pieces)


def _last_open_pem(text: str) -> int | None:
    """Where the last private-key block without an end line starts, or None."""
    begin = text.rfind("-----BEGIN ")
    if begin < 0 or not _PEM_BEGIN.match(text, begin) or text.find(_PEM_END, begin) >= 0:
        return None
    return begin


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask credentials in free text: the given secrets plus every shape (see :class:`Redactor`)."""
    return _redactor(tuple(secrets))(text)


@functools.lru_cache(maxsize=64)
def _redactor(secrets: tuple[str, ...]) -> Redactor:
    return Redactor(secrets)


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record once and masks it, so no handler sees a secret."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.redactor = Redactor(secrets)

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.redactor.secrets

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg = self.redactor(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.msg += " | " + self.redactor(error_chain(record.exc_info[1]))
            record.exc_info = None
            record.exc_text = None
        return True
