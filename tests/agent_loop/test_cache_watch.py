"""The prompt cache, first class (issue 37 part 3): the hashes of each part of the request prefix, the part a drop
names, the drop rule, and the fault server's DeepSeek-like cache. Real requests as the agent builds them
(a ToolRegistry whose tools change between requests), exact lines."""

from __future__ import annotations

import pytest

from dsh.agent_loop.cache_watch import PrefixTracker, cache_drop_line, cache_percent
from dsh.agent_loop.tools.registry import Tool, ToolRegistry
from dsh.llm.events import ChatRequest, Message
from dsh.llm.loopback.prompt_cache import PromptCache

SYSTEM = Message("system", "You are dsh.")


def _tool(name: str, description: str = "does a thing") -> Tool:
    async def run(arguments: dict[str, object], context: object) -> str:
        return "ok"

    return Tool(name, description, {"type": "object", "properties": {}}, run)  # type: ignore[arg-type]


def _request(messages: list[Message], tools: ToolRegistry, model: str = "deepseek-flash") -> ChatRequest:
    return ChatRequest(model=model, messages=tuple(messages), tools=tools.specs())


def _two_requests(change: str) -> str | None:
    """A first request, then the next one after ``change``; the part the tracker names."""
    tools = ToolRegistry([_tool("read_file"), _tool("mcp__docs__search")])
    messages = [SYSTEM, Message("user", "hi")]
    tracker = PrefixTracker()
    tracker.observe(_request(messages, tools))
    tracker.take_change()  # the first request: nothing to compare with
    messages.append(Message("assistant", "hello"))
    model = "deepseek-flash"
    if change == "mcp":
        tools.add(_tool("mcp__docs__search", "searches the docs (v2)"), replace=True)
        tools.add(_tool("mcp__docs__fetch"))
    elif change == "tool":
        tools.add(_tool("web_fetch"))
        tools.remove("read_file")
    elif change == "system":
        messages[0] = Message("system", "You are dsh. The project now has a README.")
    elif change == "model":
        model = "deepseek-v4-pro"
    elif change == "history":
        messages[1] = Message("user", "hi there")
    elif change == "compact":
        messages[1:] = [Message("user", "Summary of the conversation so far: hi")]
        tracker.compacted(automatic=False)
    messages.append(Message("user", "and now?"))
    tracker.observe(_request(messages, tools, model))
    return tracker.take_change()


@pytest.mark.parametrize(("change", "named"), [
    ("mcp", "the tool list changed (MCP server docs re-listed its tools)"),
    ("tool", "the tool list changed (web_fetch added, read_file removed)"),
    ("system", "the system prompt changed (the project context is part of it)"),
    ("model", "the model changed (deepseek-flash to deepseek-v4-pro)"),
    ("history", "the earlier messages changed"),
    ("compact", "/compact rewrote the history"),
    ("nothing", None),
])
def test_the_first_part_that_changed_is_named(change: str, named: str | None) -> None:
    assert _two_requests(change) == named


def test_a_change_is_told_once_and_the_same_request_again_is_no_change() -> None:
    tools = ToolRegistry([_tool("read_file")])
    tracker = PrefixTracker()
    request = _request([SYSTEM, Message("user", "hi")], tools)
    tracker.observe(request)
    assert tracker.take_change() == "the session was resumed (dsh keeps no hashes of what it sent before)"
    tracker.observe(request)  # a retry sends the same request
    assert tracker.take_change() is None
    tools.add(_tool("glob"))
    tracker.observe(_request([SYSTEM, Message("user", "hi")], tools))
    assert tracker.take_change() == "the tool list changed (glob added)"
    assert tracker.take_change() is None


def test_messages_the_conversation_still_holds_are_not_hashed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh.agent_loop import cache_watch

    hashed: list[str] = []
    real = cache_watch.wire_message
    monkeypatch.setattr(cache_watch, "wire_message", lambda m: hashed.append(m.content) or real(m))
    messages = [SYSTEM, Message("user", "one")]
    tracker = PrefixTracker()
    tracker.observe(_request(messages, ToolRegistry()))
    messages += [Message("assistant", "two"), Message("user", "three")]
    tracker.observe(_request(messages, ToolRegistry()))
    assert hashed == ["You are dsh.", "one", "two", "three"]


@pytest.mark.parametrize(("rate", "previous", "line"), [
    (0.12, 0.96, "cache 12% (was 96%): nothing dsh sent before the new messages changed"),
    (0.0, 0.97, "cache 0% (was 97%): nothing dsh sent before the new messages changed"),
    (0.69, 1.0, "cache 69% (was 100%): nothing dsh sent before the new messages changed"),
    (0.79, 1.0, None),  # 21 points
    (0.4, 0.72, "cache 40% (was 72%): nothing dsh sent before the new messages changed"),
    (0.81, 1.0, None),  # not below 80%
    (0.5, 0.8, None),  # 30 points: not more
    (0.5, None, None),  # no previous turn with cache figures
    (None, 0.96, None),  # this turn has none
])
def test_a_drop_is_more_than_30_points_and_below_80_percent(rate: float | None, previous: float | None,
                                                          line: str | None) -> None:
    assert cache_drop_line(rate, previous, None) == line


def test_percentages_never_round_to_all_or_nothing() -> None:
    assert [cache_percent(r) for r in (0.0, 0.001, 0.5, 0.996, 1.0)] == ["0%", "1%", "50%", "99%", "100%"]


def test_the_fault_server_s_cache_hits_the_prefix_an_earlier_request_stored() -> None:
    cache = PromptCache()
    first = {"model": "deepseek-flash", "tools": [], "messages": [{"role": "user", "content": "x" * 400}]}
    assert cache.usage(first)["prompt_cache_hit_tokens"] == 0
    longer = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "y"}]}
    usage = cache.usage(longer)
    assert usage["prompt_cache_hit_tokens"] == cache.usage(first)["prompt_tokens"]
    assert usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"] == usage["prompt_tokens"]
    other_tools = {**longer, "tools": [{"type": "function"}]}
    assert cache.usage(other_tools)["prompt_cache_hit_tokens"] == 0  # the tool list comes before the messages
