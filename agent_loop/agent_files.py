"""Subagents defined in files: ``NAME.md`` with front matter and a system prompt, each one ``[subagents.NAME]`` table.

Claude Code's format (``.claude/agents/NAME.md``): front matter ``name``, ``description``, ``tools`` (a comma list
or a list), ``model``; the body is the subagent's system prompt. dsh reads two keys more: ``provider`` (``dsh``, the
default: a child dsh on the parent's endpoint; ``claude``; ``codex``; ``acp``) and ``agent`` (a ``[subagents.NAME]``
table of the user's whose command, environment and endpoint the file's subagent reuses; required for ``acp``).
:func:`find_agents` reads ``.dsh/agents/``, then ``.claude/agents/`` at the repository's root, then the user's
``$XDG_CONFIG_HOME/dsh/agents/``, as ``AGENTS.md`` is read (agent_loop/extension_files.py), and gives each file's
table, which the subagent toolkit builds exactly as a config table.

A repository chose these files, so one never picks a program to run, where a key goes, or a child's environment
(docs/extending.md, "Subagent files"): only the keys above are read, every other key gets one line and is
ignored, and a name a config table already has is the config's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.agent_loop.extension_files import NAME_PATTERN, SUFFIX, Folder, LeftOut, markdown_files, read_each, read_inside
from dsh.agent_loop.front_matter import FrontMatter, FrontMatterError, fold_line, split_front_matter
from dsh.llm.redact import MASK, Redactor

__all__ = ["KEYS", "PROVIDERS", "AgentFile", "find_agents"]

KEYS = ("name", "description", "tools", "model", "provider", "agent")  # all a file's front matter may set
# A file's provider -> the registry's kind (agent_loop/subagent/__init__.py) and how a line names it.
PROVIDERS: dict[str, tuple[str, str]] = {
    "dsh": ("dsh", "a child dsh"), "claude": ("claude-code", "Claude Code"),
    "claude-code": ("claude-code", "Claude Code"), "codex": ("codex", "Codex"), "acp": ("acp", "an ACP agent"),
}
_KINDS = {"dsh": "dsh", "dsh-sdk": "dsh", "claude": "claude-code", "claude-code": "claude-code", "codex": "codex",
          "acp": "acp"}  # a config table's provider, aliases included, -> its kind
_DESCRIPTION_CHARS = 1024  # as a skill's (agent_loop/skills.py)
# A model or a tool name reaches a child's argv (``--model X``): never a leading dash, never a blank or a comma.
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]{0,127}")
_TOOL = re.compile(r"[A-Za-z0-9_*][A-Za-z0-9_.*-]{0,127}")
_INHERIT = "inherit"  # Claude Code's "the main conversation's model": the provider's own default here


@dataclass(frozen=True, slots=True)
class AgentFile:
    name: str
    table: dict[str, Any]  # the ``[subagents.NAME]`` table it becomes
    path: Path


def find_agents(folders: Sequence[Folder], configured: Mapping[str, Mapping[str, Any]],
                redactor: Redactor) -> tuple[list[AgentFile], list[str]]:
    """The subagents of ``folders`` (earlier folders win a name; ``configured`` tables win over any file), sorted by
    name; and one line per file left out, skipped, or read with a key ignored."""
    notices: list[str] = []
    found: dict[str, AgentFile] = {}

    def read(path: Path, entry: os.DirEntry[str], folder: Folder) -> AgentFile | None:
        return _read_agent(path, entry.name[: -len(SUFFIX)], folder, configured, redactor, notices)

    for path, agent in read_each(folders, notices, markdown_files, read):
        if agent.name in configured:
            notices.append(f"{path} skipped: the subagent {agent.name} is configured by a "
                           f"[subagents.{agent.name}] table")
        elif agent.name in found:
            notices.append(f"{path} skipped: the subagent {agent.name} is read from {found[agent.name].path}")
        else:
            found[agent.name] = agent
    return sorted(found.values(), key=lambda agent: agent.name), notices


def _read_agent(path: Path, stem: str, folder: Folder, configured: Mapping[str, Mapping[str, Any]],
                redactor: Redactor, notices: list[str]) -> AgentFile | None:
    text = read_inside(path, folder)
    if text is None:
        return None
    try:
        front, body = split_front_matter(text)
    except FrontMatterError as exc:
        raise LeftOut(f"its front matter is not valid ({exc})") from None
    name = _text(front, "name") or stem
    if not NAME_PATTERN.fullmatch(name):
        raise LeftOut("its name is not a subagent name (letters, digits, '.', '_', '-'; at most 64)")
    provider = _text(front, "provider") or "dsh"
    if provider not in PROVIDERS:
        raise LeftOut(f"its provider is not one of {', '.join(('dsh', 'claude', 'codex', 'acp'))}")
    kind, label = PROVIDERS[provider]
    table = _base_table(front, kind, configured)
    ignored = [fold_line(key, 64) for key in front if key not in KEYS]
    if ignored:
        notices.append(f"{path}: ignored in its front matter: {', '.join(ignored)} (an agent file sets only "
                       f"{', '.join(KEYS)}; never a program, an endpoint, a key or an environment)")
    model = _text(front, "model")
    if model and model != _INHERIT:
        if not _MODEL.fullmatch(model):
            raise LeftOut("its model is not a model name")
        table["model"] = model
    tools = _tools(front)
    if tools is not None and kind == "claude-code":
        table["tools"] = tools
    elif tools is not None:
        notices.append(f"{path}: its tools are ignored: {label} has no tool allowlist (docs/extending.md)")
    description = redactor(fold_line(_text(front, "description"), _DESCRIPTION_CHARS))
    if description:
        table["description"] = description
    body = body.strip("\n")
    prompt = redactor(body)
    if prompt and kind == "acp":
        notices.append(f"{path}: its body is not sent: ACP has no system prompt")
    elif prompt:
        table["system_prompt"] = prompt
    if prompt != body:
        notices.append(f"{path} read with secrets masked ({MASK})")
    return AgentFile(name, table, path)


def _base_table(front: FrontMatter, kind: str, configured: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The table the file's subagent starts from: its ``agent``'s (a config table of the same provider, whose
    command, environment and endpoint the user chose), else only the provider. ``acp`` needs one: a file never
    names a program."""
    agent = _text(front, "agent")
    if not agent:
        if kind == "acp":
            raise LeftOut("provider acp needs agent: NAME, naming a [subagents.NAME] table of yours with "
                          "provider = \"acp\" (a file never names a program to run)")
        return {"provider": kind}
    base = configured.get(agent) if NAME_PATTERN.fullmatch(agent) else None
    if base is None or _KINDS.get(str(base.get("provider"))) != kind:
        raise LeftOut(f"its agent is not a configured {kind} subagent ([subagents.NAME] with provider = "
                      f"\"{kind}\")")
    table = {key: value for key, value in base.items() if key != "description"}
    table["provider"] = kind
    return table


def _text(front: FrontMatter, key: str) -> str:
    value = front.get(key, "")
    if not isinstance(value, str):
        raise LeftOut(f"its front matter's {key} is not a string")
    return value.strip()


def _tools(front: FrontMatter) -> list[str] | None:
    """``tools``: Claude Code's comma list or a YAML list; None when the file has none (all of the provider's)."""
    value = front.get("tools")
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        raise LeftOut("its front matter's tools is not a list")
    names = [part.strip() for part in (value.split(",") if isinstance(value, str) else value) if part.strip()]
    if not all(_TOOL.fullmatch(name) for name in names):
        raise LeftOut("its tools are not tool names (letters, digits, '_', '.', '*', '-')")
    return names
