"""Fuzzing error_chain: random graphs of exceptions with cycles, groups and hostile __str__."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm import error_chain
from dsh.llm.errors import MAX_LENGTH


class HostileStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("hostile")


class NonStringStr(Exception):
    def __str__(self):  # type: ignore[override]
        return 12345


class HugeStr(Exception):
    def __str__(self) -> str:
        return "h" * 100_000


KINDS = ["plain", "empty", "hostile", "non_string", "huge", "group"]

NODE = st.tuples(st.sampled_from(KINDS), st.text(max_size=20))
GRAPH = st.lists(NODE, min_size=1, max_size=25).flatmap(
    lambda nodes: st.tuples(
        st.just(nodes),
        # each node: which node is its __cause__ / __context__ / group members (indices, cycles allowed)
        st.lists(st.tuples(st.integers(-1, len(nodes) - 1), st.integers(-1, len(nodes) - 1)), min_size=len(nodes),
                 max_size=len(nodes)),
        st.lists(st.lists(st.integers(0, len(nodes) - 1), min_size=1, max_size=3), min_size=len(nodes),
                 max_size=len(nodes)),
    )
)


def _build(nodes, links, members) -> BaseException:
    made: list[BaseException | None] = [None] * len(nodes)
    for index, (kind, text) in enumerate(nodes):
        if kind == "plain":
            made[index] = RuntimeError(text or "x")
        elif kind == "empty":
            made[index] = TimeoutError()
        elif kind == "hostile":
            made[index] = HostileStr()
        elif kind == "non_string":
            made[index] = NonStringStr()
        elif kind == "huge":
            made[index] = HugeStr()
    # Groups are immutable, so they are built after the plain nodes; members may be any node made so far,
    # and causes set below may point back at a group, which closes cycles through groups.
    for index, (kind, text) in enumerate(nodes):
        if kind == "group":
            chosen = [made[m] for m in members[index] if made[m] is not None] or [ValueError("leaf")]
            made[index] = ExceptionGroup(text or "group", chosen)
    for index, exc in enumerate(made):
        assert exc is not None
        cause, context = links[index]
        if cause >= 0:
            exc.__cause__ = made[cause]
        if context >= 0:
            exc.__context__ = made[context]
    assert made[0] is not None
    return made[0]


@settings(max_examples=500, deadline=None)
@given(GRAPH)
def test_random_exception_graphs_render_one_bounded_line(graph) -> None:
    nodes, links, members = graph
    root = _build(nodes, links, members)
    text = error_chain(root)
    assert isinstance(text, str)
    assert len(text) <= MAX_LENGTH
    if nodes[0][0] == "hostile":
        assert text.startswith("<unrenderable value>")
