"""docs/contracts.md is what the code does: each block and table the page marks ``<!-- contract: NAME -->``,
compared with what the code renders today.

The page holds the exact texts, with ``<placeholders>``; these checks render the same lines with the code's
own functions (turn_end_line, fix_line, failure_line, ...) from sample facts, fill the page's placeholders with
the same facts, and compare. The data shapes (``--output-format json``, the session log, wire traces and
capsules) are compared with files a real ``dsh -p`` wrote against the loopback fault server. Also here: the
exception tree drawn in llm/errors.py against the real classes, and no citation of a design document that is
not in this repository.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import signal
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.agent_loop.events import LlmRetry
from dsh.agent_loop.process import ExitStatus
from dsh.agent_loop.reasons import (
    Aborted,
    BudgetStop,
    Completed,
    Disposed,
    EndReason,
    Failed,
    Interrupted,
    MaxTokens,
    OtherEnd,
    Rejected,
)
from dsh.agent_loop.retry import RetryPolicy, asked_to_wait, wait_words
from dsh.llm import ErrorCode, LlmError
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from dsh.llm.network import FailureDetail
from tests.repl.test_cli import dsh, write_config

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "contracts.md"
MARKER = re.compile(r"^<!-- contract: ([\w-]+) -->$")
PLACEHOLDER = re.compile(r"<([^<>\n]+)>")

pytestmark = pytest.mark.timeout(240)


# --- reading the page ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contract:
    """One marked region: a fenced block's lines, or a table's rows (cells as written, header dropped)."""

    name: str
    lines: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def json(self) -> Any:
        return json.loads(self.text)


def _cells(line: str) -> tuple[str, ...]:
    return tuple(cell.strip() for cell in line.strip().strip("|").split("|"))


def read_contracts(text: str) -> dict[str, Contract]:
    lines = text.split("\n")
    found: dict[str, Contract] = {}
    for index, line in enumerate(lines):
        match = MARKER.match(line)
        if match is None:
            continue
        name = match.group(1)
        assert name not in found, f"contract {name!r} is marked twice"
        start = index + 1
        if lines[start].startswith("```"):
            end = lines.index("```", start + 1)
            found[name] = Contract(name, lines=tuple(lines[start + 1:end]))
        elif lines[start].startswith("|"):
            end = start
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found[name] = Contract(name, rows=tuple(_cells(row) for row in lines[start + 2:end]))
        else:
            raise AssertionError(f"contract {name!r}: neither a fenced block nor a table follows its marker")
    return found


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def page() -> dict[str, Contract]:
    return read_contracts(page_text())


def code(cell: str) -> str:
    """The text of a cell written as one code span: `` `x` `` -> ``x``."""
    match = re.fullmatch(r"`([^`]*)`", cell)
    assert match, f"expected one code span, found {cell!r}"
    return match.group(1)


def spans(cell: str) -> list[str]:
    """Every code span in a cell, in order."""
    return re.findall(r"`([^`]*)`", cell)


def fill(template: str, values: Mapping[str, object]) -> str:
    """``template`` with each ``<name>`` replaced by ``values[name]``; a placeholder without a value fails."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in values, f"no sample value for <{name}> in {template!r}"
        return str(values[name])

    return PLACEHOLDER.sub(value, template)


def pattern(template: str, **fixed: object) -> re.Pattern[str]:
    """``template`` as a regex: the given placeholders filled, every other one any text."""
    parts: list[str] = []
    last = 0
    for match in PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[last:match.start()]))
        name = match.group(1)
        parts.append(re.escape(str(fixed[name])) if name in fixed else ".+")
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts))


def test_every_marked_contract_has_a_check_and_every_check_a_contract(page: dict[str, Contract]) -> None:
    checked = {name.removeprefix("test_contract_").replace("_", "-") for name in globals()
               if name.startswith("test_contract_")}
    assert set(page) == checked


# --- turn ends and retries -------------------------------------------------------------------------------------


CHAIN = "DeepSeek API request to http://127.0.0.1:1 failed: [Errno 111] Connect call failed ('127.0.0.1', 1)"


def test_contract_turn_end(page: dict[str, Contract]) -> None:
    from dsh.repl.renderer import Renderer
    from dsh.repl.turn_end import turn_end_line

    samples: list[tuple[EndReason, dict[str, str]]] = [
        (Failed(code="TRANSPORT", message=CHAIN), {"code": "TRANSPORT", "message": CHAIN}),
        (Failed(code="", message="a log with no code"), {"message": "a log with no code"}),
        (Aborted("cancelled"), {"reason": "cancelled"}),
        (Aborted(None), {}),
        (Rejected("prompt contains the configured API key; not sent"),
         {"reason": "prompt contains the configured API key; not sent"}),
        (Rejected(""), {}),
        (MaxTokens(), {}),
        (BudgetStop(0.5213, 0.5), {"spent": "$0.52", "cap": "$0.50"}),
        (Interrupted(), {}),
    ]
    expected = [fill(line, values) for line, (_, values) in zip(page["turn-end"].lines, samples, strict=True)]
    assert [turn_end_line(reason) for reason, _ in samples] == expected
    for ordinary in (Completed(), Disposed(), OtherEnd("a-future-kind", {})):
        assert turn_end_line(ordinary) is None, ordinary
    header = re.search(r"`(\[main turn <n>\] )`", page_text())
    assert header is not None, "the page no longer shows the turn header"
    assert Renderer(color=False).header(3) == fill(header.group(1), {"n": 3})


def test_contract_turn_end_plan(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.plan import Plan, PlanItem
    from dsh.repl.turn_end import turn_end_line

    (line,) = page["turn-end-plan"].lines
    plan = Plan((PlanItem("read", "completed"), PlanItem("write", "in_progress"), PlanItem("test"),
                 PlanItem("doc", "completed"), PlanItem("ship", "completed")))
    assert turn_end_line(Completed(), plan=plan) == fill(line, {"open": 2, "total": 5})
    done = Plan(tuple(PlanItem(name, "completed") for name in ("read", "write")))
    for quiet in (done, Plan(), None):  # a plan with nothing open, an empty one, none: nothing new
        assert turn_end_line(Completed(), plan=quiet) is None, quiet
    assert turn_end_line(MaxTokens(), plan=plan) == "[turn hit the output-token limit]"  # its own line, unchanged


def test_contract_retry_line(page: dict[str, Contract]) -> None:
    from dsh.repl.renderer import Renderer

    (line,) = page["retry-line"].lines
    event = LlmRetry(turn=1, step=1, attempt=2, max_attempts=5, delay_s=1.0, code="SERVER", message="Server Overloaded")
    values = {"attempt": 2, "max attempts": 5, "seconds": "1.0", "code": "SERVER", "message": "Server Overloaded"}
    assert Renderer(color=False).render(event) == fill(line, values) + "\n"


def test_contract_continue_line(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.events import LlmContinue
    from dsh.repl.renderer import Renderer

    (line,) = page["continue-line"].lines
    event = LlmContinue(turn=1, step=1, attempt=1, max_attempts=2, code="TRANSPORT", kept_chars=1214)
    assert Renderer(color=False).render(event) == fill(line, {"code": "TRANSPORT", "kept": "1 214"}) + "\n"
    capped = LlmContinue(turn=1, step=1, attempt=1, max_attempts=2, code="length", kept_chars=7)
    assert Renderer(color=False).render(capped) == fill(line, {"code": "the output-token limit", "kept": "7"}) + "\n"


def _quantity(text: str) -> float:
    number = float(re.match(r"[\d.]+", text).group(0))  # type: ignore[union-attr]
    return number / 100 if text.endswith("%") else number


def test_contract_retry_policy(page: dict[str, Contract]) -> None:
    policy = RetryPolicy()
    shown = {code(row[0]): _quantity(row[1]) for row in page["retry-policy"].rows}
    settings = {f.name for f in fields(RetryPolicy) if f.name != "rng"}
    assert set(shown) == settings
    assert shown == {name: getattr(policy, name) for name in settings}


def test_contract_retry_too_long(page: dict[str, Contract]) -> None:
    (line,) = page["retry-too-long"].lines
    policy = RetryPolicy()
    asked = policy.retry_after_max * 2
    assert policy.waits_too_long(asked) and not policy.waits_too_long(policy.retry_after_max)
    failure = asked_to_wait(LlmError("Rate Limit Reached", ErrorCode.RATE_LIMIT, status=429), asked)
    assert failure.message == fill(line, {"message": "Rate Limit Reached", "wait": wait_words(asked)})
    assert failure.retry_limit == 0


def test_contract_wait_words(page: dict[str, Contract]) -> None:
    samples = [(45.0, 45), (300.0, 5), (3 * 3600.0, 3), (2 * 86400.0, None)]
    expected = [fill(line, {"n": n} if n is not None else {})
                for line, (_, n) in zip(page["wait-words"].lines, samples, strict=True)]
    assert [wait_words(seconds) for seconds, _ in samples] == expected


def test_contract_permanent_details(page: dict[str, Contract]) -> None:
    from dsh.llm.network import PERMANENT

    assert sorted(page["permanent-details"].lines) == sorted(str(detail.value) for detail in PERMANENT)


# --- error codes and fix lines ---------------------------------------------------------------------------------


# The page's two computed families, and the code each is probed with.
FAMILIES = {"HTTP_<status>": "HTTP_422", "<FINISH_REASON>": "CONTENT_FILTER"}


def test_contract_error_codes(page: dict[str, Contract]) -> None:
    rows = {code(row[0]): row[2] for row in page["error-codes"].rows}
    assert set(rows) == {str(member.value) for member in ErrorCode} | set(FAMILIES)
    policy = RetryPolicy()
    retried = {shown: "yes" if policy.should_retry(FAMILIES.get(shown, shown), 0) else "no" for shown in rows}
    assert rows == retried


@dataclass(frozen=True)
class FixSample:
    """A failure that gets one fix line, and the values that line's placeholders take."""

    code: str
    detail: str | None = None
    endpoint: str | None = None
    endpoint_name: str | None = None
    sources: Mapping[str, str] | None = None
    values: Mapping[str, str] | None = None


SOURCES = {"api_key": "DEEPSEEK_API_KEY (environment)", "base_url": "DEEPSEEK_BASE_URL (environment)",
           "proxy": "HTTPS_PROXY (environment)"}
LOOPBACK = "http://127.0.0.1:4000"
AT_LOOPBACK = "the endpoint at 127.0.0.1:4000"
GATEWAY = {"gateway": "LiteLLM", "owner": "LiteLLM's"}
BASE = {"source": SOURCES["base_url"]}
PROXY = {"source": SOURCES["proxy"]}
D = FailureDetail
# In the page's order.
FIX_SAMPLES = [
    FixSample("AUTH"),
    FixSample("AUTH", sources=SOURCES, values={"source": SOURCES["api_key"]}),
    FixSample("AUTH", D.UPSTREAM_AUTH, LOOPBACK, "LiteLLM", values=GATEWAY),
    FixSample("QUOTA", endpoint="https://api.deepseek.com"),
    FixSample("QUOTA", endpoint=LOOPBACK, sources=SOURCES,
              values={"endpoint": AT_LOOPBACK, "source": SOURCES["api_key"]}),
    FixSample("QUOTA", D.UPSTREAM_QUOTA, LOOPBACK, "LiteLLM", values=GATEWAY),
    FixSample("RATE_LIMIT"),
    FixSample("RATE_LIMIT", D.CONCURRENCY_CAP),
    FixSample("SERVER", endpoint=LOOPBACK, values={"endpoint": AT_LOOPBACK}),
    FixSample("CONTEXT_WINDOW_EXCEEDED"),
    FixSample("CONTEXT_WINDOW_EXCEEDED", D.NOTHING_TO_COMPACT),
    FixSample("TRANSPORT", D.REFUSED, "http://127.0.0.1:1", sources=SOURCES, values={"host": "127.0.0.1:1", **BASE}),
    FixSample("TRANSPORT", D.NAME_NOT_FOUND, "https://nowhere.invalid/v1", sources=SOURCES,
              values={"name": "nowhere.invalid", **BASE}),
    FixSample("TRANSPORT", D.NAME_NOT_FOUND, "https://api.deepseek.com", values={"name": "api.deepseek.com"}),
    FixSample("TRANSPORT", D.NAME_UNRESOLVED, "https://nowhere.invalid/v1", sources=SOURCES,
              values={"name": "nowhere.invalid"}),
    FixSample("TRANSPORT", D.PLAIN_HTTP, "https://127.0.0.1:8765", values={"url": "http://127.0.0.1:8765"}),
    FixSample("TRANSPORT", D.CERTIFICATE, "https://self-signed.example"),
    FixSample("TRANSPORT", D.CERTIFICATE_NAME, "https://wrong.host.example", sources=SOURCES,
              values={"name": "wrong.host.example", **BASE}),
    FixSample("TRANSPORT", D.CERTIFICATE_EXPIRED, "https://expired.example"),
    FixSample("TRANSPORT", D.CERTIFICATE_NOT_YET_VALID, "https://future.example"),
    FixSample("TRANSPORT", D.INVALID_URL, "http://127.0.0.1:99999", sources=SOURCES, values=BASE),
    FixSample("PROXY", D.PROXY_AUTH, "http://127.0.0.1:3128", sources=SOURCES, values=PROXY),
    FixSample("PROXY", D.REFUSED, "http://127.0.0.1:3128", sources=SOURCES, values={"host": "127.0.0.1:3128", **PROXY}),
    FixSample("PROXY", D.NAME_NOT_FOUND, "http://proxy.invalid:3128", sources=SOURCES,
              values={"name": "proxy.invalid", **PROXY}),
    FixSample("PROXY", D.NAME_UNRESOLVED, "http://proxy.invalid:3128", sources=SOURCES,
              values={"name": "proxy.invalid"}),
    FixSample("PROXY", D.PROXY_DEPENDENCY, "socks5://127.0.0.1:1080"),
    FixSample("PROXY", None, "http://127.0.0.1:3128", sources=SOURCES, values=PROXY),
]


def test_contract_fix_lines(page: dict[str, Contract]) -> None:
    import dsh.repl.turn_end as turn_end

    rows = page["fix-lines"].rows
    shown = [(code(row[0]), None if row[1] == "–" else code(row[1])) for row in rows]
    assert shown == [(sample.code, sample.detail) for sample in FIX_SAMPLES]
    expected = ["  " + fill(code(row[2]), sample.values or {}) for row, sample in zip(rows, FIX_SAMPLES, strict=True)]
    rendered = [
        turn_end.fix_line(Failed(code=sample.code, message="example", detail=sample.detail, endpoint=sample.endpoint,
                               endpoint_name=sample.endpoint_name), sample.sources)
        for sample in FIX_SAMPLES
    ]
    assert rendered == expected
    # Every fix line the renderer has is on the page, and nothing else: a new one fails here until described.
    constants = {re.sub(r"\{(\w+)\}", r"<\1>", getattr(turn_end, name).strip())
                 for name in turn_end.__all__ if name.startswith("FIX_")}
    assert {code(row[2]) for row in rows} == constants


# --- subagents and MCP -------------------------------------------------------------------------------------------


def test_contract_subagent_failure(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent import acp
    from dsh.agent_loop.subagent.diagnostics import Failure, failure_line

    (line,) = page["subagent-failure"].lines
    failure = Failure(acp.Stage.PROMPT, acp.Category.AGENT_ERROR, stop_reason="max_turn_requests", error_code=-32603,
                      exit_status=ExitStatus(exit_code=9, signal="SIGKILL"))
    values = {"provider": "probe", "stage": "prompt", "category": "agent-error", "rpc code": -32603,
              "rpc name": "internal error", "stop reason": "max_turn_requests", "exit code": 9, "signal": "SIGKILL"}
    assert failure_line(failure, provider="probe") == fill(line, values)


def test_contract_subagent_failure_examples(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent import acp
    from dsh.agent_loop.subagent.diagnostics import Failure, failure_line

    stage, category = acp.Stage, acp.Category
    samples = [
        ("probe", Failure(stage.PROMPT, category.REMOTE_LIMIT, stop_reason="max_turn_requests")),
        ("probe", Failure(stage.INITIALIZE, category.PROCESS_EXIT, exit_status=ExitStatus(9, None))),
        ("probe", Failure(stage.PROCESS, category.PROCESS_EXIT, exit_status=ExitStatus(None, "SIGKILL"))),
        ("claude", Failure(stage.PROMPT, category.AGENT_ERROR, error_code=-32603)),
        ("probe", Failure(stage.PROMPT, category.AGENT_ERROR, error_code=-31999)),
    ]
    assert [failure_line(failure, provider=name) for name, failure in samples] == list(
        page["subagent-failure-examples"].lines)


def test_contract_rpc_code_names(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.diagnostics import ERROR_CODE_NAMES

    assert {int(row[0]): row[1] for row in page["rpc-code-names"].rows} == ERROR_CODE_NAMES


def test_contract_product_failure(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent import codex
    from dsh.agent_loop.subagent.diagnostics import Failure, failure_line

    (line,) = page["product-failure"].lines
    failure = Failure(codex.Stage.TURN, codex.Category.responseStreamDisconnected, http_status=502,
                      exit_status=ExitStatus(exit_code=1, signal="SIGTERM"))
    endpoint = "DeepSeek (Anthropic format)"
    values = {"product": "Codex", "endpoint": endpoint, "stage": "turn", "category": "responseStreamDisconnected",
              "status": 502, "exit code": 1, "signal": "SIGTERM"}
    assert failure_line(failure, provider="codex", product=codex.PRODUCT, endpoint=endpoint) == fill(line, values)


def _vocabularies() -> dict[str, tuple[type, type]]:
    from dsh.agent_loop.mcp import diagnostics as mcp
    from dsh.agent_loop.subagent import acp, claude_code, codex, dsh_sdk

    return {"ACP agent": (acp.Stage, acp.Category), "child dsh": (dsh_sdk.Stage, dsh_sdk.Category),
            "Claude Code": (claude_code.Stage, claude_code.Category), "Codex": (codex.Stage, codex.Category),
            "MCP server": (mcp.Stage, mcp.Category)}


def test_contract_stages(page: dict[str, Contract]) -> None:
    shown = {row[0]: (spans(row[1]), spans(row[2])) for row in page["stages"].rows}
    real = {name: ([m.value for m in stages], [m.value for m in categories])  # type: ignore[attr-defined]
            for name, (stages, categories) in _vocabularies().items()}
    assert shown == real


def test_contract_permission_line(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.diagnostics import permission_line

    (line,) = page["permission-line"].lines
    values = {"policy": "reject", "tool kind": "execute", "decision": "rejected"}
    assert permission_line("reject", "execute", "rejected") == fill(line, values)


def test_contract_unattended_lines(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.diagnostics import mode_warning, unattended_decision

    warning, decision = page["unattended-lines"].lines
    shown = fill(warning, {"provider": "probe", "mode": "bypassPermissions"})
    assert mode_warning("probe", "bypassPermissions") == shown
    values = {"product": "Claude Code", "mode": "dontAsk", "request": "tool permission", "decision": "denied"}
    assert unattended_decision("Claude Code", "dontAsk", "tool permission", "denied") == fill(decision, values)


def test_contract_model_lines(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.model_check import not_listed_line
    from dsh.llm.endpoint import legacy_warning

    bare, sourced, unlisted = page["model-lines"].lines
    values = {"model": "deepseek-v4-flash", "current": "deepseek-flash", "version": "V4.1-Flash", "family": "Flash",
              "source": "DSH_MODEL (environment)"}
    assert f"dsh: warning: {legacy_warning('deepseek-v4-flash', 'https://api.deepseek.com')}" == fill(bare, values)
    assert f"dsh: warning: {legacy_warning('deepseek-v4-flash', 'https://api.deepseek.com', values['source'])}" == (
        fill(sourced, values))
    listed = {"model": "deepseek-v9", "endpoint": "http://127.0.0.1:9", "names": "deepseek-flash, deepseek-v4-pro"}
    assert not_listed_line("deepseek-v9", ["deepseek-flash", "deepseek-v4-pro"], "http://127.0.0.1:9") == (
        fill(unlisted, listed))


def test_contract_image_lines(page: dict[str, Contract], tmp_path: Path) -> None:
    from dsh.agent_loop.image_input import ImageRules, prompt_images
    from tests.agent_loop.test_images import png

    other, unconfigured, unknown, sent = page["image-lines"].lines
    assert ImageRules().refusal("deepseek-v4-pro") == fill(other, {"model": "deepseek-v4-pro",
                                                                    "seeing": "deepseek-flash"})
    assert ImageRules(dialect="openai").refusal("deepseek-v4-pro") == fill(unconfigured, {"model": "deepseek-v4-pro"})
    assert ImageRules().refusal("local") == fill(unknown, {"model": "local"})
    (tmp_path / "shot.png").write_bytes(png(1280, 720))
    lines: list[str] = []
    prompt_images([tmp_path / "shot.png"], [], ImageRules(), "deepseek-flash", lines)
    size = (tmp_path / "shot.png").stat().st_size
    assert lines == [fill(sent, {"name": "shot.png", "format": "PNG", "width": 1280, "height": 720,
                                 "size": f"{size // 1024} KiB" if size >= 1024 else f"{size} bytes",
                                 "tokens": "1 105"})]


def test_contract_cache_cost_lines(page: dict[str, Contract]) -> None:
    import datetime

    from dsh.agent_loop.usage import UsageTally
    from dsh.llm.events import Usage
    from dsh.llm.models import model_info
    from dsh.repl.usage import cache_split_lines

    tally = UsageTally()
    tally.add(Usage(1000, 10, 1010, 960, 40), "deepseek-flash", model_info("deepseek-flash"),
              datetime.datetime(2026, 12, 5, 3, 0, tzinfo=datetime.UTC))  # a Saturday: off-peak
    hits, misses = page["cache-cost-lines"].lines
    values = {"hits": 960, "hit cost": "<$0.0001", "hit price": "$0.003", "misses": 40, "miss cost": "<$0.0001",
              "miss price": "$0.15"}
    assert cache_split_lines(tally) == [fill(hits, values), fill(misses, values)]


def test_contract_cache_drop_line(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.cache_watch import cache_drop_line

    (line,) = page["cache-drop-line"].lines
    values = {"rate": "12%", "previous rate": "96%",
              "what changed": "the tool list changed (MCP server docs re-listed its tools)"}
    assert cache_drop_line(0.12, 0.96, values["what changed"]) == fill(line, values)


def test_contract_cache_drop_causes(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.cache_watch import NOT_SEEN, NOTHING_CHANGED
    from tests.agent_loop.test_cache_watch import _two_requests

    shown = [spans(row[1]) for row in page["cache-drop-causes"].rows]
    produced = [_two_requests(change) for change in ("model", "system", "mcp", "tool", "compact", "history")]
    produced += [NOTHING_CHANGED, NOT_SEEN]
    assert len(shown) == len(produced)
    for forms, text in zip(shown, produced, strict=True):
        assert text is not None and pattern(forms[0]).fullmatch(text), (forms, text)
    assert _two_requests("nothing") is None


def test_contract_budget_lines(page: dict[str, Contract], tmp_path: Path) -> None:
    from dsh.agent_loop.budget import budget_line, budget_warning, unpriced_cap
    from dsh.repl.config import ConfigError, load_config
    from dsh.repl.turn_end import turn_end_line

    warning, cost, startup, unpriced = page["budget-lines"].lines
    assert budget_warning(0.4012, 0.5) == fill(warning, {"spent": "$0.40", "cap": "$0.50", "percent": 80})
    assert budget_line(0.0042, 0.5) == fill(cost, {"spent": "$0.0042", "cap": "$0.50", "percent": 0})
    path = tmp_path / "config.toml"
    path.write_text('max_cost = 0.5\nmodel = "local-llm"\n', encoding="utf-8")
    values = {"setting": f"max_cost in {path}", "model": "local-llm", "config file": path,
              "source": f"model in {path}"}
    with pytest.raises(ConfigError) as raised:
        load_config({}, {"DEEPSEEK_API_KEY": "sk-x"}, config_path=path)
    assert f"dsh: failed to start: {raised.value}" == fill(startup, values)
    with pytest.raises(ConfigError) as raised:
        load_config({"max_cost": "0.5"}, {"DEEPSEEK_API_KEY": "sk-x", "DSH_MODEL": "local-llm"}, config_path=path)
    values.update({"setting": "--max-cost (flag)", "source": "DSH_MODEL (environment)"})
    assert f"dsh: failed to start: {raised.value}" == fill(startup, values)
    assert turn_end_line(Failed(code="CONFIG", message=unpriced_cap("local-llm"))) == fill(unpriced, values)


def test_contract_diagnostic_bound(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.result import DIAGNOSTIC_LIMIT_BYTES, limit_diagnostic

    assert f"A diagnostic is at most {DIAGNOSTIC_LIMIT_BYTES} bytes of UTF-8" in page_text()
    bounded = limit_diagnostic("é" * DIAGNOSTIC_LIMIT_BYTES)  # two bytes a character: twice the bound
    assert bounded is not None and len(bounded.encode()) <= DIAGNOSTIC_LIMIT_BYTES
    kept = bounded.split("\n")[0]
    assert bounded == fill(page["diagnostic-bound"].text, {"the first bytes of the diagnostic": kept})
    assert limit_diagnostic("short") == "short"


def test_contract_subagent_headlines(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.result import FAILURE_HEADLINES, SubagentResult
    from dsh.agent_loop.subagent.tool import foreground_output

    shown = {spans(row[0])[0]: code(row[1]) for row in page["subagent-headlines"].rows}
    assert shown == FAILURE_HEADLINES
    unknown = foreground_output(SubagentResult(output="", stop_reason="a-stop-reason-dsh-does-not-know"))
    assert unknown.text == shown["error"]


def test_contract_subagent_result(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.result import SubagentResult
    from dsh.agent_loop.subagent.tool import foreground_output

    diagnostic = "Subagent failure (provider: probe; stage: session-run; category: child-error)"
    result = foreground_output(SubagentResult(output="half an answer", stop_reason="error", diagnostic=diagnostic))
    values = {"first line": "subagent run failed", "diagnostic": diagnostic, "partial output": "half an answer"}
    assert result.is_error and result.text == fill(page["subagent-result"].text, values)


def test_contract_job_status(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.jobs import status_line
    from dsh.agent_loop.subagent.result import SubagentResult

    diagnostic = "Subagent failure (provider: probe; stage: session-run; category: transport)"
    samples: list[tuple[Any, SubagentResult | None, dict[str, str]]] = [
        ("running", None, {}),
        ("completed", None, {}),
        ("killed", None, {}),
        ("failed", SubagentResult("", "error"), {"stop reason": "error"}),
        ("failed", SubagentResult("", "error", diagnostic), {"stop reason": "error", "diagnostic": diagnostic}),
    ]
    expected = [fill(line, values) for line, (_, _, values) in zip(page["job-status"].lines, samples, strict=True)]
    assert [status_line(status, result) for status, result, _ in samples] == expected


def test_contract_job_notice(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.subagent.jobs import notice_text

    (line,) = page["job-notice"].lines
    values = {"job id": "subagent-1", "label": "probe", "status line": "[status: completed]"}
    assert notice_text("subagent-1", "probe", "completed", None) == fill(line, values)


def test_contract_mcp_failure(page: dict[str, Contract]) -> None:
    from dsh.agent_loop.mcp.diagnostics import Category, McpFailure, Stage, failure_line

    (line,) = page["mcp-failure"].lines
    failure = McpFailure(Stage.CALL, Category.HTTP, exit_status=ExitStatus(exit_code=2, signal="SIGTERM"),
                         http_status=503)
    values = {"server": "docs", "stage": "call", "category": "http", "exit code": 2, "signal": "SIGTERM",
              "status": 503}
    assert failure_line("docs", failure) == fill(line, values)


# --- dsh acp ---------------------------------------------------------------------------------------------------


ACP_ENDS: dict[str, EndReason] = {
    "completed": Completed(),
    "max-tokens": MaxTokens(),
    "aborted": Aborted(),
    "disposed": Disposed(),
    "rejected": Rejected("vetoed"),
    "budget": BudgetStop(0.52, 0.5),
    "error with code `CONTENT_FILTER`": Failed(code="CONTENT_FILTER", message="content_filter"),
    "a kind this version does not know": OtherEnd("a-future-kind", {}),
}


def test_contract_acp_stop_reasons(page: dict[str, Contract]) -> None:
    from dsh.repl.acp_updates import stop_reason

    shown = {row[0]: code(row[1]) for row in page["acp-stop-reasons"].rows}
    assert set(shown) == set(ACP_ENDS)
    assert shown == {label: stop_reason(reason) for label, reason in ACP_ENDS.items()}
    assert stop_reason(Failed(code="SERVER", message="down")) is None  # answered with the error below


def test_contract_acp_error(page: dict[str, Contract]) -> None:
    from dsh.repl.acp_updates import TURN_FAILED, turn_error
    from dsh.repl.turn_end import fix_line, turn_end_line

    shape = page["acp-error"].json()
    assert shape["code"] == TURN_FAILED
    reason = Failed(code="SERVER", message="Internal Server Error", step=1, status=500, endpoint=LOOPBACK)
    failure = LlmError("Internal Server Error", ErrorCode.SERVER, status=500)
    message, data = turn_error(reason, failure, secrets=(), sources={})
    line, fix = turn_end_line(reason), fix_line(reason)
    assert fix is not None
    assert message == fill(shape["message"], {"turn-end line": line, "fix line": fix})
    assert set(data) == set(shape["data"])
    assert data["code"] == fill(shape["data"]["code"], {"error code": "SERVER"})
    assert data["fix"] == fill(shape["data"]["fix"], {"fix line": fix})
    assert data["chain"] and all(pattern(shape["data"]["chain"][0]).fullmatch(link) for link in data["chain"])
    no_fix = Failed(code="MALFORMED_RESPONSE", message="malformed SSE payload: {")
    message, data = turn_error(no_fix, None, secrets=(), sources={})
    assert (message, data["fix"]) == (turn_end_line(no_fix), None)


# --- dsh -p, its JSON, start-up, and the files a real run writes --------------------------------------------------


@dataclass
class Runs:
    """What real ``dsh -p`` runs against the loopback fault server printed and wrote."""

    home: Path
    completed: subprocess.CompletedProcess[str]
    failed: subprocess.CompletedProcess[str]
    record: Path
    capsule: Path
    config_error: subprocess.CompletedProcess[str]
    config_error_piped: subprocess.CompletedProcess[str]

    def sessions(self) -> list[Path]:
        return sorted((self.home / "state" / "dsh" / "sessions").glob("*.jsonl"))


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    home = tmp_path_factory.mktemp("contracts")
    (home / "state").mkdir()
    (home / "config").mkdir()
    write_config(home, "max_retries = 0\n")
    server = FaultServer(default="text").start_in_thread()
    try:
        env = {"DEEPSEEK_API_KEY": "sk-contractsTestKey000000000000", "DEEPSEEK_BASE_URL": f"http://127.0.0.1:{server.port}"}
        record, capsule = home / "record.jsonl", home / "capsule.jsonl"
        completed = dsh(home, "-p", "hello", "--output-format", "json", "--record", str(record), timeout=90, **env)
        server.push(Behaviour("http_500"))
        failed = dsh(home, "-p", "hello", "--output-format", "json", "--report", str(capsule), timeout=90, **env)
    finally:
        server.stop()
    broken = tmp_path_factory.mktemp("contracts-broken")
    (broken / "state").mkdir()
    write_config(broken, "model = [\n")
    config_error = dsh(broken, "-p", "hello", timeout=90)
    config_error_piped = dsh(broken, stdin="first\nsecond\n", timeout=90)
    yield Runs(home, completed, failed, record, capsule, config_error, config_error_piped)


def _exit_statuses() -> dict[str, int]:
    from dsh.repl.launch import EXIT_USAGE
    from dsh.repl.piped import Signals

    def by_signal(signum: int) -> int:
        signals = Signals(None, lambda: None)  # type: ignore[arg-type]  # exit_status reads only what it received
        signals.received = signum
        return signals.exit_status(Aborted().exit_code)

    kinds = ["completed", "error", "interrupted", "disposed", "rejected", "max-tokens", "budget"]
    statuses = {kind: EndReason.from_dict({"kind": kind}).exit_code for kind in kinds}
    statuses["aborted by SIGINT (Ctrl-C)"] = by_signal(signal.SIGINT)
    statuses["aborted by SIGTERM"] = by_signal(signal.SIGTERM)
    statuses["a usage or configuration error"] = EXIT_USAGE
    return statuses


def test_contract_exit_statuses(page: dict[str, Contract], runs: Runs) -> None:
    shown = {row[0]: int(row[1]) for row in page["exit-statuses"].rows}
    assert shown == _exit_statuses()
    assert shown["aborted by SIGINT (Ctrl-C)"] == Aborted().exit_code  # what a cancelled turn exits without a signal
    assert runs.completed.returncode == shown["completed"], runs.completed.stderr
    assert runs.failed.returncode == shown["error"], runs.failed.stderr
    assert runs.config_error.returncode == shown["a usage or configuration error"], runs.config_error.stderr


def test_contract_json_result(page: dict[str, Contract], runs: Runs) -> None:
    shape = page["json-result"].json()
    for run in (runs.completed, runs.failed):
        result = json.loads(run.stdout)
        assert set(result) == set(shape), run.stdout
        assert set(result["usage"]) == set(shape["usage"]), run.stdout
        assert set(shape["reason"]) <= set(result["reason"]), run.stdout
        assert result["type"] == shape["type"]
        assert result["exit_code"] == run.returncode
    failed = json.loads(runs.failed.stdout)["reason"]
    assert (failed["kind"], failed["code"], failed["message"]) == ("error", "SERVER", "Internal Server Error")


def test_contract_startup_failure(page: dict[str, Contract], runs: Runs) -> None:
    plain, piped = page["startup-failure"].lines
    assert pattern(plain).fullmatch(runs.config_error.stderr.strip()), runs.config_error.stderr
    assert pattern(piped, n=2).fullmatch(runs.config_error_piped.stderr.strip()), runs.config_error_piped.stderr
    assert runs.config_error_piped.returncode == 2


def test_contract_session_header(page: dict[str, Contract], runs: Runs) -> None:
    shape = page["session-header"].json()
    logs = runs.sessions()
    assert len(logs) == 2
    for log in logs:
        header = _records(log)[0]
        assert set(header) == set(shape), header
        assert (header["type"], header["version"]) == (shape["type"], shape["version"])


def test_contract_session_record(page: dict[str, Contract], runs: Runs) -> None:
    shape = page["session-record"].json()
    for log in runs.sessions():
        records = _records(log)[1:]
        assert records and all(set(record) == set(shape) for record in records), records
        assert [record["seq"] for record in records] == list(range(1, len(records) + 1))


def _event_classes() -> list[type]:
    import dsh.agent_loop.events as events

    found = [getattr(events, name) for name in events.__all__]
    return [cls for cls in found
            if isinstance(cls, type) and is_dataclass(cls) and isinstance(getattr(cls, "type", None), str)]


def _wire_fields(cls: type) -> list[str]:
    """The ``data`` fields of an event class, in wire order, ``?`` marking those written only when set."""
    kept = [f for f in fields(cls) if f.metadata.get("wire") != "live"]  # type: ignore[arg-type]
    kept.sort(key=lambda f: f.metadata.get("wire") != "leads")
    return [f.name + ("?" if f.metadata.get("wire") in ("if-set", "leads") else "") for f in kept]


def test_contract_events(page: dict[str, Contract], runs: Runs) -> None:
    shown = {code(row[0]): (row[1] == "yes", spans(row[2])) for row in page["events"].rows}
    real = {cls.type: (cls.durable, _wire_fields(cls)) for cls in _event_classes()}  # type: ignore[attr-defined]
    assert shown == real
    for log in runs.sessions():  # what a real run wrote: durable types only, data as the table says
        for record in _records(log)[1:]:
            durable, names = shown[record["type"]]
            assert durable, record
            required = {name for name in names if not name.endswith("?")}
            assert required <= set(record["data"]) <= {name.rstrip("?") for name in names}, record


def test_contract_trace_header(page: dict[str, Contract], runs: Runs) -> None:
    from dsh.llm.wire_trace import CAPSULE_TYPE, TRACE_TYPE, TRACE_VERSION

    shape = page["trace-header"].json()
    assert (shape["type"], shape["version"]) == (TRACE_TYPE, TRACE_VERSION)
    assert f'`"type": "{CAPSULE_TYPE}"`' in page_text()
    for path, kind in ((runs.record, TRACE_TYPE), (runs.capsule, CAPSULE_TYPE)):
        header = _records(path)[0]
        assert set(header) == set(shape), header
        assert (header["type"], header["version"]) == (kind, TRACE_VERSION)
        assert set(header["timeouts"]) == set(shape["timeouts"]), header


def _written_by_hand(path: Path) -> list[dict[str, Any]]:
    """A trace's failure records, written by the real writer: an error before any response, and a finding."""
    from dsh.llm.wire_trace import TraceWriter

    writer = TraceWriter(path, base_url="http://127.0.0.1:1")
    try:
        refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
        writer.end(1, 0.01, "error", where="connect", error=refused)
        writer.finding(1, "the certificate was issued by Example CA")
    finally:
        writer.close()
    return _records(path)[1:]


def test_contract_trace_records(page: dict[str, Contract], runs: Runs, tmp_path: Path) -> None:
    rows = {code(row[0]): (set(spans(row[1])), set(spans(row[2]))) for row in page["trace-records"].rows}
    records = [*_records(runs.record)[1:], *_records(runs.capsule)[2:], *_written_by_hand(tmp_path / "trace.jsonl")]
    assert {record["type"] for record in records} == set(rows)
    for record in records:
        always, sometimes = rows[record["type"]]
        assert always <= set(record) - {"type"} <= always | sometimes, record
    failed = [record for record in records if record["type"] == "end" and record["how"] == "error"]
    assert failed and all({"where", "error", "message", "chain"} <= set(record) for record in failed), failed


def test_contract_report_record(page: dict[str, Contract], runs: Runs) -> None:
    shape = page["report-record"].json()
    report = _records(runs.capsule)[1]
    assert set(report) == set(shape), report.keys()
    assert set(report["proxy"]) == set(shape["proxy"])
    assert set(shape["exchanges"]) <= set(report["exchanges"])
    assert report["type"] == shape["type"]
    assert report["turn"] == "[turn failed SERVER] Internal Server Error"
    assert report["fix"] is not None and not report["fix"].startswith(" ")  # without its indent, as the page says


# --- the exception tree ----------------------------------------------------------------------------------------


TREE_LINE = re.compile(r"^(?P<prefix>[│├└─ ]*)(?P<name>[A-Z]\w+)\s+(?P<module>dsh\.[\w.]+)(\s|$)")


def _drawn_tree() -> dict[str, tuple[str, str | None]]:
    """``{class: (module, parent)}`` as drawn in llm/errors.py's docstring."""
    import dsh.llm.errors as errors

    doc = errors.__doc__ or ""
    lines = [line[4:] for line in doc.split("\n")]  # the drawing is indented four spaces
    start = next(index for index, line in enumerate(lines) if line.startswith("HarnessError "))
    drawn: dict[str, tuple[str, str | None]] = {}
    parents: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = TREE_LINE.match(line)
        assert match, f"not a line of the drawing: {line!r}"
        depth = len(match.group("prefix")) // 4
        del parents[depth:]
        assert match.group("name") not in drawn, f"{match.group('name')} is drawn twice"
        drawn[match.group("name")] = (match.group("module"), parents[-1] if parents else None)
        parents.append(match.group("name"))
    return drawn


def _real_tree() -> dict[str, tuple[str, str | None]]:
    from dsh.llm.errors import HarnessError

    for top in ("dsh.llm", "dsh.agent_loop", "dsh.repl"):  # every module: a class is found only once imported
        package = importlib.import_module(top)
        for module in pkgutil.walk_packages(package.__path__, top + "."):
            importlib.import_module(module.name)
    real: dict[str, tuple[str, str | None]] = {"HarnessError": (HarnessError.__module__, None)}

    def walk(cls: type) -> None:
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("dsh."):  # tests may subclass it for their own use
                real[sub.__qualname__] = (sub.__module__, cls.__qualname__)
                walk(sub)

    walk(HarnessError)
    return real


def test_the_exception_tree_drawn_beside_the_classes_is_the_real_one() -> None:
    assert _drawn_tree() == _real_tree()


# --- citations -------------------------------------------------------------------------------------------------


OUTSIDE = "DESI" + "GN"  # the team's design document, which is not in this repository (spelled apart: not a citation)


def test_nothing_in_the_repository_cites_the_design_document_outside_it() -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    citing = []
    for name in filter(None, listed):
        path = REPO / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # removed since listed, or not text
        citing += [f"{name}:{number}" for number, line in enumerate(text.split("\n"), 1)
                   if re.search(rf"\b{OUTSIDE}\b( §|:| \(|\.md)", line)]
    assert citing == [], "cite docs/contracts.md (or another doc in docs/) instead"
