"""No lone surrogate survives decoding: pairs split across deltas rejoin, lone ones become U+FFFD."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from dsh.llm.text import REPLACEMENT, SurrogateJoiner, loads, scrub_surrogates

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.one_of(st.characters(), SURROGATES)


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def _utf16_pieces(text: str, cuts: list[int]) -> list[str]:
    """``text`` as a server may stream it: UTF-16 code units (what JSON escapes spell), cut anywhere."""
    units = text.encode("utf-16-le", "surrogatepass")
    halves = [units[i : i + 2].decode("utf-16-le", "surrogatepass") for i in range(0, len(units), 2)]
    points = sorted({c % (len(halves) + 1) for c in cuts})
    return ["".join(halves[a:b]) for a, b in zip([0, *points], [*points, len(halves)], strict=True)]


@given(st.text(), st.lists(st.integers(min_value=0, max_value=400), max_size=20))
def test_valid_text_cut_anywhere_comes_back_whole(text: str, cuts: list[int]) -> None:
    joiner = SurrogateJoiner()
    out = "".join(joiner.feed("text", piece) for piece in _utf16_pieces(text, cuts))
    assert out + "".join(joiner.flush().values()) == text


@given(st.lists(st.tuples(st.sampled_from(["text", "reasoning", 0, 1]), st.text(ANY_CHAR, max_size=8)), max_size=30))
def test_whatever_arrives_nothing_lone_comes_out_and_it_encodes(deltas: list[tuple[object, str]]) -> None:
    joiner = SurrogateJoiner()
    outs = [joiner.feed(channel, text) for channel, text in deltas] + list(joiner.flush().values())
    for out in outs:
        assert not _has_surrogate(out)
        out.encode("utf-8")


def test_a_pair_split_across_deltas_survives_other_channels_in_between() -> None:
    joiner = SurrogateJoiner()
    assert [joiner.feed("text", "a\ud83d"), joiner.feed("reasoning", "x"), joiner.feed("text", "\ude00b")] == [
        "a", "x", "\U0001f600b",
    ]


def test_a_high_half_not_followed_by_its_low_half_is_replaced() -> None:
    joiner = SurrogateJoiner()
    assert [joiner.feed("text", "a\ud83d"), joiner.feed("text", "b")] == ["a", REPLACEMENT + "b"]
    assert joiner.feed("text", "\ud83d") == "" and joiner.flush() == {"text": REPLACEMENT}
    assert joiner.flush() == {}


@given(st.text(ANY_CHAR))
def test_scrub_leaves_no_surrogate_and_keeps_every_other_character(text: str) -> None:
    out = scrub_surrogates(text)
    assert not _has_surrogate(out)
    out.encode("utf-8")
    kept = iter(out)  # every other character is still there, in order (a joined pair adds one)
    assert all(char in kept for char in text if not _has_surrogate(char))
    assert scrub_surrogates("x\ud800\udc00y\udc00") == "x\U00010000y" + REPLACEMENT


@given(st.text())
def test_scrub_joins_the_halves_of_a_pair_held_in_one_string(text: str) -> None:
    assert scrub_surrogates("".join(_utf16_pieces(text, list(range(1000))))) == text
    assert scrub_surrogates(text) == text


@given(st.recursive(st.one_of(st.text(ANY_CHAR), st.integers(), st.none()),
                    lambda inner: st.one_of(st.lists(inner), st.dictionaries(st.text(ANY_CHAR), inner)), max_leaves=20))
def test_loads_returns_no_surrogate_anywhere(value: object) -> None:
    document = json.dumps(value)  # ensure_ascii: surrogates travel as \\uXXXX escapes, as on the wire
    decoded = loads(document)
    assert not _has_surrogate(json.dumps(decoded, ensure_ascii=False))
    assert loads(document.encode()) == decoded


def test_loads_of_plain_json_is_json_loads() -> None:
    assert loads('{"a": ["b", 1, null]}', parse_constant=float) == {"a": ["b", 1, None]}
