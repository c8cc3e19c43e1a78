"""The budget's parts without a process: the logged spend a resume carries, priced at each request's own hour, the
reason's round trip through the log, and a capped turn that ``/model`` pointed at an unpriced model."""

from __future__ import annotations

import datetime

from dsh.agent_loop.budget import Budget, budget_line, budget_words, dollars, unpriced_cap
from dsh.agent_loop.reasons import BudgetStop, EndReason, Failed
from dsh.agent_loop.recap import Recap
from dsh.agent_loop.session_usage import SessionUsage
from dsh.agent_loop.usage import UsageTally
from dsh.llm.models import model_info
from tests.agent_loop.session_configs import StubConfig

USAGE = {"prompt_tokens": 1_000_000, "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 1_000_000,
         "completion_tokens": 0}


def _message(time: object, usage: object = USAGE) -> dict[str, object]:
    return {"type": "assistant/message", "time": time, "data": {"turn": 1, "step": 1, "usage": usage}}


def test_the_recap_prices_each_logged_request_at_its_own_hour() -> None:
    recap = Recap(info=model_info("deepseek-flash"))
    recap({"type": "turn/start", "data": {"turn": 1, "prompt": "hi"}})
    recap(_message("2026-12-07T02:00:00.000Z"))  # Monday 10:00 in Beijing: peak, $0.30 per million misses
    recap(_message("2026-12-05T02:00:00.000Z"))  # Saturday: off-peak, $0.15
    recap({"type": "context/compact", "time": "2026-12-05T02:00:00.000Z", "data": {"summary": "s", "usage": USAGE}})
    for hostile in (_message("not a time"), _message(None), _message("2026-12-05T02:00:00Z", usage=[1]),
                    _message("2026-12-05T02:00:00Z", usage={"prompt_tokens": -5, "completion_tokens": "9"})):
        recap(hostile)  # no time, no usage, no count: nothing added, nothing raised
    assert round(recap.spent, 6) == 0.60
    assert Recap()(_message("2026-12-05T02:00:00Z")) is None  # no model to price with: nothing counted


def test_an_hour_priced_once_prices_every_request_of_that_hour_as_parsing_each_would() -> None:
    # Every half hour of a week, as the writer puts a time (priced once an hour) and with an offset (parsed each
    # time): the same spend, hour by hour, peak and off-peak alike.
    start = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)
    times = [start + datetime.timedelta(minutes=30 * step) for step in range(2 * 24 * 7)]
    cached, parsed = Recap(info=model_info("deepseek-flash")), Recap(info=model_info("deepseek-flash"))
    for when in times:
        cached(_message(when.isoformat(timespec="milliseconds").replace("+00:00", "Z")))
        parsed(_message(when.isoformat()))
        assert round(cached.spent, 9) == round(parsed.spent, 9), when
    peak = 2 * 5 * 7  # half hours: 7 peak hours a weekday
    assert round(cached.spent, 6) == round(0.30 * peak + 0.15 * (2 * 24 * 7 - peak), 6)


def test_the_reason_round_trips_through_the_log_and_a_hostile_record_reads_zero() -> None:
    stop = BudgetStop(0.52, 0.5)
    assert EndReason.from_dict(stop.to_dict()) == stop
    assert EndReason.from_dict({"kind": "budget", "spent": "lots", "max_cost": float("nan")}) == BudgetStop(0, 0)


def test_the_budget_stops_at_the_cap_and_warns_once_past_80_percent() -> None:
    budget, tally = Budget(0.5, carried=0.3), UsageTally(cost=0.09)
    assert (budget.stop(tally), budget.warning(tally)) == (None, None)
    tally.cost = 0.11
    assert budget.warning(tally) == "dsh: budget: $0.41 spent of a $0.50 cap (82%)"
    assert budget.warning(tally) is None
    tally.cost = 0.2
    assert budget.stop(tally) == BudgetStop(0.5, 0.5)


def test_a_capped_turn_on_a_model_with_no_price_fails_before_its_request() -> None:
    usage = SessionUsage(StubConfig(max_cost=1.0))
    assert usage.budget_stop("deepseek-flash") is None
    assert usage.budget_stop("local-llm") == Failed("CONFIG", unpriced_cap("local-llm"))
    assert SessionUsage(StubConfig()).budget_stop("local-llm") is None  # no cap, nothing to hold


def test_amounts_are_dollars_and_cents_with_more_places_only_where_cents_would_mislead() -> None:
    assert budget_words(0.5213, 0.5) == "$0.52 spent of a $0.50 cap"
    assert budget_words(0.503, 0.5) == "$0.503 spent of a $0.500 cap"  # cents would print past the cap as equal
    assert budget_words(0.50042, 0.5) == "$0.5004 spent of a $0.5000 cap"
    assert budget_words(0.500001, 0.5) == "$0.5000 spent of a $0.5000 cap"  # at most four places
    assert budget_words(0.5, 0.5) == "$0.50 spent of a $0.50 cap"  # reached, not past
    assert budget_words(0.4999, 0.5) == "$0.50 spent of a $0.50 cap"  # under the cap: cents (the warning's % says)
    assert budget_words(0.0042, 0.005) == "$0.0042 spent of a $0.0050 cap"  # under a cent: never $0.00
    assert budget_words(0.00001, 12.5) == "<$0.0001 spent of a $12.50 cap"
    assert budget_words(0.0, 1_000_000) == "$0.00 spent of a $1000000.00 cap"
    assert [dollars(amount) for amount in (0.5, 0.0042, 3, float("nan"), float("inf"), -1.0)] == [
        "$0.50", "$0.0042", "$3.00", "$0.00", "$0.00", "$0.00"]  # a broken figure (a hostile log's) reads nothing


def test_the_cost_line_gives_the_share_of_the_cap() -> None:
    assert budget_line(0.12, 0.5) == "budget: $0.12 spent of a $0.50 cap (24%)"
    assert budget_line(0.52, 0.5) == "budget: $0.52 spent of a $0.50 cap (104%)"
    assert budget_line(float("nan"), 0.5) == "budget: $0.00 spent of a $0.50 cap (0%)"
    assert budget_line(0.1, 0.0) == "budget: $0.10 spent of a $0.00 cap (0%)"  # no cap to divide by: never raises


def test_deepseek_web_calls_count_against_the_cap_live_and_when_resumed() -> None:
    tally = UsageTally()
    tally.add_web(True, 0.00075)
    tally.add_web(False, 0.0)  # a fetch that returned nothing: not billed
    budget = Budget(0.001, carried=0.0005)
    assert budget.spent(tally) == 0.0005 + 0.00075
    assert budget.stop(tally) == BudgetStop(0.0005 + 0.00075, 0.001)

    recap = Recap(info=model_info("deepseek-flash"))
    recap({"type": "turn/start", "data": {"turn": 1, "prompt": "hi"}})
    for name, line in (("web_search", 'web_search "dsh": 3 results · $0.00075'),
                       ("web_fetch", "web_fetch https://example.test/: 2 KiB · $0.00075"),
                       ("web_search", 'web_search "none": 0 results · not billed'),
                       ("read_file", "read_file · $9"),  # not a web call: its line costs nothing
                       ("web_search", None)):
        recap({"type": "tool/result", "data": {"turn": 1, "id": "c", "name": name, "output": "",
                                               "diagnostic": line}})
    assert round(recap.spent, 6) == 0.0015
