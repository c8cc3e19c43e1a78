"""The context size a local server says it serves, and the flag that sets it (docs/endpoints.md, "Local servers").

llama.cpp's ``llama-server`` answers ``GET /props`` with ``default_generation_settings.n_ctx`` (older builds: a
top-level ``n_ctx``); vLLM lists ``max_model_len`` beside each model in ``GET /models``, and LM Studio a
``context_length`` (or ``loaded_context_length``). A server that says none of these is not guessed at: None.
Pure readers of parsed JSON, plus :func:`server_context`, which asks a client that can ``GET`` as a turn would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dsh.llm.errors import LlmError

__all__ = ["PROPS_PATH", "ServerContext", "context_from_models", "context_from_props", "server_context"]

PROPS_PATH = "/props"  # llama.cpp's; on its origin, beside /v1
_MAX_CONTEXT = 1 << 31  # larger is not a context size but garbage
# The flag that sets each server's context size, as its own documentation spells it.
_FLAGS = {
    "llama.cpp": "--ctx-size (-c) of llama-server",
    "vLLM": "--max-model-len of vllm serve",
    "LM Studio": "the model's context length when LM Studio loads it",
}
# Keys of a /models entry, most specific first, and whose they are.
_MODEL_KEYS = (("max_model_len", "vLLM"), ("loaded_context_length", "LM Studio"), ("context_length", "LM Studio"))


@dataclass(frozen=True, slots=True)
class ServerContext:
    """``tokens`` the server serves, where it said so (``GET /props``), and whose flag sets it."""

    tokens: int
    where: str
    server: str

    @property
    def flag(self) -> str:
        return _FLAGS[self.server]


class _Getter(Protocol):
    async def get_json(self, path: str, *, tapped: bool = True, from_origin: bool = False) -> tuple[int, Any]: ...


def _size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_CONTEXT else None


def context_from_props(body: Any) -> int | None:
    """llama.cpp's ``n_ctx`` from a ``GET /props`` answer, or None."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    nested = _size(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return nested if nested is not None else _size(body.get("n_ctx"))


def context_from_models(body: Any, model: str) -> tuple[int, str, str] | None:
    """``(tokens, server, key)`` from the ``GET /models`` entry of ``model`` (or the only entry), or None."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [item for item in data[:1000] if isinstance(item, dict)]
    named = [item for item in entries if item.get("id") == model] or (entries if len(entries) == 1 else [])
    for entry in named[:1]:
        for key, server in _MODEL_KEYS:
            tokens = _size(entry.get(key))
            if tokens is not None:
                return tokens, server, key
    return None


async def server_context(client: _Getter, model: str, *, name: str | None, models: Any = None) -> ServerContext | None:
    """What the endpoint says its context size is; None when it says none (a 404, another shape, any failure:
    never a guess). ``name``: who the endpoint is (dsh.llm.endpoint): only llama.cpp is asked ``GET /props``.
    ``models``: the ``GET /models`` answer already read (else it is asked). Neither look is recorded."""
    if name == "llama.cpp":
        # /props is served on the origin (llama-server's), whatever path base_url has (/v1).
        body = await _get(client, PROPS_PATH, from_origin=True)
        tokens = context_from_props(body)
        if tokens is not None:
            return ServerContext(tokens, "GET /props n_ctx", "llama.cpp")
    found = context_from_models(models if models is not None else await _get(client, "/models"), model)
    return None if found is None else ServerContext(found[0], f"GET /models {found[2]}", found[1])


async def _get(client: _Getter, path: str, *, from_origin: bool = False) -> Any:
    """The parsed 200 answer to ``GET path``, or None."""
    try:
        status, body = await client.get_json(path, tapped=False, from_origin=from_origin)
    except LlmError:
        return None
    return body if status == 200 else None
