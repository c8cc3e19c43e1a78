"""``/model`` and ``/profile``: which model the next turn uses and how it runs, and ``/cost``'s split by model.

``/model`` with no name lists what the endpoint's ``GET /models`` answers (read as the first turn's check reads it,
agent_loop/model_check.py), the current model marked; ``/model NAME`` and ``/profile NAME`` switch from the next
request, and a switch is a ``model/set`` record in the session log that a resume restores (docs/prompt.md,
"Models and profiles"). Names from the endpoint are its text: folded, masked and cut before they are shown.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import anyio

from dsh.agent_loop.events import ModelSet
from dsh.agent_loop.model_check import MAX_NAME_CHARS, ModelLister, listed_names
from dsh.agent_loop.usage import UsageTally
from dsh.llm import redact_text
from dsh.llm.models import ModelSettings
from dsh.repl.host import Host
from dsh.repl.profiles import profile_lines, switched_words
from dsh.repl.usage import usage_line

__all__ = ["LIST_TIMEOUT", "MAX_LISTED", "cost_by_model_lines", "run_model", "run_profile", "switch_model"]

LIST_TIMEOUT = 10.0  # seconds /model waits for GET /models
MAX_LISTED = 50  # names /model shows
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")


def switch_model(shell: Host, name: str) -> None:
    """The next request uses ``name``; a session log already written records it (``model/set``). A log not yet
    written (no turn so far) is not started by a switch: the first turn's requests name the model anyway."""
    session = shell.session
    session.set_model(name)
    log = session.log
    if log is not None and log.written and not log.closed:
        log.append(ModelSet(name))


async def _listed(shell: Host) -> tuple[list[str] | None, str]:
    """The endpoint's model names (None when it does not list them) and its address as lines show it."""
    session = shell.session
    if session.agent is None:
        session.ensure_agent()  # the client comes with the agent; its session log is written at the first turn
    client = session.client
    if client is None or not isinstance(client, ModelLister):
        return None, ""
    names = None
    with anyio.move_on_after(LIST_TIMEOUT):
        try:
            status, body = await client.get_json("/models", tapped=False)  # not the turns' record
        except Exception:  # not served, refused, malformed: the line says it is not listed, never a failure
            return None, client.base_url_display
        names = listed_names(body) if status == 200 else None
    return names or None, client.base_url_display


def _shown(name: str, secrets: tuple[str, ...]) -> str:
    folded = " ".join(redact_text(name, secrets).split())
    return folded if len(folded) <= MAX_NAME_CHARS else folded[: MAX_NAME_CHARS - 1] + "…"


async def run_model(shell: Host, arg: str) -> None:
    """``/model [NAME]``."""
    if arg:
        if not _MODEL_NAME.match(arg):
            shell.say(f"not a model name: {arg[:60]!r}")
            return
        switch_model(shell, arg)
        shell.say(f"model set to {arg} (from the next turn)")
        return
    current = shell.session.model
    names, endpoint = await _listed(shell)
    if names is None:
        shell.say(f"model: {current} (the endpoint{' at ' + endpoint if endpoint else ''} does not list its models)")
        return
    secrets = shell.config.secrets
    lines = [f"models listed by GET /models at {endpoint}:"]
    lines += [f"{'*' if name == current else ' '} {_shown(name, secrets)}" for name in names[:MAX_LISTED]]
    if len(names) > MAX_LISTED:
        lines.append(f"  … and {len(names) - MAX_LISTED} more")
    if current not in names:
        lines.append(f"* {current} (the current model: not listed)")
    lines.append("/model NAME switches from the next turn")
    shell.say("\n".join(lines))


def _current(shell: Host) -> dict[str, Any]:
    spent = shell.session.spent
    config = shell.config
    return {"model": shell.session.model, "thinking": config.thinking, "reasoning_effort": config.reasoning_effort,
            "max_tokens": config.max_tokens, "max_cost": spent[1] if spent is not None else None}


async def run_profile(shell: Host, arg: str) -> None:
    """``/profile [NAME]``: list the profiles, or switch to one from the next request."""
    profiles = shell.config.profiles
    if not arg:
        shell.say("\n".join(profile_lines(profiles, shell.config.profile)))
        return
    table = profiles.get(arg)
    if table is None:
        known = ", ".join(profiles) or "none configured"
        shell.say(f"no profile {arg[:40]!r} (profiles: {known}; [profiles.NAME] in config.toml)")
        return
    current = _current(shell)
    changes = {key: (current[key], value) for key, value in table.items() if current[key] != value}
    if "model" in changes:
        switch_model(shell, table["model"])
    if "max_cost" in changes:
        shell.session.set_cap(table["max_cost"])
    rest = {key: value for key, value in table.items() if key in ("thinking", "reasoning_effort", "max_tokens")}
    shell.config = dataclasses.replace(shell.config, profile=arg, **rest)
    shell.session.config = shell.config  # an agent built later (the first turn, /resume) is built with these
    agent = shell.session.agent
    if agent is not None:
        agent.thinking, agent.max_tokens = shell.config.thinking, shell.config.max_tokens
        agent.reasoning_effort = shell.config.reasoning_effort
    shell.say(switched_words(arg, changes))


def cost_by_model_lines(tally: UsageTally, models: Mapping[str, ModelSettings]) -> list[str]:
    """``/cost``'s lines by model when the session used more than one, each priced as itself."""
    by_model = tally.by_model or {}
    if len(by_model) < 2:
        return []
    return [f"  {name}: {part.requests} request{'s' if part.requests != 1 else ''}: {usage_line(part, models)}"
            for name, part in by_model.items()]
