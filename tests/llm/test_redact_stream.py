"""KnownValueStream: a model's answer arrives in pieces, and a known secret in it is masked whole however
the pieces split it (docs/architecture.md, "Redaction").

The oracle below is written independently of the class: the whole text masked at once (every known value,
longest first, left to right), and at the end a tail of 4+ characters that is the start of a value masked
as if whole (the stream, or a cancel, cut that value off).
"""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import Redactor
from dsh.llm.redact import MASK, KnownValueStream

KEY = "sk-canary0123456789abcdefXYZ"


def _pattern(secrets: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(s) for s in sorted(secrets, key=lambda s: (-len(s), s))))


def _oracle(secrets: list[str], text: str) -> str:
    """The text masked at once; then a tail that is the start (or all) of a value, 4+ characters, masked."""
    pattern = _pattern(secrets)
    out: list[str] = []
    while True:
        tail = next(p for p in range(len(text) + 1)
                    if p == len(text) or any(s.startswith(text[p:]) for s in secrets))
        position = 0
        for match in pattern.finditer(text):
            if match.start() >= tail:
                break
            out += [text[position : match.start()], MASK]
            position = match.end()
        if position > tail:  # a value ran past where the tail began: the rest is decided afresh
            text = text[position:]
            continue
        out.append(text[position:tail])
        rest = text[tail:]
        out.append(MASK if len(rest) >= 4 else rest)
        return "".join(out)


def _streamed(secrets: list[str], pieces: list[str]) -> tuple[list[str], str]:
    """What each feed released, and the whole output with the flush."""
    stream = KnownValueStream(Redactor(secrets))
    released = [stream.feed(piece) for piece in pieces]
    return released, "".join(released) + stream.flush()


def test_ordinary_text_is_released_at_once_and_as_it_came() -> None:
    stream = KnownValueStream(Redactor([KEY]))
    for piece in ("The answer", " is 42", ".\n", "Nothing here ", "could start the key:", " 0 1 2\n"):
        assert stream.feed(piece) is piece  # the same text, no copy, nothing held back
        assert not stream.holding
    assert stream.flush() == ""


def test_a_key_split_at_any_position_is_masked_whole_and_no_part_of_it_is_released_early() -> None:
    for cut in range(1, len(KEY)):
        released, whole = _streamed([KEY], [f"your key: {KEY[:cut]}", f"{KEY[cut:]} ok"])
        assert released == ["your key: ", "*** ok"], cut
        assert whole == "your key: *** ok"
    released, whole = _streamed([KEY], ["key ", *KEY, "."])  # one character a piece
    assert "".join(released[:-1]) == "key " and released[-1] == "***." and whole == "key ***."


def test_shapes_are_left_to_the_answer_only_known_values_are_masked() -> None:
    text = "Example: sk-example0123456789 and https://user:pw@host/v1?token=abc, Bearer xyz123456"
    assert _streamed([KEY], [text]) == ([text], text)


def test_a_value_cut_off_by_the_end_of_the_stream_is_masked_from_four_characters() -> None:
    for cut in range(1, len(KEY)):
        released, whole = _streamed([KEY], [f"key: {KEY[:cut]}"])
        assert released == ["key: "]
        assert whole == ("key: ***" if cut >= 4 else f"key: {KEY[:cut]}"), cut


def test_a_longer_value_that_starts_with_a_shorter_one_is_masked_whole() -> None:
    short, long = "hunter2hunter2", "hunter2hunter2-and-more"
    released, whole = _streamed([short, long], ["pw hunter2hunter2", "-and-more here"])
    assert released == ["pw ", "*** here"] and whole == "pw *** here"
    assert _streamed([short, long], ["pw hunter2hunter2", " here"]) == (["pw ", "*** here"], "pw *** here")


def test_what_follows_a_value_is_judged_afresh_at_the_end() -> None:
    # "abcdef" could have been the start of the second value until the first one matched under it.
    assert _streamed(["aaaab", "abcdefgh"], ["x aaaa", "bcdef"]) == (["x ", "***"], "x ***cdef")
    # Twice over, at the end: "zzaaaabcdef" could start a third value, but two others match first.
    secrets = ["yyzz", "zzaaaabcdefQ", "aaaab", "abcdefgh"]
    assert _streamed(secrets, ["yyzzaaaabcdef"]) == (["***"], "******cdef")


def test_without_known_values_the_stream_passes_pieces_through() -> None:
    stream = KnownValueStream(Redactor([]))
    piece = "sk-anything at all"
    assert stream.feed(piece) is piece and stream.flush() == ""


def test_never_more_than_the_longest_value_is_held_back() -> None:
    # The worst case for the hot path: every character could still start the key.
    stream = KnownValueStream(Redactor([KEY]))
    text = (KEY[:-1] + " ") * 2_000
    released = 0
    for n, char in enumerate(text, 1):
        released += len(stream.feed(char))
        assert released >= n - len(KEY)
    assert released + len(stream.flush()) == len(text)


# --- fuzzed: any split of any text gives the oracle's answer, and never releases what it takes back -----

_secret_sets = st.lists(st.text("ab", min_size=4, max_size=8), min_size=1, max_size=4, unique=True)


@st.composite
def _texts(draw: st.DrawFn) -> tuple[list[str], str, list[int]]:
    secrets = draw(_secret_sets)
    fragment = st.one_of(
        st.text("abx \n", max_size=6),
        st.sampled_from(secrets),
        st.sampled_from(secrets).flatmap(lambda s: st.integers(1, len(s)).map(lambda n: s[:n])),
    )
    text = "".join(draw(st.lists(fragment, max_size=12)))
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=8))
    return secrets, text, sorted(set(cuts))


@settings(max_examples=500, deadline=None)
@given(_texts())
def test_any_split_masks_as_the_whole_text_would_and_never_releases_half_a_value(
    case: tuple[list[str], str, list[int]],
) -> None:
    secrets, text, cuts = case
    want = _oracle(secrets, text)
    bounds = [0, *cuts, len(text)]
    released, whole = _streamed(secrets, [text[a:b] for a, b in itertools.pairwise(bounds)])
    assert whole == want
    so_far = ""
    for piece in released:
        so_far += piece
        assert want.startswith(so_far)  # nothing released is ever a part of a value masked later
    if not text or text[-1] not in "".join(secrets):
        assert whole == _pattern(secrets).sub(MASK, text)  # nothing cut off at the end: the whole text at once
