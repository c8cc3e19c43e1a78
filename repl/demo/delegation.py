"""Demo data for delegation: subagent tables for ``dsh --demo`` and one scenario per failure category.

Plain data plus two small functions, so the demo can use it without ``agent_loop`` importing ``repl``
or ``fixtures`` (imports point one way). The front end:

* builds its :class:`~dsh.agent_loop.subagent.tool.SubagentToolkit` from :func:`demo_subagent_tables`
  (plus the user's own ``[subagents.NAME]`` tables) with the demo server as the parent's base URL, so
  the child dsh streams from the same embedded endpoint;
* calls :func:`register_demo_scenarios` with ``dsh.repl.demo.catalogue.register_scenario`` and
  ``dsh.llm.loopback.fault_server.Behaviour``.

``pip install dsh-agent`` alone has no ACP or Claude Code SDK: the tables that need a missing extra are
left out of the demo's subagents (so the toolkit never builds them), their turns fail (CONFIG) with the one
line :func:`~dsh.agent_loop.subagent.extras.missing_extra_hint` prints, naming the extra to install, and
``/scenario`` marks them with it (:func:`scenario_extra`). ``make demo`` installs the ``acp`` extra.

Each scenario scripts the main model to call the ``subagent`` tool (and, for a real child dsh, the
child's own request), then to answer. The child dsh is the real ``dsh serve --stdio``; protocol faults
a real child cannot produce come from ``repl/demo/scripted_dsh_child.py``; the ACP agent is
``repl/demo/acp_agent.py``. ``expect`` is the exact line (or line prefix) the REPL prints.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.agent_loop.subagent.extras import missing_extra_hint, provider_extra
from dsh.llm.codes import ErrorCode
from dsh.llm.errors import HarnessError

__all__ = [
    "DELEGATION_SCENARIOS",
    "DelegationScenario",
    "all_delegation_tables",
    "demo_subagent_tables",
    "missing_extra_line",
    "register_demo_scenarios",
    "runnable_tables",
    "scenario_extra",
]

_FAIL = "    Subagent failure (provider: {name}; "


def _scripted(script: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "provider": "dsh",
        "command": [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"],
        "env": {"DSH_SCRIPTED_CHILD": json.dumps(script)},
        "eof_grace": 1.0,
        "term_grace": 1.0,
    }


def _acp(**env: str) -> dict[str, Any]:
    return {
        "provider": "acp",
        "command": sys.executable,
        "args": ["-m", "dsh.repl.demo.acp_agent"],
        "env": {**{f"ACP_FAKE_{key.upper()}": value for key, value in env.items()}},
    }


def missing_extra_line(name: str, table: Mapping[str, Any]) -> str | None:
    """The install hint for subagent table ``name`` when its provider's extra is missing, else None."""
    kind = str(table.get("provider", "dsh"))
    if kind == "codex" and table.get("command"):
        return None  # an explicit app-server command: the bundled binary (the codex extra) is not needed
    return missing_extra_hint(name, kind)


def scenario_extra(table: Mapping[str, Any]) -> str | None:
    """The extra a scenario that runs subagent ``table`` needs, installed or not (None: the core is enough)."""
    kind = str(table.get("provider", "dsh"))
    if kind == "codex" and table.get("command"):
        return None  # as in missing_extra_line: an explicit app-server command needs no bundled binary
    return provider_extra(kind, table)


def runnable_tables(tables: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The tables whose provider can run with what is installed."""
    return {name: table for name, table in tables.items() if missing_extra_line(name, table) is None}


def demo_subagent_tables() -> dict[str, dict[str, Any]]:
    """``[subagents.NAME]`` tables for the demo that can run as installed (see :func:`runnable_tables`)."""
    return runnable_tables(all_delegation_tables())


def all_delegation_tables() -> dict[str, dict[str, Any]]:
    """Every delegation table: a real child dsh, scripted faults, the fake ACP agent."""
    return {
        "dsh": {"provider": "dsh"},  # the real `dsh serve --stdio`; model and base URL from the parent
        "dsh-garbage": _scripted({"prompt": "garbage"}),
        "dsh-no-terminal": _scripted({"prompt": "no_terminal", "text": "An answer with no turn end."}),
        "dsh-odd-end": _scripted({"reason": {"kind": "paused"}}),
        "dsh-disposed": _scripted({"reason": {"kind": "disposed"}, "text": "Started, then the session closed."}),
        "dsh-exit": _scripted({"prompt": "exit", "exit_code": 9}),
        "dsh-exit-later": _scripted({"prompt": "exit", "exit_code": 9, "delay": 1.5, "text": "Read 3 of 5 files."}),
        "dsh-killed": _scripted({"prompt": "exit", "signal": "SIGKILL"}),
        "dsh-bad-init": _scripted({"initialize": "error"}),
        "dsh-missing": {"provider": "dsh", "command": ["/nonexistent/dsh-child", "serve", "--stdio"]},
        "dsh-slow": _scripted({"prompt": "hang", "text": "Still working on it..."}),
        "dsh-working": _scripted({"prompt": "hang", "hang_for": 8, "text": "Still working on it..."}),
        "acp": _acp(text="The ACP agent did the task."),
        "acp-limit": _acp(stop="max_turn_requests", text="Stopped at the turn limit."),
        "acp-permission": _acp(permission="execute", stop="max_tokens", text="Needed a shell command."),
        "acp-exit": _acp(exit_at="prompt", exit_code="9"),
        "acp-odd-stop": _acp(stop="paused"),
        "acp-no-session": _acp(session_id="omit"),
        "acp-error": _acp(error_at="prompt"),
        "acp-auto": _acp(modes="auto", permission="execute", text="Ran the command myself."),
    }


@dataclass(frozen=True, slots=True)
class DelegationScenario:
    name: str
    summary: str
    provider: str  # a name from demo_subagent_tables()
    expect: str
    child: tuple[tuple[str, dict[str, Any]], ...] = ()  # fault-server behaviours for a real child's requests
    task: str = "Summarise the project README in two sentences."
    background: bool = False
    after: tuple[tuple[str, dict[str, Any]], ...] = field(default=())  # more main-model replies, in order


_ANSWER = "The subagent's result is above; when a run fails, its diagnostic line says why.\n"


def _failing(name: str, summary: str, provider: str, facts: str, **more: Any) -> DelegationScenario:
    """A scenario whose run fails: the REPL prints the failure line naming ``provider`` with these ``facts``."""
    return DelegationScenario(name, summary, provider, _FAIL.format(name=provider) + facts, **more)


def _failures(*rows: tuple[str, str, str, str]) -> tuple[DelegationScenario, ...]:
    """:func:`_failing` for each row of ``(name, summary, provider, facts)``."""
    return tuple(_failing(*row) for row in rows)


# fmt: off
DELEGATION_SCENARIOS: tuple[DelegationScenario, ...] = (
    DelegationScenario("delegate-dsh", "delegate to a child dsh (it streams from the demo endpoint too)", "dsh",
                       "  [tool result] The child dsh read the task and answered it.",
                       child=(("text", {"text": "The child dsh read the task and answered it."}),)),
    _failing("dsh-child-error", "the child dsh's own request fails (HTTP 401): child-error", "dsh",
             "stage: session-run; category: child-error; stop reason: error)", child=(("http_401", {}),)),
    DelegationScenario("dsh-max-tokens", "the child dsh hits its output-token limit", "dsh",
                       "  [tool result] Error: subagent run hit its token limit before finishing",
                       child=(("length", {}),)),
    DelegationScenario("dsh-refusal", "the child dsh's prompt guard refuses the task: refusal", "dsh",
                       "  [tool result] Error: subagent declined the task",
                       task="Use the key AKIAABCDEFGHIJKLMNOP to upload the report."),
    *_failures(
        ("dsh-protocol", "the child prints garbage on its JSON-RPC stdout: protocol", "dsh-garbage",
         "stage: session-run; category: protocol)"),
        ("dsh-missing-terminal", "the child answers the prompt without a turn/end: missing-terminal",
         "dsh-no-terminal", "stage: session-run; category: missing-terminal)"),
        ("dsh-child-unknown", "the child ends its turn with an unknown kind: child-unknown", "dsh-odd-end",
         "stage: session-run; category: child-unknown)"),
        ("dsh-child-disposed", "the child's session is disposed mid-turn: child-disposed (reported as cancelled)",
         "dsh-disposed", "stage: session-run; category: child-disposed; stop reason: disposed)"),
        ("dsh-transport", "the child exits with code 9 mid-prompt: transport + exit code", "dsh-exit",
         "stage: session-run; category: transport; exit code: 9)"),
        ("dsh-signal", "the child is killed by SIGKILL mid-prompt: transport + signal", "dsh-killed",
         "stage: session-run; category: transport; signal: SIGKILL)"),
        ("dsh-initialize", "the child rejects initialize: initialize protocol", "dsh-bad-init",
         "stage: initialize; category: protocol)"),
        ("dsh-configuration", "the configured child command does not exist: configuration", "dsh-missing",
         "stage: initialize; category: configuration)"),
    ),
    DelegationScenario("dsh-background", "a background job fails; its completion notice arrives inline",
                       "dsh-exit-later",
                       "[job] subagent-1 (dsh-exit-later) failed: ", background=True,
                       after=(("text", {"text": "Started it in the background; dsh tells me when it ends.\n"}),
                              ("tool_call", {"id": "call_demo_job_output", "name": "job_output",
                                             "arguments": '{"job_id": "subagent-1"}',
                                             "reasoning": "The job finished; read what it left."}))),
    DelegationScenario("dsh-background-slow", "a background job that keeps working: drive it with /jobs, "
                       "/job subagent-1 and /kill subagent-1 (it finishes after 8 s)", "dsh-working",
                       "  [tool result] started background subagent job subagent-1", background=True,
                       after=(("text", {"text": "Started it in the background; /jobs shows it, /kill stops it.\n"}),)),
    DelegationScenario("delegate-acp", "delegate to an ACP agent (the fake one, on the official SDK)", "acp",
                       "  [tool result] The ACP agent did the task."),
    _failing("acp-remote-limit", "the ACP agent stops with max_turn_requests: remote-limit", "acp-limit",
             "stage: prompt; category: remote-limit; stop reason: max_turn_requests)"),
    DelegationScenario("acp-permission", "the ACP agent asks to run a command, the policy rejects it, then the "
                       "agent stops at max_tokens: the permission line is the diagnostic",
                       "acp-permission",
                       "    Subagent permission decision (policy: reject; request: execute; decision: rejected)"),
    *_failures(
        ("acp-process-exit", "the ACP agent exits with code 9 mid-prompt: process-exit", "acp-exit",
         "stage: process; category: process-exit; exit code: 9)"),
        ("acp-unknown-stop", "the ACP agent sends an unknown stop reason: unknown", "acp-odd-stop",
         "stage: prompt; category: unknown)"),
        ("acp-new-session", "the ACP agent's session/new has no session id: protocol", "acp-no-session",
         "stage: new-session; category: protocol)"),
        ("acp-agent-error", "the ACP agent answers session/prompt with a JSON-RPC error: agent-error",
         "acp-error", "stage: prompt; category: agent-error; error code: -32603 (internal error))"),
    ),
    DelegationScenario("acp-reject-mode", "the ACP agent offers no mode that asks and runs a command unasked "
                       "under reject: the host-side warning line", "acp-auto",
                       "    Subagent permission warning (provider: acp-auto; mode: auto): tool calls ran without a "
                       "permission request under policy reject"),
)
# fmt: on


def _tool_call_arguments(scenario: DelegationScenario) -> str:
    args: dict[str, Any] = {"description": "demo delegation", "prompt": scenario.task, "provider": scenario.provider}
    if scenario.background:
        args["run_in_background"] = True
    return json.dumps(args)


def scenario_setup(
    scenario: DelegationScenario, behaviour: Callable[..., Any], table: Mapping[str, Any] | None = None
) -> Callable[[Any], None]:
    """The demo setup for one scenario: script the main model's tool call, the child's requests, answers.

    ``table`` is the scenario's ``[subagents.NAME]`` table (default: the one in this module). When its
    provider's extra is not installed, the turn fails (CONFIG) with the one install hint line as its message.
    """

    def setup(turn: Any) -> None:
        own = table if table is not None else all_delegation_tables()[scenario.provider]
        hint = missing_extra_line(scenario.provider, own)
        if hint is not None:
            turn.failure = HarnessError(hint, ErrorCode.CONFIG)
            return
        turn.push(
            behaviour("tool_call", id="call_demo_subagent", name="subagent", arguments=_tool_call_arguments(scenario),
                      reasoning="This is self-contained: delegate it to a subagent."),
            *(behaviour(name, **params) for name, params in scenario.child),
            *(behaviour(name, **params) for name, params in scenario.after),
        )
        turn.server.default = behaviour("text", text=_ANSWER)

    return setup


def register_demo_scenarios(register: Callable[..., Any], behaviour: Callable[..., Any]) -> None:
    """``register`` is the catalogue's ``register_scenario``; ``behaviour`` the fault server's ``Behaviour``."""
    tables = all_delegation_tables()
    for scenario in DELEGATION_SCENARIOS:
        register(scenario.name, scenario.summary, scenario_setup(scenario, behaviour), expect=scenario.expect,
                 extra=scenario_extra(tables[scenario.provider]))
