"""Usage numbers from a hostile server: every count is one dsh can believe (``0 <= n < 2**53``) or 0.

``prompt_tokens = 10**400`` used to end the REPL (``integer division result too large for a float``), and a
negative one showed ``context -95.4% · $-0.1500``. The client now drops any value that is not such a count
at parse time, as if the field were missing (docs/reliability.md, "Attacks on the renderer and usage").
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import Finish, TextDelta, Usage
from dsh.llm.events import USAGE_COUNT_LIMIT
from dsh.llm.loopback.fault_server import Behaviour
from dsh.llm.stream_decoder import _ChunkParser

pytestmark = pytest.mark.anyio

COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens")
NOT_COUNTS = {
    "10**400": 10**400,
    "2**53": 2**53,
    "-1": -1,
    "-95 400 000": -95_400_000,
    "1.5": 1.5,
    "12.0": 12.0,
    "1e400 (inf)": math.inf,
    "NaN": math.nan,
    "true": True,
    "string": "12",
    "null": None,
    "list": [3],
    "object": {"n": 3},
}


def every_count(value: object) -> dict[str, object]:
    """Every count in both shapes: DeepSeek's fields and OpenAI's ``*_details`` objects."""
    return {**dict.fromkeys(COUNTS, value), "completion_tokens_details": {"reasoning_tokens": value},
            "prompt_tokens_details": {"cached_tokens": value}}


@pytest.mark.parametrize("value", NOT_COUNTS.values(), ids=NOT_COUNTS.keys())
async def test_a_value_that_is_not_a_count_arrives_as_zero(value, fault_server, make_client, stream_outcome):
    fault_server.push(Behaviour("text", text="hi", usage=every_count(value)))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.error is None
    assert outcome.events == [TextDelta("hi"), Usage(), Finish("stop")]


async def test_the_largest_believable_count_arrives_as_sent(fault_server, make_client, stream_outcome):
    largest = USAGE_COUNT_LIMIT - 1
    fault_server.push(Behaviour("text", text="hi", usage=every_count(largest)))
    outcome = await stream_outcome(make_client(fault_server.url))
    assert outcome.events[1] == Usage(*[largest] * 6)
    assert float(largest) == largest  # below 2**53 every count is exact as a float: cost and fill stay exact


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
    | st.sampled_from([10**400, -(10**400), 2**53, 2**53 - 1, 2**63, -(2**63)]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*COUNTS, "completion_tokens_details", "prompt_tokens_details"]), _json_values,
                       min_size=1))
def test_fuzz_every_parsed_count_is_believable(usage: dict[str, object]) -> None:
    out: list[object] = []
    _ChunkParser().parse(json.dumps({"choices": [], "usage": usage}), out)
    counts = [value for event in out if isinstance(event, Usage) for value in vars_of(event)]
    assert all(type(value) is int and 0 <= value < USAGE_COUNT_LIMIT for value in counts)


def vars_of(usage: Usage) -> list[int]:
    return [getattr(usage, name) for name in Usage.__dataclass_fields__]
