"""Redaction with canary values: URL userinfo and query, bearer tokens, sk- keys, the configured key."""

from __future__ import annotations

import logging

from dsh.llm import RedactingFilter, redact_text, redact_url

CANARY_USER = "canaryuser7731"
CANARY_PASSWORD = "canarypw9912"
CANARY_QUERY = "canaryquery5521"
CANARY_KEY = "sk-canary0123456789abcdefXYZ"


def test_url_loses_userinfo_and_query() -> None:
    assert redact_url("https://user:pw@h/v1?key=x") == "https://***@h/v1"
    assert redact_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1"
    assert redact_url(f"https://{CANARY_USER}@api.example/v1#{CANARY_QUERY}") == "https://***@api.example/v1"


def test_text_masks_every_canary() -> None:
    text = (
        f"failed https://{CANARY_USER}:{CANARY_PASSWORD}@h/v1?key={CANARY_QUERY} "
        f"Authorization: Bearer {CANARY_KEY} and key {CANARY_KEY} and custom cfg-{CANARY_PASSWORD}"
    )
    masked = redact_text(text, secrets=[CANARY_PASSWORD])
    for canary in (CANARY_USER, CANARY_PASSWORD, CANARY_QUERY, CANARY_KEY, "canary0123"):
        assert canary not in masked
    assert "https://***@h/v1" in masked


def test_configured_key_without_sk_shape() -> None:
    assert redact_text("key is plainsecretvalue!", secrets=["plainsecretvalue"]) == "key is ***!"


def test_log_filter_masks_message_args_and_exceptions(caplog) -> None:
    logger = logging.getLogger("dsh.test.redact")
    logger.addFilter(RedactingFilter([CANARY_PASSWORD]))
    try:
        with caplog.at_level(logging.INFO, logger="dsh.test.redact"):
            try:
                raise RuntimeError(f"boom {CANARY_KEY}")
            except RuntimeError:
                logger.exception("request to %s with %s", f"https://u:{CANARY_PASSWORD}@h/?q=1", CANARY_KEY)
    finally:
        logger.filters.clear()
    rendered = caplog.text
    assert "boom sk-***" in rendered
    for canary in (CANARY_PASSWORD, CANARY_KEY):
        assert canary not in rendered
