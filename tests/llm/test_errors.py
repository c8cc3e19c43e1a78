"""error_chain on hostile values, and LlmError's validation. Real httpx chains: test_transport_chains.py."""

from __future__ import annotations

import httpx
import pytest

from dsh.llm import HarnessError, LlmError, chain_links, error_chain


def test_wrap_message_then_root_cause() -> None:
    root = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    wrapped = LlmError("DeepSeek API request to http://127.0.0.1:1 failed", "TRANSPORT", cause=root)
    assert error_chain(wrapped) == (
        "DeepSeek API request to http://127.0.0.1:1 failed: [Errno 111] Connect call failed ('127.0.0.1', 1)"
    )


def test_suppressed_context_is_followed() -> None:
    """httpcore's ``raise exc from None`` hides the OSError in __context__; we still reach it."""
    try:
        try:
            raise OSError("root cause")
        except OSError:
            raise RuntimeError("outer") from None
    except RuntimeError as exc:
        assert exc.__suppress_context__
        assert error_chain(exc) == "outer: root cause"


def test_args0_exception_is_followed_when_no_cause_or_context() -> None:
    inner = OSError("kept in args")
    outer = RuntimeError(inner)
    outer.__context__ = None
    # str(outer) is str(inner): collapsed as a verbatim duplicate, the cause still shows once.
    assert error_chain(outer) == "kept in args"
    assert error_chain(RuntimeError(ValueError("x"), "more")) == "(ValueError('x'), 'more'): x"


def test_verbatim_duplicates_collapse_but_their_causes_show() -> None:
    refused = ConnectionRefusedError("[Errno 111] Connect call failed ('127.0.0.1', 9)")
    os_error = OSError("All connection attempts failed")
    os_error.__cause__ = refused
    core = RuntimeError("All connection attempts failed")
    core.__context__ = os_error
    top = httpx.ConnectError("All connection attempts failed")
    top.__cause__ = core
    assert error_chain(top) == "All connection attempts failed: [Errno 111] Connect call failed ('127.0.0.1', 9)"


def test_exception_group_members_each_with_their_chain() -> None:
    a = ConnectionRefusedError("refused ::1")
    a.__cause__ = OSError("deeper a")
    b = ConnectionRefusedError("refused 127.0.0.1")
    group = ExceptionGroup("multiple connection attempts failed", [a, b])
    top = OSError("All connection attempts failed")
    top.__cause__ = group
    assert error_chain(top) == (
        "All connection attempts failed: multiple connection attempts failed [refused ::1: deeper a; refused 127.0.0.1]"
    )


def test_shared_cause_in_a_group_is_not_a_cycle() -> None:
    shared = OSError("shared root")
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__ = shared
    b.__cause__ = shared
    assert error_chain(ExceptionGroup("g", [a, b])) == "g [a: shared root; b: shared root]"


def test_true_cycle_renders_circular_cause() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert error_chain(a) == "a: b: <circular cause>"


def test_self_cycle() -> None:
    a = RuntimeError("self")
    a.__cause__ = a
    assert error_chain(a) == "self: <circular cause>"


def test_empty_message_renders_class_name() -> None:
    timeout = httpx.ReadTimeout("")
    timeout.__cause__ = TimeoutError()
    assert error_chain(timeout) == "ReadTimeout: TimeoutError"


class _RaisingStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("boom")


def test_raising_str_collapses_only_that_node() -> None:
    bad = _RaisingStr()
    bad.__cause__ = OSError("still shown")
    top = RuntimeError("top")
    top.__cause__ = bad
    assert error_chain(top) == "top: <unrenderable value>: still shown"


class _RaisingAttributes(Exception):
    def __getattribute__(self, name: str) -> object:
        if name in ("__cause__", "__context__", "args"):
            raise RuntimeError("no attributes for you")
        return super().__getattribute__(name)


def test_raising_attributes_do_not_crash() -> None:
    top = RuntimeError("top")
    top.__cause__ = _RaisingAttributes("middle")
    assert error_chain(top) == "top: middle"


def test_non_exception_values() -> None:
    assert error_chain("plain string") == "plain string"
    assert error_chain({"message": "from a mapping", "code": 1}) == "from a mapping"
    assert error_chain(42) == "42"

    class WithMessage:
        message = "from an attribute"

    assert error_chain(WithMessage()) == "from an attribute"

    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("nope")

    assert error_chain(Unprintable()) == "<unrenderable value>"


def test_non_exception_cause() -> None:
    top = RuntimeError("top")
    top.args = ("top", "not an exception")
    assert error_chain(top) == "('top', 'not an exception')"


def test_ten_thousand_deep_chain_is_bounded_without_recursion_error() -> None:
    head = current = RuntimeError("level 0")
    for level in range(1, 10_000):
        nxt = RuntimeError(f"level {level}")
        current.__cause__ = nxt
        current = nxt
    text = error_chain(head)
    assert text.startswith("level 0: level 1: ")
    assert text.endswith(": …")
    assert text.count(": ") == 64


def test_total_length_is_capped() -> None:
    head = current = RuntimeError("x" * 4000)
    for index in range(20):
        nxt = RuntimeError(f"{index}" + "y" * 4000)
        current.__cause__ = nxt
        current = nxt
    text = error_chain(head)
    assert len(text) == 16 * 1024
    assert text.endswith("…")


def test_nested_groups_are_depth_bounded() -> None:
    inner: BaseException = OSError("leaf")
    for level in range(500):
        inner = ExceptionGroup(f"g{level}", [inner])
    text = error_chain(inner)
    assert text.startswith("g499 [g498 [")
    assert "…" in text


def test_chain_links_keep_types_for_why() -> None:
    root = ConnectionRefusedError("refused")
    top = LlmError("request failed", "TRANSPORT", cause=root)
    links = chain_links(top)
    assert [(link.type_name, link.text) for link in links] == [
        ("dsh.llm.errors.LlmError", "request failed"),
        ("ConnectionRefusedError", "refused"),
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"message": "", "code": "X"},
        {"message": "m", "code": ""},
        {"message": "m", "code": "X", "status": 99},
        {"message": "m", "code": "X", "status": 600},
        {"message": "m", "code": "X", "status": True},
        {"message": "m", "code": "X", "retry_after_s": 0},
        {"message": "m", "code": "X", "retry_after_s": -1},
        {"message": "m", "code": "X", "retry_after_s": float("inf")},
        {"message": "m", "code": "X", "retry_after_s": float("nan")},
        {"message": "m", "code": "X", "request_id": ""},
    ],
)
def test_llm_error_validates_at_construction(kwargs: dict) -> None:
    message, code = kwargs.pop("message"), kwargs.pop("code")
    with pytest.raises(ValueError):
        LlmError(message, code, **kwargs)


def test_llm_error_fields() -> None:
    error = LlmError("slow down", "RATE_LIMIT", status=429, retry_after_s=2, request_id="req-1")
    assert (error.code, error.status, error.retry_after_s, error.request_id) == ("RATE_LIMIT", 429, 2.0, "req-1")
    assert isinstance(error, HarnessError)
    assert str(error) == "slow down"
    assert error.endpoint is None


def test_llm_error_carries_the_endpoint_it_was_built_with() -> None:
    error = LlmError("refused", "TRANSPORT", endpoint="http://127.0.0.1:9/v1")
    assert error.endpoint == "http://127.0.0.1:9/v1"
    with pytest.raises(TypeError):
        LlmError("refused", "TRANSPORT", None, None, None, None, None, "http://127.0.0.1:9/v1")  # type: ignore[misc]


def test_a_group_raised_while_handling_its_own_member_is_not_repeated() -> None:
    member = RuntimeError("X")
    group = ExceptionGroup("unhandled errors in a TaskGroup", [member])
    group.__context__ = member
    assert error_chain(group) == "unhandled errors in a TaskGroup [X]"
