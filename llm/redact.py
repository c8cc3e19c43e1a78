"""Masking for anything that reaches a screen or a log: URL credentials, bearer tokens, API keys."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

__all__ = ["MASK", "RedactingFilter", "redact_text", "redact_url", "url_secrets"]

MASK = "***"

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@?#]+@")
_URL_QUERY = re.compile(r"(?P<url>[A-Za-z][A-Za-z0-9+.-]*://[^\s?#\"'<>]*)[?#][^\s\"'<>]*")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_AUTH_HEADER = re.compile(r"(?i)(authorization|x-api-key|api-key)(\"?\s*[:=]\s*\"?)[^\s\",}]+")
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{6,}")


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
    return tuple(value for value in values if len(value) >= 4)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask credentials in free text: configured secrets, bearer/authorization values, sk- keys, URLs."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _SK_KEY.sub("sk-" + MASK, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _URL_QUERY.sub(lambda m: m.group("url"), text)


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record once and masks it, so no handler sees a secret."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg = redact_text(message, self.secrets)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            from dsh.llm.errors import error_chain

            record.msg += " | " + redact_text(error_chain(record.exc_info[1]), self.secrets)
            record.exc_info = None
            record.exc_text = None
        return True
