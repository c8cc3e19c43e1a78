"""A tools/call result as the model gets it, from dsh's own plain data (agent_loop/mcp/plain.py): client.py
is the one module that reads the SDK's objects; tools.py and the manager work on plain frozen dataclasses."""

from __future__ import annotations

import ast
import base64
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.agent_loop.mcp.plain import (
    CallResult,
    LinkBlock,
    ListedTool,
    MediaBlock,
    OtherBlock,
    ResourceBlock,
    TextBlock,
)
from dsh.agent_loop.mcp.tools import clean_schema, format_result
from dsh.agent_loop.tools.registry import MAX_RESULT_CHARS, ToolOutput

MCP_PACKAGE = Path(__file__).resolve().parents[3] / "agent_loop" / "mcp"
SECRET = "schemaSecret9921"  # the mask's value here, not a suite canary
PNG = base64.b64encode(b"\x89PNG" + bytes(62)).decode("ascii")


def test_every_kind_of_block_has_its_line() -> None:
    result = CallResult((
        TextBlock("hello"),
        MediaBlock("image", "image/png", PNG),
        MediaBlock("audio", None, "not base64!"),
        ResourceBlock("file:///notes.txt", "text/plain", text="notes"),
        ResourceBlock("file:///blob.bin", None, blob=base64.b64encode(b"abc").decode()),
        LinkBlock("file:///other.txt"),
        OtherBlock("hologram"),
    ))
    assert format_result(result) == ToolOutput(
        "hello\n[image: image/png, 66 bytes]\n[audio: unknown, 11 bytes]\n"
        "[resource: file:///notes.txt, text/plain, 5 characters]\n[resource: file:///blob.bin, unknown, 3 bytes]\n"
        "[resource link: file:///other.txt]\n[hologram content]"
    )


def test_structured_content_only_when_no_text_and_is_error_kept() -> None:
    reading = {"temperature": 21.5, "unit": "°C"}
    assert format_result(CallResult((), reading)).text == '{"temperature": 21.5, "unit": "°C"}'
    assert format_result(CallResult((TextBlock("21.5"),), reading)).text == "21.5"
    assert format_result(CallResult((), {1j})).text == "[structured content that is not JSON]"
    assert format_result(CallResult(())) == ToolOutput("(no content)")
    assert format_result(CallResult((TextBlock("disk full"),), is_error=True)) == ToolOutput(
        "Error: disk full", is_error=True)


def test_hostile_placeholders_are_cleaned_and_bounded() -> None:
    hostile = "\x1b]8;;http://evil.example/\x07x\u202e" + "y" * 500
    text = format_result(CallResult((LinkBlock(hostile), MediaBlock("image", hostile, "")))).text
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    link, image = text.split("\n")
    assert link == "[resource link: ]8;;http://evil.example/x" + "y" * 174 + "…]"
    assert image == "[image: ]8;;http://evil.example/x" + "y" * 54 + "…, 0 bytes]"


def test_a_long_result_is_cut_once_it_passes_the_bound() -> None:
    many = CallResult(tuple(TextBlock("x" * 1000) for _ in range(1000)))
    text = format_result(many).text
    assert text.startswith("x" * 1000 + "\n") and text.endswith(" characters omitted]")
    assert len(text) < MAX_RESULT_CHARS + 100


@given(st.lists(st.text(alphabet=st.characters(codec=None)), max_size=5))
def test_any_text_blocks_give_text_utf8_can_encode(texts: list[str]) -> None:
    text = format_result(CallResult(tuple(TextBlock(t) for t in texts))).text
    text.encode("utf-8")  # raises on a lone surrogate: none reaches the model or the session log
    joined = "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in "\n".join(texts))
    assert text == (joined if texts else "(no content)")


@pytest.mark.parametrize("kind", [ListedTool, TextBlock, MediaBlock, ResourceBlock, LinkBlock, OtherBlock, CallResult])
def test_the_plain_data_is_frozen(kind: type) -> None:
    fields = dataclasses.fields(kind)
    value = kind(*(None for _ in fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, fields[0].name, "changed")


@pytest.mark.parametrize("module", ["tools.py", "manager.py", "plain.py"])
def test_only_the_client_reads_sdk_objects(module: str) -> None:
    """No duck typing on SDK objects outside client.py: no getattr/hasattr, no mcp import."""
    tree = ast.parse((MCP_PACKAGE / module).read_text(encoding="utf-8"))
    calls = [node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")]
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert calls == []
    assert [name for name in imported if name == "mcp" or name.startswith(("mcp.", "mcp_types"))] == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(codec=None), max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(alphabet=st.characters(codec=None), max_size=8), inner, max_size=4),
    max_leaves=16,
)
_CONTROL_OR_SURROGATE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


@given(st.dictionaries(st.text(alphabet=st.characters(codec=None), max_size=8), _JSON, max_size=5))
def test_a_schema_keeps_no_control_no_surrogate_and_no_secret(schema: dict[str, Any]) -> None:
    schema = {**schema, "description": f"{SECRET}\x1b[2J{schema.get('description')}"}
    schema.pop("type", None)
    cleaned = clean_schema(schema, lambda text: text.replace(SECRET, "***"))
    assert cleaned["type"] == "object"
    strings = list(_strings(cleaned))
    for text in strings:
        assert SECRET not in text and not _CONTROL_OR_SURROGATE.search(text), repr(text)
        text.encode("utf-8")


def _strings(value: object) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_a_secret_split_by_a_control_character_is_still_masked() -> None:
    split = f"{SECRET[:6]}\x07{SECRET[6:]}"
    schema = {"properties": {split: {"enum": [split], "default": f"\u202e{split}"}}}
    assert clean_schema(schema, lambda text: text.replace(SECRET, "***")) == {
        "type": "object", "properties": {"***": {"enum": ["***"], "default": "***"}}}


def test_a_schema_that_is_not_an_object_schema_or_too_big_is_an_empty_object() -> None:
    empty = {"type": "object", "properties": {}}
    assert clean_schema(["not", "a", "dict"], str) == empty
    assert clean_schema({"type": "string"}, str) == empty
    assert clean_schema({"type": "object", "description": "x" * 70_000}, str) == empty
    assert clean_schema({"properties": {"a": {"type": "string"}}}, str) == {"type": "object",
                                                                            "properties": {"a": {"type": "string"}}}
