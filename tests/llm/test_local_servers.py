"""Local servers as endpoints (issue 43): each server's context-overflow answer is CONTEXT_WINDOW_EXCEEDED, the
context size a server says it serves is read (the turn-end line's naming: tests/repl/test_local_server_cli.py).

The answers are fixtures taken from each server's source or a reported run (tests/llm/fixtures/context_overflow.json
names the source of each), served verbatim by the loopback fault server to the real client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.usage import UsageTally, context_fill
from dsh.llm import ErrorCode
from dsh.llm.context_size import context_from_models, context_from_props, server_context
from dsh.llm.http_status import code_for_status, error_kinds, provider_message
from dsh.llm.loopback.fault_server import Behaviour, FaultServer

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "context_overflow.json").read_text(encoding="utf-8"))
OVERFLOW = FIXTURES[0]  # llama.cpp's


def _answer(fixture: dict[str, Any]) -> Behaviour:
    headers = fixture["headers"]
    return Behaviour("http_error", status=fixture["status"], body=json.dumps(fixture["body"]),
                     content_type=headers["content-type"], server=headers.get("server", "dsh-fault-server"))


def _text(fixture: dict[str, Any]) -> str:
    body = fixture["body"]
    return body["error"] if isinstance(body.get("error"), str) else body.get("error", body)["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("fixture", FIXTURES, ids=[fixture["name"] for fixture in FIXTURES])
async def test_each_servers_context_overflow_is_context_window_exceeded(fixture, fault_server, make_client,
                                                                        stream_outcome):
    fault_server.push(_answer(fixture))
    error = (await stream_outcome(make_client(fault_server.url))).failure
    assert (error.code, error.status, error.message) == (ErrorCode.CONTEXT_WINDOW_EXCEEDED, 400, _text(fixture))
    assert error.endpoint_name == ("llama.cpp" if fixture["name"] == "llama.cpp" else None)


def test_the_error_type_alone_says_context_overflow() -> None:
    body = json.dumps({"error": {"code": 400, "message": "no room", "type": "exceed_context_size_error"}}).encode()
    assert error_kinds(body) == ("exceed_context_size_error",)
    assert code_for_status(400, "no room", error_kinds(body)) == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    # The kind does not outrank a refused key or a rate limit, and another 400 stays what it was.
    assert code_for_status(401, "no room", ("context_length_exceeded",)) == ErrorCode.AUTH
    assert code_for_status(429, "slow down", ("context_length_exceeded",)) == ErrorCode.RATE_LIMIT
    assert code_for_status(400, "Invalid 'messages' type: expected array", ("invalid_request_error",)) == (
        ErrorCode.INVALID_REQUEST)


def test_a_string_error_is_the_servers_message() -> None:
    assert provider_message(b'{"error": "Unexpected endpoint or method. (POST /chat/completions)"}') == (
        "Unexpected endpoint or method. (POST /chat/completions)")
    assert provider_message(b'{"error": "   "}') is None
    assert provider_message(b'{"error": "\\ud800 lone"}') == "\ufffd lone"
    assert provider_message(b"[" * 100_000) is None  # too deep to parse: no message, no crash
    assert error_kinds(b'{"error": "text"}') == ()


def test_the_context_size_is_read_where_each_server_says_it() -> None:
    assert context_from_props({"default_generation_settings": {"n_ctx": 256}, "total_slots": 1}) == 256
    assert context_from_props({"n_ctx": 4096}) == 4096  # older llama-server builds
    vllm = {"object": "list", "data": [{"id": "qwen", "object": "model", "max_model_len": 32768}]}
    assert context_from_models(vllm, "qwen") == (32768, "vLLM", "max_model_len")
    studio = {"data": [{"id": "a", "context_length": 8192}, {"id": "b", "loaded_context_length": 4096}]}
    assert context_from_models(studio, "b") == (4096, "LM Studio", "loaded_context_length")
    assert context_from_models(studio, "c") is None  # several models, none of them this one: no guess


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=30), inner,
                                                                                 max_size=4)))
def test_any_json_gives_a_positive_size_or_none(body: Any) -> None:
    for found in (context_from_props(body), context_from_props({"default_generation_settings": body})):
        assert found is None or (type(found) is int and 0 < found < 1 << 31)
    assert context_from_models(body, "m") is None or context_from_models(body, "m")[0] > 0


def test_booleans_negatives_and_huge_numbers_are_not_sizes() -> None:
    for value in (True, 0, -256, 1 << 40, 256.5, "256"):
        assert context_from_props({"n_ctx": value}) is None


@pytest.mark.anyio
async def test_props_is_asked_on_the_origin_only_of_llama_cpp(make_client) -> None:
    props = {"default_generation_settings": {"n_ctx": 256}}
    async with FaultServer(props=props, server="llama.cpp") as srv:
        client = make_client(srv.url + "/v1")
        found = await server_context(client, "deepseek-v4-flash", name="llama.cpp", models={})
        assert found is not None and (found.tokens, found.where, found.flag) == (
            256, "GET /props n_ctx", "--ctx-size (-c) of llama-server")
        assert [r.path for r in srv.account_requests] == ["/props"]
        assert await server_context(client, "deepseek-v4-flash", name=None, models={}) is None
        assert [r.path for r in srv.account_requests] == ["/props"]  # an unnamed server is not asked /props


def test_the_context_fill_uses_the_servers_size() -> None:
    tally = UsageTally(requests=1, context=128, model="deepseek-v4-flash")
    table = context_fill(tally)
    tally.window = 256
    assert context_fill(tally) == 0.5 and table != 0.5
