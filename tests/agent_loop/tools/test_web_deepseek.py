"""DeepSeek's web tools against the loopback fault server's Search and Fetch routes (docs/endpoints.md, "DeepSeek:
web search and fetch"): the origin the key goes to, the cost line and /cost's web line, failures with fix lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.tools.registry import ToolContext
from dsh.agent_loop.tools.web import WebSettings
from dsh.agent_loop.tools.web_deepseek import DeepSeekWeb, deepseek_origin, deepseek_web_tools
from dsh.agent_loop.web_cost import billed_line, web_call_cost
from dsh.llm.loopback.fault_server import FaultServer, closed_port

pytestmark = pytest.mark.anyio


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path, turn=1, notify=lambda event: None)


def _search(api: DeepSeekWeb):  # type: ignore[no-untyped-def]
    return deepseek_web_tools(api)[0]


def test_the_origin_drops_the_path_the_query_and_any_credentials() -> None:
    assert deepseek_origin("https://user:pw@api.deepseek.com/v1?x=1") == "https://api.deepseek.com"
    assert deepseek_origin("http://127.0.0.1:8765/beta/") == "http://127.0.0.1:8765"
    assert deepseek_origin("http://[::1]:9/v1") == "http://[::1]:9"


@given(st.text(st.characters(blacklist_characters="\n"), max_size=200),
       st.floats(min_value=0, max_value=10, allow_nan=False))
def test_a_cost_line_reads_back_as_what_it_said(head: str, cost: float) -> None:
    # One line: a query or URL is shown JSON-quoted or masked, so the tools never put a newline in a head.
    line = billed_line(f"web_search {head}", cost)
    read = web_call_cost("web_search", line)
    assert read is not None and abs(read - round(cost, 5)) < 1e-9
    assert web_call_cost("run_shell", line) is None
    assert web_call_cost("web_fetch", "web_fetch http://x/: All connection attempts failed") is None  # the local one


async def test_a_search_with_results_is_billed_and_the_key_goes_to_that_origin_only(tmp_path: Path) -> None:
    async with FaultServer() as srv:
        api = DeepSeekWeb(deepseek_origin(srv.url + "/v1"), "sk-canary", WebSettings())
        out = await _search(api).run({"query": "x" * 128, "count": 50}, _ctx(tmp_path))
        assert not out.is_error, out.text
        assert out.diagnostic == f'web_search "{"x" * 128}": 50 results · $0.00075'
        assert [(r.path, r.headers["authorization"]) for r in srv.tool_requests] == [
            ("/v1/tools/search", "Bearer sk-canary")]
        assert srv.requests == [] and srv.web_billed == 1


async def test_a_refused_key_says_so_with_the_turn_s_fix_line(tmp_path: Path) -> None:
    async with FaultServer(web="unauthorized") as srv:
        out = await _search(DeepSeekWeb(srv.url, "sk-bad", WebSettings())).run({"query": "q"}, _ctx(tmp_path))
    host = srv.url.removeprefix("http://")
    assert out.is_error and out.text == (
        f'Error: web_search "q": the Search API at {host} answered HTTP 401 Unauthorized: Authentication Fails, '
        "Your api key: ****abcd is invalid\n  fix: check your API key (DEEPSEEK_API_KEY, or api_key in config.toml)")
    assert out.diagnostic is not None and out.diagnostic.endswith(" · not billed")


async def test_nothing_listening_names_base_url_in_the_fix(tmp_path: Path) -> None:
    with closed_port() as port:
        api = DeepSeekWeb(f"http://127.0.0.1:{port}", "sk", WebSettings(connect_timeout=2))
        out = await _search(api).run({"query": "q"}, _ctx(tmp_path))
    first, fix = out.text.split("\n")
    assert first.startswith(f'Error: web_search "q" via http://127.0.0.1:{port}/v1/tools/search: ')
    assert fix == (f"  fix: nothing is listening at 127.0.0.1:{port} — check base_url (--base-url, "
                   "DEEPSEEK_BASE_URL or config.toml)")


@pytest.mark.parametrize(("arguments", "words"), [
    ({"query": ""}, "query must be a non-empty string"),
    ({"query": "y" * 129}, "query is longer than 128 characters"),
    ({"query": "q", "count": 51}, "count must be a whole number from 1 to 50"),
    ({"query": "q", "count": True}, "count must be a whole number from 1 to 50"),
])
async def test_a_bad_query_is_refused_before_anything_is_sent(tmp_path: Path, arguments: dict[str, object],
                                                              words: str) -> None:
    async with FaultServer() as srv:
        with pytest.raises(ValueError, match=words):
            await _search(DeepSeekWeb(srv.url, "sk", WebSettings())).run(arguments, _ctx(tmp_path))
        assert srv.tool_requests == []
