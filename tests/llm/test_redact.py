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


# --- shapes, known values, streams ------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dsh.llm import Redactor  # noqa: E402
from dsh.llm.redact import GrowingText, environment_secrets, looks_secret  # noqa: E402

SHAPES = {
    "sk-ant-api03-" + "a1B2" * 10: "sk-***",
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6": "AIza***",
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8": "ghp_***",
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop": "github_pat_***",
    "xoxb-" + "123456789012-abcdefghijkl": "xoxb-***",
    "AKIA" + "IOSFODNN7EXAMPLE": "AKIA***",
}


def test_every_key_shape_is_masked_and_keeps_its_prefix() -> None:
    redact = Redactor()
    for secret, mask in SHAPES.items():
        assert redact(f"token: {secret}.") == f"token: {mask}."


def test_a_pem_private_key_block_is_masked_whole() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabc\n-----END RSA PRIVATE KEY-----"
    assert Redactor()(f"key:\n{pem}\nafter") == "key:\n-----BEGIN RSA PRIVATE KEY-----***\nafter"
    assert Redactor()("-----BEGIN PRIVATE KEY-----\nMIIE cut off") == "-----BEGIN PRIVATE KEY-----***"


def test_authorization_headers_lose_their_credentials_whatever_the_scheme() -> None:
    redact = Redactor()
    assert redact("Authorization: Basic dXNlcjpwYXNz") == "Authorization: ***"
    assert redact('{"Proxy-Authorization": "Bearer abc.def"}') == '{"Proxy-Authorization": "***"}'
    assert redact("curl -H 'x-api-key: plainvalue123'") == "curl -H 'x-api-key: ***'"


def test_known_values_are_masked_longest_first() -> None:
    redact = Redactor(["secretvalue", "secretvalue-extended"])
    assert redact("a secretvalue-extended b secretvalue") == "a *** b ***"
    assert Redactor(["abc"]).secrets == ()  # too short to mask without masking ordinary text


def test_environment_secrets_are_found_by_name() -> None:
    env = {
        "GITHUB_TOKEN": "tok-0123456789",
        "MY_SERVICE_PASSWORD": "hunter2hunter2",
        "AUTH_ENABLED": "true",  # too short to be a secret found by its name
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",  # a path, not a secret
        "HOME": "/home/user",
        "HTTPS_PROXY": "http://user:proxypass@127.0.0.1:3128",
    }
    assert environment_secrets(env) == ("tok-0123456789", "hunter2hunter2", "user", "proxypass")
    assert looks_secret("ANTHROPIC_API_KEY") and looks_secret("GH_AUTH") and not looks_secret("PATH")
    assert not looks_secret("GIT_AUTHOR_NAME")  # a name, not a credential


def test_hostile_input_costs_linear_time() -> None:
    # Patterns that rescan from every position are quadratic: 200 000 characters would take minutes.
    for hostile in ("a://" * 50_000, "a" * 200_000 + "://", "Authorization: " * 20_000, "sk-" * 60_000):
        assert len(Redactor(["knownsecret"])(hostile)) <= len(hostile)


SECRET = "canarysecret0042"
alphabet = st.sampled_from([*"ab :/-_\nsk", SECRET[:4], SECRET[4:9], SECRET[9:]])


@settings(max_examples=500, deadline=None)
@given(st.lists(alphabet, max_size=30), st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_a_growing_text_never_shows_a_secret_and_never_shows_less(pieces: list[str], cuts: list[int]) -> None:
    text = "".join(pieces) + " " + SECRET + " end"
    redact = Redactor([SECRET])
    growing = GrowingText(redact)
    shown = ""
    for cut in sorted({*cuts, len(text)}):
        now = growing.view(text[:cut])
        assert SECRET not in now
        assert now.startswith(shown)  # a reader slicing by length sees each piece once
        shown = now
    assert SECRET not in redact(text)


def test_a_word_that_cannot_become_a_secret_is_shown_at_once() -> None:
    redact = Redactor(["hunter2secret"])
    assert redact.safe_length("working on it") == len("working on it")
    for growing in ("key sk-ab", "key hun", "see http://a", "Bearer abc", "x"):
        assert redact.safe_length(growing) == growing.rfind(" ") + 1, growing


fragments = st.sampled_from(
    [*"aZ09 :/@?=#-_\n\"'", "sk-", "AIza", "ghp_", "github_pat_", "xoxb-", "AKIA", "ASIA", "://", "Bearer ",
     "basic ", "Authorization: ", "x-api-key=", "-----BEGIN PRIVATE KEY-----", "-----END ", SECRET, "0123456789"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(fragments, max_size=40))
def test_may_mask_is_false_only_when_nothing_would_change(pieces: list[str]) -> None:
    redact = Redactor([SECRET])
    text = "".join(pieces)
    if not redact.may_mask(text):
        assert redact(text) == text
    for secret, mask in SHAPES.items():
        assert redact.may_mask(f"x {secret} y") and mask in redact(f"x {secret} y")
