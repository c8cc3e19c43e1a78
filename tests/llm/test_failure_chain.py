"""A failure before any response, recorded link by link and rebuilt: the same classification, the same one-line
chain and the same /why links as the real failure (dsh.llm.failure_chain, dsh.llm.replay_transport)."""

from __future__ import annotations

import json

import httpx
import pytest

from dsh.llm import chain_links, error_chain
from dsh.llm.failure_chain import MAX_LINKS, MAX_TEXT, REPLAY_FAILURE_HEADER, REPLAY_REQUEST_HEADER, chain_record
from dsh.llm.loopback.certificate import corporate_chain
from dsh.llm.loopback.fault_server import FaultServer, closed_port
from dsh.llm.loopback.replay_server import ReplayServer, load_trace
from dsh.llm.network import classify_transport
from dsh.llm.redact import Redactor
from dsh.llm.replay_transport import rebuild_chain
from dsh.llm.wire_trace import TraceWriter
from tests import canaries

pytestmark = pytest.mark.anyio


async def _failure(url: str) -> BaseException:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=2.0)) as http:
        try:
            await http.post(url)
        except httpx.HTTPError as exc:
            return exc
    raise AssertionError(f"POST {url} succeeded")


def _same(live: BaseException) -> None:
    rebuilt = rebuild_chain(json.loads(json.dumps(chain_record(live, str))))
    assert rebuilt is not None
    assert classify_transport(rebuilt) == classify_transport(live)
    assert error_chain(rebuilt) == error_chain(live)
    assert [(link.type_name, link.text) for link in chain_links(rebuilt)] == [
        (link.type_name, link.text) for link in chain_links(live)]


async def test_a_refused_connection_rebuilds_to_the_same_chain() -> None:
    with closed_port() as port:
        _same(await _failure(f"http://127.0.0.1:{port}/"))


async def test_a_certificate_failure_rebuilds_with_its_verify_code() -> None:
    async with FaultServer(tls=corporate_chain()) as server:
        live = await _failure(server.tls_url)
    _same(live)
    link = chain_record(live, str)[-1]
    assert (link["class"], link["verify_code"], link["reason"]) == (
        "ssl.SSLCertVerificationError", 20, "CERTIFICATE_VERIFY_FAILED")


def test_links_are_masked_and_bounded() -> None:
    deep: BaseException = OSError(f"key {canaries.API_KEY} " + "x" * 100_000)
    for _ in range(200):
        top = ConnectionRefusedError(111, f"via {canaries.API_KEY}")
        top.__cause__ = deep
        deep = top
    links = chain_record(deep, Redactor([canaries.API_KEY]))
    assert len(links) == MAX_LINKS
    assert all(len(link["text"]) <= MAX_TEXT and canaries.API_KEY not in json.dumps(link) for link in links)


def test_a_class_outside_the_list_is_recorded_as_its_nearest_listed_base() -> None:
    class Private(ConnectionRefusedError):
        pass

    assert chain_record(Private(111, "no"), str)[0]["class"] == "ConnectionRefusedError"
    assert rebuild_chain([{"class": "os.system", "text": "x"}]) is None
    assert rebuild_chain([{"class": "ExceptionGroup", "text": "no members"}]) is None


async def test_the_replay_server_hands_the_failure_only_to_a_replaying_dsh(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, base_url="http://api.example.invalid")
    with closed_port() as port:
        live = await _failure(f"http://127.0.0.1:{port}/")
    for _ in range(2):
        n = writer.next_exchange()
        writer.request(n, "POST", "http://api.example.invalid/chat/completions", "/chat/completions", [], b"{}")
        writer.end(n, 0.0, "error", where="connect", error=live)
    writer.close()
    trace = load_trace(str(path))
    try:
        async with ReplayServer(trace) as server, httpx.AsyncClient() as http:
            with pytest.raises(httpx.TransportError):  # curl, the openai SDK: the reset they always got
                await http.post(server.url + "/chat/completions", content=b"{}")
            marked = await http.post(server.url + "/chat/completions", content=b"{}",
                                     headers={REPLAY_REQUEST_HEADER: "1"})
    finally:
        trace.close()
    assert (marked.status_code, marked.headers[REPLAY_FAILURE_HEADER]) == (200, "1")
    assert error_chain(rebuild_chain(marked.json()["chain"])) == error_chain(live)
