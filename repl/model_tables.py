"""``[models."NAME"]`` tables in config.toml: what a user tells dsh about a model its table does not know, or
knows differently (docs/configuration.md, "Models"). Loaded only when a config file has such tables
(repl/config.py), so the model table's module costs no start-up otherwise."""

from __future__ import annotations

from collections.abc import Mapping

from dsh.agent_loop import settings
from dsh.agent_loop.settings import At
from dsh.llm.models import ModelSettings

__all__ = ["MODEL_KEYS", "check_models"]

MODEL_KEYS = ("context_window", "input_cache_hit", "input_cache_miss", "output", "images")


def check_models(at_key: str, tables: Mapping[str, Mapping[str, object]], where: str) -> dict[str, ModelSettings]:
    """Each table checked: ``context_window`` (tokens), prices in US dollars per 1M tokens, ``images`` (whether the
    model accepts image input)."""
    checked: dict[str, ModelSettings] = {}
    for name, table in tables.items():
        at = At(where, f"{at_key}.{name}")
        settings.unknown_keys(at, table, MODEL_KEYS)
        window = table.get("context_window")
        images = table.get("images")
        checked[name] = ModelSettings(
            context_window=None if window is None else int(settings.number(
                at, "context_window", window, what="a positive integer", at_least=1, integer=True)),
            input_cache_hit=_price(at, table, "input_cache_hit"),
            input_cache_miss=_price(at, table, "input_cache_miss"),
            output=_price(at, table, "output"),
            images=None if images is None else settings.boolean(at, "images", images),
        )
    return checked


def _price(at: At, table: Mapping[str, object], item: str) -> float | None:
    given = table.get(item)
    return None if given is None else float(
        settings.number(at, item, given, what="a price of zero or more (USD per 1M tokens)", at_least=0))
