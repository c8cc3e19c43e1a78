"""What dsh knows about each model: its context window and its prices, for the usage line and ``/cost``.

Prices are US dollars per million tokens, read from DeepSeek's pricing page
(https://api-docs.deepseek.com/quick_start/pricing) on :data:`PRICES_AS_OF`. DeepSeek bills peak and
off-peak hours at different rates (off-peak is half): peak is Monday to Friday, 09:00–12:00 and
14:00–18:00 Beijing time (UTC+8). Chinese public holidays are off-peak too, which this table does not
know, so a cost shown for such a day is an upper bound. The same page gives each model's context window, output
limit and image input, and says which legacy names still answer: ``deepseek-v4-flash`` and
``deepseek-v4-flash-vision-exp`` are served by DeepSeek-V4.1-Flash (``deepseek-flash``) and billed as it is
(:attr:`ModelInfo.served_by`; :func:`dsh.llm.endpoint.legacy_warning` is the line dsh shows for one). A
``[models."NAME"]`` table in config.toml overrides or adds a model (see docs/configuration.md); a model in neither
place shows tokens without a cost.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from dsh.llm.defaults import LEGACY_MODELS
from dsh.llm.events import Usage

__all__ = [
    "MODELS", "PRICES_AS_OF", "ModelInfo", "ModelSettings", "Prices", "cost_usd", "is_peak", "model_info",
]

PRICES_AS_OF = "2026-12-03"


@dataclass(frozen=True, slots=True)
class Prices:
    """US dollars per million tokens."""

    cache_hit: float
    cache_miss: float
    output: float


@dataclass(frozen=True, slots=True)
class ModelInfo:
    context_window: int | None = None
    peak: Prices | None = None
    off_peak: Prices | None = None  # None: the same as peak
    output_limit: int | None = None  # the most output tokens one answer may have
    images: bool = False  # takes image input
    served_by: str | None = None  # a legacy name: the current name of the model that answers for it

    def prices_at(self, when: _dt.datetime) -> Prices | None:
        if self.peak is None:
            return None
        if self.off_peak is None or is_peak(when):
            return self.peak
        return self.off_peak


_FLASH = ModelInfo(1_048_576, Prices(0.006, 0.30, 1.20), Prices(0.003, 0.15, 0.60), output_limit=393_216,
                   images=True)
_PRO = ModelInfo(1_048_576, Prices(0.044, 1.32, 3.96), Prices(0.022, 0.66, 1.98), output_limit=393_216,
                 images=False)
_CURRENT = {"deepseek-flash": _FLASH, "deepseek-v4-pro": _PRO}

# Each known DeepSeek model by the name a request gives (https://api-docs.deepseek.com/quick_start/pricing): the
# current ones, then each legacy name (llm/defaults.py) as the model that serves it, at its prices.
MODELS: dict[str, ModelInfo] = {
    **_CURRENT,
    **{name: replace(_CURRENT[current], served_by=current) for name, (current, _) in LEGACY_MODELS.items()},
}


_BEIJING = _dt.timezone(_dt.timedelta(hours=8))
_PEAK_HOURS = ((9, 12), (14, 18))


def is_peak(when: _dt.datetime) -> bool:
    """DeepSeek's peak billing hours (holidays aside). A naive ``when`` is taken as UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    local = when.astimezone(_BEIJING)
    return local.weekday() < 5 and any(start <= local.hour < end for start, end in _PEAK_HOURS)


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """One ``[models."NAME"]`` table as read from the config file (repl/config.py checks it): each value None
    where the table leaves it to the built-in facts."""

    context_window: int | None = None
    input_cache_hit: float | None = None  # US dollars per million tokens
    input_cache_miss: float | None = None
    output: float | None = None
    images: bool | None = None  # whether the model accepts image input

    def keys(self) -> tuple[str, ...]:
        """The keys the table sets (the capsule shows a table by its keys only)."""
        return tuple(key for key, value in asdict(self).items() if value is not None)


def model_info(name: str, overrides: Mapping[str, ModelSettings] | None = None) -> ModelInfo | None:
    """The built-in facts for ``name``, with a config table's keys applied on top."""
    base = MODELS.get(name)
    table = (overrides or {}).get(name)
    if table is None:
        return base
    info = base if base is not None else ModelInfo()
    if table.context_window is not None:
        info = replace(info, context_window=table.context_window)
    if table.images is not None:
        info = replace(info, images=table.images)
    if (table.input_cache_hit, table.input_cache_miss, table.output) != (None, None, None):
        peak = info.peak or Prices(0.0, 0.0, 0.0)
        flat = Prices(
            peak.cache_hit if table.input_cache_hit is None else table.input_cache_hit,
            peak.cache_miss if table.input_cache_miss is None else table.input_cache_miss,
            peak.output if table.output is None else table.output,
        )
        info = replace(info, peak=flat, off_peak=None)  # a configured price holds at every hour
    return info


def cost_usd(usage: Usage, prices: Prices) -> float:
    """The cost of one request. Cache misses are the prompt tokens that were not hits when not reported."""
    hit = usage.prompt_cache_hit_tokens
    miss = usage.prompt_cache_miss_tokens or max(usage.prompt_tokens - hit, 0)
    return (hit * prices.cache_hit + miss * prices.cache_miss + usage.completion_tokens * prices.output) / 1e6
