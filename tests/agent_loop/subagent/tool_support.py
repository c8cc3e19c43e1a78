"""What the ``subagent`` tool and job tests share: scripted-child tables, a toolkit, a tool context, an agent."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dsh.agent_loop import Agent, RetryPolicy, ToolContext, ToolRegistry
from dsh.agent_loop.subagent import ParentContext
from dsh.agent_loop.subagent.tool import SubagentToolkit
from dsh.llm import DeepSeekClient
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries
from tests.agent_loop.agent_support import Recorder

REPO = str(Path(__file__).resolve().parents[3])
SCRIPTED = [sys.executable, "-m", "dsh.repl.demo.scripted_dsh_child"]
FAST = {"exit_wait": 1.0, "eof_grace": 1.0, "term_grace": 1.0}
CHILD_ERROR = "Subagent failure (provider: dsh; stage: session-run; category: child-error; stop reason: error)"
TASK = f"Summarise the notes {canaries.TASK_TEXT}"
DESCRIPTION = f"summary {canaries.TOOL_INPUT}"


def scripted(**script: Any) -> dict[str, Any]:
    script.setdefault("stderr", f"noise {canaries.CHILD_STDERR}")
    return {
        "provider": "dsh",
        "command": SCRIPTED,
        **FAST,
        "env": {"PYTHONPATH": REPO, "DSH_SCRIPTED_CHILD": json.dumps(script), "X": canaries.CHILD_ENV},
    }


def toolkit(tables: dict[str, dict[str, Any]], url: str = "http://127.0.0.1:9") -> SubagentToolkit:
    return SubagentToolkit.from_config(tables, ParentContext(model="probe-model", base_url=url))


def context(notices: list[tuple[str, str]] | None = None) -> ToolContext:
    def post(text: str, job_id: str) -> None:
        if notices is not None:
            notices.append((text, job_id))

    return ToolContext(cwd=Path(REPO), turn=1, notify=lambda event: None, post_notice=post)


def call(name: str, **arguments: Any) -> Behaviour:
    return Behaviour("tool_call", id=f"call_{name}", name=name, arguments=json.dumps(arguments))


def agent_for(server: FaultServer, kit: SubagentToolkit) -> tuple[Agent, Recorder]:
    """An agent on ``server`` with the toolkit's tools, and a recorder of its events."""
    client = DeepSeekClient(base_url=server.url, api_key=None)
    agent = Agent(
        client, model="probe-model", tools=ToolRegistry(kit.tools()), cwd=REPO, retry=RetryPolicy(max_retries=0)
    )
    recorder = Recorder()
    agent.subscribe(recorder)
    return agent, recorder
