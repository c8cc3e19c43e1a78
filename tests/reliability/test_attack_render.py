"""Attacks on the renderer and usage, against the real dsh child (docs/reliability.md, "Attacks on the renderer
and usage").

* A usage chunk with ``prompt_tokens = 10**400``, or with negative counts, through ``-p``: exit 0, the answer
  on stdout, and every number in the JSON result a count dsh can believe (0 when the server's was not one).
  A number too long for Python's int parser (over 4 300 digits) is a malformed chunk: one line, exit 1.
* The usage line never shows a negative number, whatever a tally holds.

The interactive side (Ctrl-C while a hostile answer renders, the usage line and ``/cost`` after absurd counts)
is in tests/e2e/test_render_attack_pty.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from dsh_harness import config_text, make_home, run_dsh

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.repl.usage import UsageTally, compact_count, context_text, format_cost, usage_line

ZEROS = {"requests": 1, "prompt_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0}
HUGE = {"prompt_tokens": 10**400, "completion_tokens": 10**400, "total_tokens": 10**400,
        "prompt_cache_hit_tokens": 10**400, "prompt_cache_miss_tokens": 10**400}
NEGATIVE = {"prompt_tokens": -95_400_000, "completion_tokens": -5, "total_tokens": -1,
            "prompt_cache_hit_tokens": -1, "prompt_cache_miss_tokens": -150_000}


def _print_json(tmp_path: Path, server: FaultServer, label: str) -> tuple[int, dict[str, object], str]:
    home = make_home(tmp_path, config_text())
    run = run_dsh(home, ["--base-url", server.url, "-p", "hi", "--output-format", "json"], label=label)
    return run.returncode, json.loads(run.stdout), run.stderr


@pytest.mark.parametrize("fields", [HUGE, NEGATIVE], ids=["10**400", "negative"])
def test_absurd_usage_counts_end_the_print_run_cleanly_with_zeros(tmp_path: Path, server: FaultServer,
                                                                  fields: dict[str, int]) -> None:
    server.push(Behaviour("text", text="hi", usage=fields))
    code, result, stderr = _print_json(tmp_path, server, "absurd-usage")
    assert (code, stderr) == (0, "")
    assert (result["text"], result["usage"], result["cost_usd"]) == ("hi", ZEROS, 0.0)


def test_a_number_too_long_to_parse_is_a_malformed_chunk_not_a_crash(tmp_path: Path, server: FaultServer) -> None:
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # the fault server (this process) writes it; the dsh child keeps the default
    try:
        server.push(Behaviour("text", text="hi", usage={"prompt_tokens": 10**5000}))
        home = make_home(tmp_path, config_text())
        run = run_dsh(home, ["--base-url", server.url, "-p", "hi"], label="5000-digit-usage")
    finally:
        sys.set_int_max_str_digits(limit)
    assert (run.returncode, run.stdout) == (1, "hi\n")
    [line] = run.stderr.splitlines()
    assert line.startswith("[turn failed MALFORMED_RESPONSE] malformed SSE payload: ")
    assert line.endswith("Exceeds the limit (4300 digits) for integer string conversion: value has 5001 digits; "
                         "use sys.set_int_max_str_digits() to increase the limit")


def test_the_usage_display_never_shows_a_negative_number() -> None:
    # Usage from the client cannot be negative any more; the display holds the line on its own anyway.
    assert [compact_count(-5), format_cost(-0.15)] == ["0", "$0.0000"]
    tally = UsageTally(requests=1, prompt=-95_400_000, output=-5, cost=-0.15, context=-95_400_000,
                       model="deepseek-v4-flash")
    assert context_text(tally) == "context 0.0%"
    assert usage_line(tally) == "tokens 0 in · 0 out · context 0.0% · $0.0000"
