"""What a :class:`~dsh.agent_loop.session.Session` builds once its first turn is near: the model client,
the session log, the subagent toolkit and the agent over them.

The session imports this module when it first needs one of them, so the interactive front end draws its
first prompt without the HTTP client, the agent, its tools or the log (docs/architecture.md, "Start-up and
lazy imports"); everything here is imported at the top.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.agent_loop.agent import Agent
from dsh.agent_loop.continuation import ContinuationPolicy
from dsh.agent_loop.conversation import Conversation
from dsh.agent_loop.events import JobNotice
from dsh.agent_loop.frames import FrameLog
from dsh.agent_loop.guard import PromptGuard
from dsh.agent_loop.image_input import ImageRules
from dsh.agent_loop.mcp import McpManager
from dsh.agent_loop.mcp.config import McpServerConfig
from dsh.agent_loop.permissions import Permissions
from dsh.agent_loop.recap import Recap
from dsh.agent_loop.resume import open_session
from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.sandbox import sandbox_of
from dsh.agent_loop.session_config import client_settings
from dsh.agent_loop.session_list import SessionInfo, list_sessions, resolve_session
from dsh.agent_loop.session_log import SessionLog
from dsh.agent_loop.subagent import ParentContext
from dsh.agent_loop.subagent.jobs import user_notice
from dsh.agent_loop.subagent.tool import SubagentToolkit
from dsh.agent_loop.tool_hooks import ToolHooks
from dsh.agent_loop.tools import FileAccess, Tool, WebSettings, default_tools
from dsh.agent_loop.tools.skill import skill_tools
from dsh.agent_loop.tools.web_deepseek import (
    BASE_URL_WORDS,
    DeepSeekWeb,
    deepseek_origin,
    deepseek_web_tools,
)
from dsh.llm import Redactor
from dsh.llm.deepseek import open_client
from dsh.llm.endpoint import DIALECTS
from dsh.llm.models import ModelInfo

if TYPE_CHECKING:
    from dsh.agent_loop.hook_run import Hooks
    from dsh.agent_loop.session_config import Approver, EndpointClient, SessionConfig

__all__ = ["FrameLog", "build_agent", "create_log", "deepseek_client", "deepseek_web", "mcp_manager", "open_log",
           "saved_sessions", "settled_notice", "skill_tools", "subagent_toolkit", "web_settings"]


def deepseek_client(config: SessionConfig, env: Mapping[str, str]) -> EndpointClient:
    return open_client(client_settings(config, env))


def open_log(ident: str, root: Path, *, project: str, current: str | None, window: int = 0,
             info: ModelInfo | None = None) -> tuple[SessionLog, Conversation, Recap]:
    """A log to continue, its conversation rebuilt (cut to the model's ``window``, 0 for unknown) and its
    recap gathered in the same pass, its requests priced as ``info`` (the resuming model; None: not priced).

    ``last`` is this project's latest session with turns, never the ``current`` one.
    """
    target: str | Path = ident
    if ident == "last":
        target = resolve_session("last", root, project=project, exclude=current)
    recap = Recap(info=info)
    log, conversation = open_session(target, root=root, on_record=recap, record_kinds=recap.kinds, window=window)
    return log, conversation, recap


def saved_sessions(root: Path, project: str | None) -> list[SessionInfo]:
    return list_sessions(root, project=project)


def create_log(root: Path, *, cwd: str, session_id: str | None, project: str) -> SessionLog:
    # Written at the first turn: a launch that runs none leaves no empty session behind.
    return SessionLog.create(root=root, cwd=cwd, session_id=session_id, project=project, lazy=True)


def subagent_toolkit(
    tables: Mapping[str, Mapping[str, Any]], *, model: str, base_url: str, api_key: str | None, cwd: str,
    secrets: tuple[str, ...], frames: FrameLog | None = None, dialect: str | None = None, max_parallel: int = 0,
    request_gate: Callable[[], str | None] | None = None,
) -> SubagentToolkit:
    """The ``subagent`` and job tools of ``[subagents.NAME]`` tables, inheriting what the tables leave out;
    each run's JSON-RPC frames are remembered in ``frames``."""
    parent = ParentContext(model=model, base_url=base_url, api_key=api_key, cwd=cwd, secrets=secrets, frames=frames,
                           dialect=dialect, max_parallel=max_parallel, request_gate=request_gate)
    return SubagentToolkit.from_config(dict(tables), parent=parent)


def mcp_manager(
    configs: Mapping[str, McpServerConfig], *, env: Mapping[str, str], secrets: tuple[str, ...],
    notice: Callable[[str], None], on_failure: Callable[[BaseException], None], allow_mcp: bool,
    frames: FrameLog | None = None,
) -> McpManager:
    """The MCP manager of the ``[mcp_servers.NAME]`` servers; the servers start when
    it is entered. A server's words are masked with the session's secrets and the tables' own values."""
    holder: list[McpManager] = []

    def mask(text: str) -> str:
        return Redactor((*secrets, *holder[0].secrets()))(text) if holder else Redactor(secrets)(text)

    manager = McpManager(configs, environ=env, mask=mask, notice=notice, on_failure=on_failure, allow_mcp=allow_mcp,
                         frames=frames)
    holder.append(manager)
    return manager


def settled_notice(toolkit: SubagentToolkit, event: JobNotice) -> tuple[JobNotice, BaseException | None]:
    """A settled job's notice in the user's words (the model keeps the event's own text), and its raw cause."""
    job = toolkit.jobs.get(event.job_id)
    if job is None:
        return event, None
    cause = job.result.cause if job.result is not None else None
    return JobNotice(event.job_id, user_notice(job)), cause


def web_settings(config: SessionConfig, env: Mapping[str, str] | None = None) -> WebSettings | None:
    """web_fetch's settings from the config (None: ``web`` is off). A proxy the environment gave the endpoint is
    picked again for each URL (its scheme, ``NO_PROXY``); one from a flag or a file carries every fetch."""
    if not config.web:
        return None
    source = config.sources.get("proxy", "")
    explicit = config.proxy if config.proxy is not None and not source.endswith("(environment)") else None
    return WebSettings(allow=config.web_allow, proxy=explicit, proxy_source=source or WebSettings().proxy_source,
                       env=dict(os.environ if env is None else env))


def deepseek_web(config: SessionConfig, dialect: str, approve: Approver | None) -> list[Tool]:
    """With ``web`` on a deepseek-dialect endpoint: web_search and web_fetch through DeepSeek's own Search and
    Fetch APIs, at the base URL's origin with the session's key and the endpoint's proxy (tools/web_deepseek.py)."""
    settings = web_settings(config)
    if settings is None or dialect != DIALECTS[0]:
        return []
    api = DeepSeekWeb(deepseek_origin(config.base_url), config.api_key, settings, proxy=config.proxy,
                      proxy_source=config.sources.get("proxy", settings.proxy_source),
                      base_source=config.sources.get("base_url", BASE_URL_WORDS))
    return deepseek_web_tools(api, approve)


def build_agent(
    config: SessionConfig,
    client: EndpointClient,
    log: SessionLog | None,
    *,
    conversation: Conversation | None,
    model: str,
    approve: Approver | None,
    extra_tools: Sequence[Tool],
    retry: RetryPolicy,
    label: str,
    cwd: str,
    extra_secrets: Sequence[str] = (),
    files: FileAccess | None = None,
    permissions: Permissions | None = None,
    hooks: Hooks | None = None,
) -> Agent:
    """The agent over ``log`` (closed again if the agent cannot be built); ``extra_secrets`` are masked too (the
    MCP servers' values, McpManager.secrets); ``files``: an editor's file access (agent_loop/tools/file_access.py);
    ``hooks``: the session's (agent_loop/session_extensions.py), asked around each tool call and prompt."""
    # Without an approver nobody can answer: the shell tool then says so instead of "denied".
    tools = default_tools(approve, allow_edits=config.allow_edits, files=files,
                          sandbox=sandbox_of(config.sandbox, config.sandbox_network), web=web_settings(config))
    for tool in (*deepseek_web(config, client.dialect, approve), *extra_tools):  # DeepSeek's web replaces the local
        tools.add(tool, replace=True)
    tools.hooks = ToolHooks(hooks) if hooks is not None else None  # PreToolUse, PostToolUse (docs/hooks.md)
    try:
        agent = Agent(
            client, conversation=conversation, model=model, tools=tools, session=log, label=label, retry=retry,
            cwd=cwd, approver=approve,  # MCP tools ask through their ToolContext (agent_loop/mcp/tools.py)
            guard=PromptGuard(hook_command=config.prompt_hook, api_key=config.api_key,
                              prompt_hooks=hooks.check_prompt if hooks is not None else None),
            redactor=Redactor((*config.secrets, *client.secrets, *extra_secrets)),
            max_tokens=config.max_tokens, thinking=config.thinking, reasoning_effort=config.reasoning_effort,
            auto_compact=config.auto_compact, permissions=permissions,
            # Prefix completion is DeepSeek's beta extension: only a deepseek-dialect endpoint is asked for it.
            continuation=ContinuationPolicy(config.max_continuations, config.auto_continue,
                                            applies=lambda: client.dialect == DIALECTS[0]),
        )
    except BaseException:
        if log is not None:
            log.close()
        raise
    if hooks is not None:
        hooks.publish = agent.record  # hook/run is the agent's durable event, as a tool's is
    agent.image_rules = ImageRules(config.models, client.dialect, config.keep_images)  # agent_loop/image_input.py
    return agent
