"""DeepSeek's context cache, as its guide describes it, for the fault server (``FaultServer(prompt_cache=True)``).

DeepSeek's "Context Caching" guide (https://api-docs.deepseek.com/guides/kv_cache): caching is on for every
request; a request's prefix is a hit only when it *fully* matches a stored *cache prefix unit*; each request stores
a unit at the end of its input; when requests share a common prefix, that prefix is stored as a unit of its own for
the requests that follow. Usage reports ``prompt_cache_hit_tokens`` and ``prompt_cache_miss_tokens`` beside
``prompt_tokens``. This model of it counts four characters a token over a text that keeps prefixes prefixes: the
tool list, then each message on its own line, so a request that adds messages to the last one's starts with it.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

__all__ = ["PromptCache"]

CHARS_PER_TOKEN = 4
_UNITS_KEPT = 64  # the newest units; enough for any test or demo session


def prompt_text(body: dict[str, Any]) -> str:
    """The request's input as one text: the model, the tool list, then one line per message."""
    head = json.dumps({"model": body.get("model"), "tools": body.get("tools")}, sort_keys=True) + "\n"
    messages = body.get("messages")
    lines = [json.dumps(message, sort_keys=True) + "\n" for message in messages] if isinstance(messages, list) else []
    return head + "".join(lines)


def _shared(one: str, other: str) -> int:
    """The length of the longest common prefix of two texts (a binary search over ``startswith``)."""
    low, high = 0, min(len(one), len(other))
    while low < high:
        middle = (low + high + 1) // 2
        if other.startswith(one[:middle]):
            low = middle
        else:
            high = middle - 1
    return low


class PromptCache:
    """The cache prefix units stored so far, and the usage a request gets from them."""

    def __init__(self) -> None:
        self._units: deque[str] = deque(maxlen=_UNITS_KEPT)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """The usage fields of ``body``'s answer (DeepSeek's shape), storing its units for later requests."""
        text = prompt_text(body)
        hit_chars = max((len(unit) for unit in self._units if text.startswith(unit)), default=0)
        shared = max((_shared(unit, text) for unit in self._units), default=0)
        if shared > hit_chars:  # a common prefix of two requests becomes a unit of its own, for the next ones
            self._units.append(text[:shared])
        self._units.append(text)
        prompt = max(len(text) // CHARS_PER_TOKEN, 1)
        hit = min(hit_chars // CHARS_PER_TOKEN, prompt)
        return {"prompt_tokens": prompt, "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": prompt - hit}
