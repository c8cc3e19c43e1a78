"""Random JSON-RPC frames for fuzzing the readers, each tagged by construction.

*benign*: blank lines, notifications, requests from the peer, responses to ids nobody waits for (ids
are >= 1000 or ``"peer-..."`` strings, so they never answer a real request). *bad*: not JSON, not an
object, bad ids, wrong member types, NaN, deep nesting, an oversized line, invalid UTF-8. *unknown*: raw
random bytes (which may hold several lines, or by chance be a benign frame).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

__all__ = ["BAD", "BENIGN", "CUTS", "FRAME", "FRAMES", "MAX_LINE", "UNKNOWN", "wire"]

MAX_LINE = 4096
BENIGN, BAD, UNKNOWN = "benign", "bad", "unknown"

# -- frames -------------------------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=12),
                     st.floats(allow_nan=False, allow_infinity=False))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                     max_leaves=12)
_params = st.one_of(st.dictionaries(st.text(max_size=6), _json, max_size=4), st.lists(_json, max_size=4))
_method = st.text(min_size=1, max_size=20)
_foreign_id = st.one_of(st.integers(1000, 2**31), st.text(min_size=1, max_size=8).map(lambda t: "peer-" + t))


def _dump(value: Any) -> bytes:
    # ASCII-escaped: a lone surrogate in generated text stays valid JSON (raw, it would be invalid UTF-8).
    return json.dumps(value).encode()


def _with_jsonrpc(members: dict[str, Any], keep: bool) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **members} if keep else members


def _notification() -> st.SearchStrategy[tuple[str, bytes]]:
    return st.builds(
        lambda method, params, keep, has_params: (BENIGN, _dump(_with_jsonrpc(
            {"method": method, **({"params": params} if has_params else {})}, keep))),
        _method, _params, st.booleans(), st.booleans())


def _peer_request() -> st.SearchStrategy[tuple[str, bytes]]:
    return st.builds(
        lambda request_id, method, params: (BENIGN, _dump({"jsonrpc": "2.0", "id": request_id, "method": method,
                                                           "params": params})),
        _foreign_id, st.sampled_from(["echo", "fail", "crash", "unknown/method"]), _params)


def _stray_response() -> st.SearchStrategy[tuple[str, bytes]]:
    result = st.builds(lambda i, r: {"jsonrpc": "2.0", "id": i, "result": r}, _foreign_id, _json)
    error = st.builds(lambda i, c, m: {"jsonrpc": "2.0", "id": i, "error": {"code": c, "message": m}},
                      st.one_of(st.none(), _foreign_id), st.integers(-40000, 40000), st.text(max_size=30))
    return st.one_of(result, error).map(lambda frame: (BENIGN, _dump(frame)))


_BAD_FIXED = [
    b"{", b"not json at all", b'{"jsonrpc": "2.0", "method": "x"', b"[1, 2, 3]", b"42", b'"a string"', b"null",
    b"{}", b'{"result": 1}', b'{"jsonrpc": "1.0", "method": "x"}', b'{"jsonrpc": "2.0", "method": ""}',
    b'{"jsonrpc": "2.0", "method": 7}', b'{"jsonrpc": "2.0", "method": "x", "params": 5}',
    b'{"jsonrpc": "2.0", "id": true, "method": "x"}', b'{"jsonrpc": "2.0", "id": [1], "result": 1}',
    b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"}', b'{"jsonrpc": "2.0", "id": 1001}',
    b'{"jsonrpc": "2.0", "id": 1001, "error": "boom"}', b'{"jsonrpc": "2.0", "id": 1001, "error": {"code": "x"}}',
    b'{"jsonrpc": "2.0", "id": 1001, "error": {"code": true, "message": "m"}}',
    b'{"jsonrpc": "2.0", "method": "x", "params": NaN}', b'{"jsonrpc": "2.0", "id": Infinity, "result": 1}',
    b"\xff\xfe\x00garbage", b'{"jsonrpc": "2.0", "method": "\xc3\x28"}', b"[" * 5000, b"{" * 3000,
    b"x" * (MAX_LINE + 1),
]


def _bad() -> st.SearchStrategy[tuple[str, bytes]]:
    def not_json(text: str) -> tuple[str, bytes]:
        return BAD, b"{{" + text.encode("utf-8", "surrogatepass").replace(b"\n", b" ")  # never valid JSON

    non_object = _json.filter(lambda v: not isinstance(v, dict)).map(lambda v: (BAD, _dump(v)))
    return st.one_of(st.sampled_from(_BAD_FIXED).map(lambda raw: (BAD, raw)), st.text(max_size=30).map(not_json),
                     non_object)


_blank = st.sampled_from([b"", b"\r", b"   ", b"\t"]).map(lambda raw: (BENIGN, raw))
_binary = st.binary(min_size=1, max_size=60).map(lambda raw: (UNKNOWN, raw))
FRAME = st.one_of(_blank, _notification(), _peer_request(), _stray_response(), _bad(), _binary)
FRAMES = st.lists(FRAME, max_size=20)
CUTS = st.lists(st.integers(0, 1 << 20), max_size=10)


def wire(frames: list[tuple[str, bytes]]) -> bytes:
    return b"".join(raw + b"\n" for _, raw in frames)
