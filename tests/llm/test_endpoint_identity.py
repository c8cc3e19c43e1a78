"""Whom the client names in its messages, relays' in-stream error events, and what gateways send
(docs/endpoints.md; docs/failure-kit.md). The real client against the loopback fault server,
which says ``server: dsh-fault-server`` (unnamed) unless a behaviour answers as LiteLLM or llama.cpp's server.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import Finish, LlmError, Usage, chain_links, error_chain
from dsh.llm.endpoint import Endpoint, endpoint_for_url
from dsh.llm.errors import Evidence
from dsh.llm.loopback.fault_server import Behaviour
from dsh.llm.network import FailureDetail
from dsh.llm.stream_decoder import RELAY_MESSAGE_LIMIT, RELAY_PAYLOAD_LIMIT, StreamDecoder, relay_failure
from tests import canaries
from tests.llm.conftest import unnamed

pytestmark = pytest.mark.anyio

LITELLM = Behaviour("http_502_html", gateway="litellm")

# --- who is named -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "name", "address"),
    [
        ("https://api.deepseek.com", "DeepSeek", "api.deepseek.com:443"),
        ("https://api.deepseek.com/v1", "DeepSeek", "api.deepseek.com:443"),
        ("https://openrouter.ai/api/v1", "OpenRouter", "openrouter.ai:443"),
        ("https://ollama.com/v1", "Ollama", "ollama.com:443"),
        ("http://127.0.0.1:4000", None, "127.0.0.1:4000"),
        ("http://localhost:11434/v1", None, "localhost:11434"),  # a local Ollama says nothing: never by port
        ("http://localhost:1234/v1", None, "localhost:1234"),  # LM Studio's default port: not an identity
        ("https://deepseek.example.com", None, "deepseek.example.com:443"),  # DeepSeek only on its own host
        ("http://[::1]:8000/v1", None, "[::1]:8000"),
    ],
)
def test_a_base_url_names_the_service_only_on_its_own_host(url, name, address) -> None:
    assert endpoint_for_url(url) == Endpoint(name, address)


@pytest.mark.parametrize(
    ("headers", "name"),
    [
        ({"x-litellm-call-id": "c1"}, "LiteLLM"),
        ({"X-LiteLLM-Version": "1.108.0"}, "LiteLLM"),
        ({"Server": "llama.cpp"}, "llama.cpp"),
        ({"server": "uvicorn"}, None),  # vLLM's, and LiteLLM's, and every FastAPI app's
        ({"server": "dsh-fault-server"}, None),
        ({}, None),
    ],
)
def test_an_unnamed_endpoint_learns_its_name_from_headers_that_say_so(headers, name) -> None:
    assert Endpoint(None, "127.0.0.1:4000").learn(headers) == Endpoint(name, "127.0.0.1:4000")


def test_deepseek_stays_deepseek_whatever_headers_say() -> None:
    deepseek = endpoint_for_url("https://api.deepseek.com")
    assert deepseek.learn({"x-litellm-call-id": "c1"}) is deepseek


def test_every_phrase_named_and_unnamed() -> None:
    named, anon = Endpoint("LiteLLM", "127.0.0.1:4000"), Endpoint(None, "127.0.0.1:4000")
    url = "http://127.0.0.1:4000"
    assert [
        named.request_failed(url), named.stream_failed(url, " via proxy http://p:3128"), named.aborted(),
        named.no_headers("8s"), named.no_content("8s"), named.idle("8s"), named.http_error(502), named.no_body(),
        named.finish_reason("content_filter"), named.empty_completion(),
    ] == [
        "LiteLLM API request to http://127.0.0.1:4000 failed",
        "LiteLLM API stream from http://127.0.0.1:4000 via proxy http://p:3128 failed",
        "LiteLLM request aborted by caller",
        "no response headers from LiteLLM within 8s",
        "no content from LiteLLM within 8s (keep-alives only)",
        "LiteLLM stream idle timeout after 8s",
        "LiteLLM API error (HTTP 502)",
        "LiteLLM API returned no response body",
        'LiteLLM stream finished with finish_reason "content_filter"',
        "LiteLLM API returned an empty completion",
    ]
    assert [
        anon.request_failed(url), anon.stream_failed(url, " via proxy http://p:3128"), anon.aborted(),
        anon.no_headers("8s"), anon.no_content("8s"), anon.idle("8s"), anon.http_error(502), anon.no_body(),
        anon.finish_reason("content_filter"), anon.empty_completion(),
    ] == [
        "request to the endpoint at http://127.0.0.1:4000 failed",
        "stream from the endpoint at http://127.0.0.1:4000 via proxy http://p:3128 failed",
        "request aborted by caller",
        "no response headers from the endpoint at 127.0.0.1:4000 within 8s",
        "no content from the endpoint at 127.0.0.1:4000 within 8s (keep-alives only)",
        "stream idle timeout after 8s from the endpoint at 127.0.0.1:4000",
        "API error (HTTP 502) from the endpoint at 127.0.0.1:4000",
        "the endpoint at 127.0.0.1:4000 returned no response body",
        'stream from the endpoint at 127.0.0.1:4000 finished with finish_reason "content_filter"',
        "the endpoint at 127.0.0.1:4000 returned an empty completion",
    ]


# --- through the real client --------------------------------------------------------------------


async def test_deepseek_is_named_only_for_its_api_host(fault_server, make_client, stream_outcome):
    fault_server.push("http_502_html", "http_502_html")
    shown_as_deepseek = make_client(fault_server.url, shown_as=("https://api.deepseek.com", None))
    assert (await stream_outcome(shown_as_deepseek)).failure.message == "DeepSeek API error (HTTP 502)"
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert error.message == f"API error (HTTP 502) from {unnamed(fault_server.url)}"
    assert (error.endpoint, error.endpoint_name) == (fault_server.url, None)


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (LITELLM, "LiteLLM API error (HTTP 502)"),
        (Behaviour("http_502_html", server="llama.cpp"), "llama.cpp API error (HTTP 502)"),
        (Behaviour("empty_body", gateway="litellm"), "LiteLLM API returned no response body"),
        (Behaviour("content_filter", gateway="litellm"), 'LiteLLM stream finished with finish_reason "content_filter"'),
    ],
)
async def test_a_server_that_says_who_it_is_is_named(fault_server, make_client, stream_outcome, behaviour, message):
    fault_server.push(behaviour)
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert error.message == message


async def test_a_learnt_name_is_kept_for_a_later_failure_before_any_response(fault_server, make_client,
                                                                                 stream_outcome):
    fault_server.push(Behaviour("text", gateway="litellm"), "reset_before_headers", "stall_before_headers")
    client = make_client(fault_server.url, first_token_timeout=0.3)
    assert (await stream_outcome(client)).error is None
    refused = (await stream_outcome(client)).failure
    assert refused.message == f"LiteLLM API request to {fault_server.url} failed"
    assert refused.endpoint_name == "LiteLLM"
    stalled = (await stream_outcome(client)).failure
    assert stalled.message == "no response headers from LiteLLM within 0.3s"


async def test_a_gateway_call_id_is_the_request_id(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("http_503", gateway="litellm", request_id="litellm-call-7"))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.request_id) == ("SERVER", "litellm-call-7")


@pytest.mark.parametrize(
    ("params", "seconds"),
    [
        ({"retry_after": "none", "retry_after_ms": 1500}, 1.5),
        ({"retry_after": "3", "retry_after_ms": 250}, 0.25),  # the precise one first, as the OpenAI SDK reads them
        ({"retry_after": "none", "provider_retry_after": 7}, 7.0),
        ({"retry_after": "none", "provider_retry_after_ms": 800}, 0.8),
        ({"retry_after": "none", "retry_after_ms": "soon", "provider_retry_after": 4}, 4.0),  # garbage is skipped
        ({"retry_after": "none", "retry_after_ms": 0}, None),
        ({"retry_after": "none"}, None),
    ],
)
async def test_retry_hints_from_every_header_a_gateway_sends(fault_server, make_client, stream_outcome, params,
                                                             seconds):
    fault_server.push(Behaviour("http_429", **params))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.retry_after_s) == ("RATE_LIMIT", seconds)


async def test_openai_shaped_usage_counts_cache_hits(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("text", text="hi", usage_shape="openai", gateway="litellm"))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert outcome.events[-2:] == [Usage(12, 1, 13, 8, 4, 0), Finish("stop")]  # the misses are the rest


# --- a gateway's upstream refusing the gateway's own key ------------------------------------------


async def test_a_gateway_upstream_401_is_the_gateways_credential(fault_server, make_client, stream_outcome):
    fault_server.push("gateway_upstream_401")
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.status, error.detail, error.endpoint_name) == (
        "AUTH", 401, FailureDetail.UPSTREAM_AUTH, "LiteLLM")
    assert "DeepseekException - Authentication Fails" in error.message


async def test_a_plain_401_is_the_users_key(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("http_401", gateway="litellm"))  # LiteLLM refusing the user's own key
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.detail) == ("AUTH", None)


# --- relays' error events -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "code", "status"),
    [
        ({}, "SERVER", 500),
        ({"code": "429", "type": "rate_limit_error"}, "RATE_LIMIT", 429),
        ({"code": "none", "type": "rate_limit_error"}, "RATE_LIMIT", None),
        ({"code": "400", "type": "invalid_request_error",
          "message": "This model's maximum context length is 131072 tokens"}, "CONTEXT_WINDOW_EXCEEDED", 400),
        ({"code": "context_length_exceeded", "type": "invalid_request_error"}, "CONTEXT_WINDOW_EXCEEDED", None),
        ({"code": "401", "type": "auth_error"}, "AUTH", 401),
        ({"code": "none", "type": "authentication_error"}, "AUTH", None),
        ({"code": "403", "type": "none"}, "AUTH", 403),
        ({"code": "400", "type": "invalid_request_error"}, "INVALID_REQUEST", 400),
        ({"code": "402", "type": "none"}, "QUOTA", 402),
        ({"code": "503", "type": "service_unavailable"}, "SERVER", 503),
        ({"code": "none", "type": "something_new"}, "SERVER", None),  # unknown: the relay's own failure
    ],
)
async def test_a_relay_error_event_is_a_failure_with_the_relays_words(fault_server, make_client, stream_outcome,
                                                                     params, code, status):
    message = params.get("message", "litellm.InternalServerError: upstream connection lost")
    fault_server.push(Behaviour("error_event", gateway="litellm", **params))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.message, error.status, error.request_id) == (code, message, status, "fault-0001")
    assert error_chain(error) == message  # the payload is for /why, not the failure line
    links = chain_links(error)
    assert [link.type_name for link in links] == ["dsh.llm.errors.LlmError", "dsh.llm.errors.Evidence"]
    payload = json.loads(links[1].text.removeprefix("error event: "))
    assert payload["error"]["message"] == message


async def test_a_relay_error_after_content_keeps_the_content_before_it(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("error_event", text="Half an answer", message="upstream reset"))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert "".join(getattr(event, "text", "") for event in outcome.events) == "Half an answer"
    assert (outcome.failure.code, outcome.failure.message) == ("SERVER", "upstream reset")


async def test_a_relay_error_without_a_message_says_who_sent_it(fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("error_event", message=""))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert error.message == f"{unnamed(fault_server.url)} sent an error event in the stream"


async def test_a_relay_echoing_the_key_is_masked_in_the_line_and_in_why(fault_server, make_client, stream_outcome):
    echo = f"upstream refused Bearer {canaries.API_KEY} and {canaries.UPSTREAM_KEY}\n\x1b[2Jagain"
    fault_server.push(Behaviour("error_event", message=echo))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    rendered = [error.message, error_chain(error), *(link.text for link in chain_links(error))]
    for text in rendered:
        assert canaries.API_KEY not in text and canaries.UPSTREAM_KEY not in text
        assert "\n" not in text


# --- fuzz: any relay error object is one masked, bounded line --------------------------------------

_hostile_text = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.sampled_from(["\n", "\r", "\u2028", "\x1b", "\ud800", "\udfff", " ", "a", "\\", '"']),
            max_size=50),
    st.sampled_from([canaries.API_KEY, f"Bearer {canaries.API_KEY}", canaries.UPSTREAM_KEY]).flatmap(
        # Key shapes are masked where they stand as words (dsh.llm.redact); the configured key anywhere.
        lambda key: st.tuples(st.text(max_size=600), st.just(key), st.text(max_size=600)).map(" ".join)),
    st.integers(1, 6).map(lambda n: ("x" * 997 + canaries.API_KEY) * n),
)
_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _hostile_text
_error_objects = st.one_of(
    _hostile_text,
    st.fixed_dictionaries({}, optional={"message": _json_scalars, "type": _json_scalars, "code": _json_scalars,
                                        "status": _json_scalars, "param": _json_scalars}),
    st.recursive(_json_scalars, lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8),
)


@settings(max_examples=300, deadline=None)
@given(_error_objects)
def test_fuzz_any_relay_error_is_one_masked_bounded_line(error: object) -> None:
    failure = relay_failure(error, Endpoint(None, "127.0.0.1:4000"), (canaries.API_KEY,), "req-1")
    evidence = failure.__cause__
    assert isinstance(evidence, Evidence)
    for text, limit in ((failure.message, RELAY_MESSAGE_LIMIT), (str(evidence), RELAY_PAYLOAD_LIMIT + 20)):
        assert text and len(text) <= limit
        assert canaries.API_KEY not in text and canaries.UPSTREAM_KEY not in text
        assert not any(ch in text for ch in "\n\r\u2028\u2029")
        assert not any("\ud800" <= ch <= "\udfff" for ch in text)
    assert failure.code  # always one a caller can route on


@settings(max_examples=200, deadline=None)
@given(_error_objects)
def test_fuzz_a_relay_error_event_on_the_wire_is_always_the_failure(error: object) -> None:
    if not error or error == {}:
        return  # an empty "error" is not an error event (a chunk may carry "error": null)
    body = b"data: " + json.dumps({"error": error}).encode() + b"\n\n"
    decoder = StreamDecoder(secrets=(canaries.API_KEY,))
    with pytest.raises(LlmError) as caught:
        decoder.feed(body)
    assert canaries.API_KEY not in error_chain(caught.value)
    assert all(canaries.API_KEY not in link.text for link in chain_links(caught.value))
