"""``dsh doctor``'s steps after the request path: the environment (versions, terminal, state directory, each
configured subagent), the sandbox when one is configured, and each configured MCP server (docs/doctor.md).

Its own module because these checks look at this machine and its configured children, not at the endpoint:
they run whatever the request path found (repl/doctor.py walks both, in order, into one report:
repl/doctor_report.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from dsh.agent_loop.build import web_settings
from dsh.agent_loop.context import BASE_SYSTEM_PROMPT
from dsh.agent_loop.hook_run import doctor_checks, session_hooks
from dsh.agent_loop.settings import SettingsError
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.acp import AcpInitializeRun
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.tools import default_tools
from dsh.agent_loop.usage import fixed_prefix_tokens
from dsh.llm import Redactor, redact_text
from dsh.llm.context_size import server_context
from dsh.llm.request_body import wire_tool
from dsh.repl import __version__
from dsh.repl.config import Config, state_dir
from dsh.repl.doctor_report import FAIL, MARKS, PASS, SKIP, Step, milliseconds

if TYPE_CHECKING:
    from dsh.agent_loop.mcp import McpManager, McpServerConfig, ServerStatus

__all__ = ["FIX_CONTEXT_SIZE", "FIX_STATE_DIR", "SUBAGENT_TIMEOUT", "EnvironmentChecks", "context_step", "mcp_step",
           "prefix_estimate"]

SUBAGENT_TIMEOUT = 20.0  # per subagent check
_MAX_AUTH_METHODS = 5  # an ACP agent's advertised auth methods shown, at most
_ENTRY_POINT = b"from dsh.repl.cli import main"  # what pip's launcher for `dsh` and `dsh-agent` imports
FIX_STATE_DIR = "  fix: dsh cannot write its state directory — check the permissions of {path}"

# The server said its context size and dsh's fixed prefix alone does not fit in it (docs/endpoints.md).
FIX_CONTEXT_SIZE = ("  fix: give the server more than {prefix} tokens of context (dsh's fixed prefix) and room for"
                    " the conversation: {flag}")


def prefix_estimate(config: Config) -> int:
    """About how many tokens every request of this configuration sends before the conversation: the system
    prompt (the configured one, or dsh's) and the built-in tools' specs, estimated as the usage line estimates."""
    system = "\n\n".join(text for text in (config.system_prompt or BASE_SYSTEM_PROMPT, config.system_prompt_append)
                          if text)
    tools = default_tools(None, allow_edits=config.allow_edits, web=web_settings(config))
    return fixed_prefix_tokens(system, json.dumps([wire_tool(spec) for spec in tools.specs()], ensure_ascii=False))


async def context_step(client: Any, config: Config, models: Any) -> Step | None:
    """The context size the server says it serves (``models``: its ``GET /models`` answer, None when there was
    none), against dsh's fixed prefix; None when it says none."""
    found = await server_context(client, config.model, name=client.endpoint.name, models=models)
    if found is None:
        return None
    prefix = prefix_estimate(config)
    facts = {"tokens": found.tokens, "where": found.where, "server": found.server, "prefix_tokens": prefix}
    said = f"{found.server} serves {found.tokens} tokens of context ({found.where})"
    if prefix >= found.tokens:
        return Step("context", FAIL, f"{said}; dsh's fixed prefix (system prompt and tool specs) alone is about "
                    f"{prefix} tokens", FIX_CONTEXT_SIZE.format(prefix=prefix, flag=found.flag), facts)
    return Step("context", PASS, f"{said}; dsh's fixed prefix is about {prefix} tokens", facts=facts)


_PRODUCT_BINARIES = {"claude-code": "claude", "claude": "claude", "codex": "codex"}  # what the product providers run


class _Stdout(Protocol):
    def isatty(self) -> bool: ...

    def fileno(self) -> int: ...


# What the doctor reads of a provider's settings (agent_loop/subagent/): the argv prefix a table names, and
# Claude Code's cli_path; declared here so that a new provider with a ``command`` is checked as well.
@runtime_checkable
class _NamesCommand(Protocol):
    @property
    def command(self) -> Sequence[str] | None: ...


@runtime_checkable
class _NamesCliPath(Protocol):
    @property
    def cli_path(self) -> str | None: ...


def _configured_command(settings: object) -> tuple[str, ...]:
    """The command a ``[subagents.NAME]`` table names (``command``, else a ``cli_path``); empty: the default."""
    command = tuple(settings.command or ()) if isinstance(settings, _NamesCommand) else ()
    cli_path = settings.cli_path if isinstance(settings, _NamesCliPath) else None
    return command if command or not cli_path else (cli_path,)


class EnvironmentChecks:
    """The steps after the request path, against one configuration; ``clock`` is the doctor's."""

    def __init__(self, config: Config, env: Mapping[str, str], *, stdout: _Stdout, clock: Callable[[], float]) -> None:
        self.config = config
        self.env = env
        self.stdout = stdout
        self.secrets = config.secrets
        self._now = clock

    # -- the environment ------------------------------------------------------------------------------

    async def environment(self) -> Step:
        def version(name: str) -> str:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                return "not installed"

        facts: dict[str, Any] = {"dsh": __version__, "python": platform.python_version(),
                                 "httpx": version("httpx"), "prompt_toolkit": version("prompt_toolkit")}
        parts = [f"dsh {facts['dsh']}, Python {facts['python']}, httpx {facts['httpx']}, "
                 f"prompt_toolkit {facts['prompt_toolkit']}"]
        parts.append(self._terminal(facts))
        if (other := self._other_dsh(facts)) is not None:
            parts.append(other)
        state_text, state_ok = self._state_dir(facts)
        parts.append(state_text)
        details, subagents_ok = await self._subagents(facts)
        parts.append(f"{len(details)} subagent{'s' if len(details) != 1 else ''} configured" if details
                     else "no subagents configured")
        status = PASS if state_ok and subagents_ok else FAIL
        fix = None if state_ok else FIX_STATE_DIR.format(path=state_dir(self.env))
        return Step("environment", status, "; ".join(parts), fix, facts, details)

    def _other_dsh(self, facts: dict[str, Any]) -> str | None:
        """When the ``dsh`` that ``PATH`` finds first is another program (DeepSeek's own harness installs one named
        so): where it is, and this one's other name. Ours is the script that imports dsh's entry point."""
        found = shutil.which("dsh", path=self.env.get("PATH", os.defpath))
        if found is None:
            return None
        try:
            with open(found, "rb") as script:  # a launcher script is small; a binary is not ours either way
                ours = _ENTRY_POINT in script.read(4096)
        except OSError:
            ours = False
        facts["dsh_on_path"] = {"path": found, "this_dsh": ours}
        return None if ours else f"dsh on PATH is another program ({found}): run this one as dsh-agent"

    def _terminal(self, facts: dict[str, Any]) -> str:
        term = self.env.get("TERM", "")
        try:
            tty = self.stdout.isatty()
        except (AttributeError, ValueError):
            tty = False
        colour = tty and not self.env.get("NO_COLOR") and term != "dumb"
        facts["terminal"] = {"term": term or None, "tty": tty, "colour": colour}
        if not tty:
            return f"TERM={term or '(unset)'}, stdout is not a terminal, no colour"
        try:
            size = os.get_terminal_size(self.stdout.fileno())
            shown = f"{size.columns}x{size.lines}"
            facts["terminal"]["size"] = [size.columns, size.lines]
        except (OSError, ValueError):
            shown = "size unknown"
        why = "" if colour else (" (NO_COLOR)" if self.env.get("NO_COLOR") else f" (TERM={term})")
        return f"TERM={term or '(unset)'}, {shown}, {'colour' if colour else 'no colour' + why}"

    def _state_dir(self, facts: dict[str, Any]) -> tuple[str, bool]:
        directory = state_dir(self.env)
        try:
            info = directory.stat()
        except FileNotFoundError:
            facts["state_dir"] = {"path": str(directory), "exists": False}
            return f"state {directory} (not created yet)", True
        except OSError:
            facts["state_dir"] = {"path": str(directory), "exists": None}
            return f"state {directory} cannot be read", False
        mode = stat.filemode(info.st_mode)
        writable = stat.S_ISDIR(info.st_mode) and os.access(directory, os.W_OK | os.X_OK)
        facts["state_dir"] = {"path": str(directory), "exists": True, "mode": mode, "writable": writable}
        if not writable:
            return f"state {directory} ({mode}) is not writable", False
        note = "; readable by others: chmod 700 it" if info.st_mode & 0o077 else ""
        return f"state {directory} ({mode}{note})", True

    # -- the subagents --------------------------------------------------------------------------------

    async def _subagents(self, facts: dict[str, Any]) -> tuple[list[str], bool]:
        lines: list[str] = []
        ok = True
        checked: list[dict[str, Any]] = []
        for name, table in self.config.subagents.items():
            passed, line = await self._subagent(name, table)
            ok = ok and passed
            lines.append(f"{MARKS[PASS if passed else FAIL]} {line}")
            checked.append({"name": name, "ok": passed, "text": line})
        facts["subagents"] = checked
        return lines, ok

    async def _subagent(self, name: str, table: Mapping[str, Any]) -> tuple[bool, str]:
        """``(passed, line)`` for one ``[subagents.NAME]``: its command found, and for ACP, ``initialize`` and
        ``session/new`` (no prompt)."""
        kind = table.get("provider")
        try:
            provider = build_provider(name, table, ParentContext(self.config.model, self.config.base_url,
                                                                 self.config.api_key, os.getcwd()))
        except Exception as exc:  # SubagentConfigError names the table and key only
            return False, f"{name} ({kind!s:.40}): {redact_text(str(exc), self.secrets)}"
        label = f"{name} ({kind})"
        if provider.problem is not None:  # the same: the table and the key, never a value
            return False, f"{label}: {redact_text(provider.problem, self.secrets)}"
        if provider.hint:
            return False, f"{label}: {provider.hint}"
        command = _configured_command(provider.settings)
        product = _PRODUCT_BINARIES.get(str(kind))
        if not command and product is not None and shutil.which(product):
            command = (product,)
        if not command:
            return True, f"{label}: configured (its bundled binary is used)"
        program = command[0]
        found = shutil.which(program)
        if found is None:
            return False, f"{label}: command not found: {redact_text(program, self.secrets)[:120]}"
        if product is not None:
            return await self._product_starts(label, (found, *command[1:]))
        if kind != "acp":
            return True, f"{label}: command found ({found})"
        probe = dataclasses.replace(provider, run_type=AcpInitializeRun)
        run = probe.run(SubagentRequest(description="dsh doctor", prompt="", cwd=os.getcwd()))
        assert isinstance(run, AcpInitializeRun)
        return await self._acp_answers(name, label, found, run)

    async def _acp_answers(self, name: str, label: str, found: str, run: AcpInitializeRun) -> tuple[bool, str]:
        """An ACP agent's ``initialize`` and ``session/new``, within :data:`SUBAGENT_TIMEOUT`."""
        result = None
        async with run:
            with anyio.move_on_after(SUBAGENT_TIMEOUT):
                result = await run.result()
        if result is None:
            return False, f"{label}: Subagent failure (provider: {name}; stage: initialize; category: timeout)"
        if result.stop_reason != "completed":
            line = f"{label}: {result.diagnostic or 'Subagent failure (provider: ' + name + ')'}"
            return False, line + (self._auth_methods(run) if run.auth_required else "")
        agent_name, agent_version = run.agent_info or ("", "")
        shown = " ".join(part for part in (agent_name[:60], agent_version[:30]) if part) or "no name given"
        return True, (f"{label}: command found ({found}); initialize answered: {redact_text(shown, self.secrets)}; "
                      "session/new answered")

    def _auth_methods(self, run: AcpInitializeRun) -> str:
        """What an agent that wants authentication offers: its methods' ids and names (child text, clipped
        and masked here; the output's sanitizer makes it inert)."""
        methods = [f"{method_id[:40]} ({method_name[:60]})" if method_name else method_id[:40]
                   for method_id, method_name in run.auth_methods[:_MAX_AUTH_METHODS]]
        if len(run.auth_methods) > _MAX_AUTH_METHODS:
            methods.append(f"{len(run.auth_methods) - _MAX_AUTH_METHODS} more")
        offered = ", ".join(methods) if methods else "none advertised"
        return f"; authentication required, the agent's auth methods: {redact_text(offered, self.secrets)}"

    async def _product_starts(self, label: str, argv: tuple[str, ...]) -> tuple[bool, str]:
        """Whether a product's binary starts: ``--version`` exits 0. Only the exit status is shown."""
        env: dict[str, str] = {name: self.env[name] for name in ("PATH", "HOME", "LANG") if name in self.env}
        outcome: Any = None
        with anyio.move_on_after(SUBAGENT_TIMEOUT):
            try:
                outcome = await anyio.run_process([*argv, "--version"], check=False, env=env, stdin=subprocess.DEVNULL,
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                return False, f"{label}: {argv[0]} --version did not start"
        if outcome is None:
            return False, f"{label}: {argv[0]} --version did not exit within {SUBAGENT_TIMEOUT:g}s"
        if outcome.returncode != 0:
            return False, f"{label}: {argv[0]} --version exited {outcome.returncode}"
        return True, f"{label}: {argv[0]} starts (--version exited 0)"

    # -- the sandbox and the MCP servers ------------------------------------------------------------------

    async def sandbox(self) -> Step:
        """``sandbox = "bwrap"``: one command run the way run_shell runs each (docs/safety.md)."""
        from dsh.agent_loop.sandbox import sandbox_check  # only with a sandbox configured

        started = self._now()
        problem = await anyio.to_thread.run_sync(sandbox_check, self.env)
        took = self._now() - started
        network = "network on (sandbox_network)" if self.config.sandbox_network else "no network"
        facts: dict[str, Any] = {"sandbox": self.config.sandbox, "network": self.config.sandbox_network,
                                 "ms": round(took * 1000, 1)}
        if problem is not None:
            return Step("sandbox", FAIL, f'sandbox = "bwrap" but {problem.what}', f"  fix: {problem.fix}", facts)
        return Step("sandbox", PASS, f"bwrap ran a test command in a sandbox in {milliseconds(took)}; {network}",
                    facts=facts)

    async def hooks(self) -> list[Step]:
        """One step per hook (config.toml's, and with ``claude_settings`` the project's ``.claude/settings.json``'s),
        each run once on a sample payload in this folder (docs/hooks.md): whether it answers, never its words."""
        cwd, redact = os.getcwd(), Redactor(self.secrets)
        try:
            hooks = session_hooks(self.config.hooks, self.config.claude_settings, cwd=cwd, redact=redact,
                                  session_id=lambda: "doctor")
        except SettingsError as exc:
            return [Step("hooks", FAIL, redact_text(str(exc), self.secrets))]
        if hooks is None:
            return []
        checks = await doctor_checks(hooks.specs, cwd=cwd, redact=redact)
        return [Step("hook", PASS if ok else FAIL, line, facts={"hook": spec.name, "event": spec.event})
                for (ok, line), spec in zip(checks, hooks.specs, strict=True)]

    async def mcp_servers(self) -> list[Step]:
        """One step per ``[mcp_servers.NAME]`` (docs/mcp.md): start it, ``initialize``, list its tools, stop it.
        A failure is the server's closed line (docs/contracts.md); its own words stay host-side (dsh.log)."""
        if not self.config.mcp_servers:
            return []
        from dsh.agent_loop.mcp import McpManager  # only with servers configured (read at load: repl/config.py)

        holder: list[McpManager] = []

        def mask(text: str) -> str:
            return Redactor((*self.secrets, *(holder[0].secrets() if holder else ())))(text)

        manager = McpManager(self.config.mcp_servers, environ=self.env, mask=mask, notice=lambda text: None)
        holder.append(manager)
        async with manager:
            await manager.wait_ready()
            if any(row.state == "starting" for row in manager.status()):
                await manager.wait_ready()  # a server's own startup_timeout ends it: give that a moment to land
            rows = manager.status()
        return [mcp_step(row, manager.configs) for row in rows]


def mcp_step(row: ServerStatus, configs: Mapping[str, McpServerConfig]) -> Step:
    """One MCP server's step from its row in the manager's status (``configs``: its startup_timeout)."""
    name = f"MCP server {row.name}"
    facts: dict[str, Any] = {"server": row.name, "state": row.state}
    if row.state == "ready":
        facts["tools"] = row.tools
        tools = f"{row.tools} tool{'s' if row.tools != 1 else ''}"
        return Step(name, PASS, f"started, initialize answered, {tools} listed", facts=facts)
    if row.state == "disabled":
        return Step(name, SKIP, "disabled (enabled = false)", facts=facts)
    if row.state == "failed" and row.line:
        facts["line"] = row.line
        return Step(name, FAIL, row.line, facts=facts)
    timeout = configs[row.name].startup_timeout
    line = f"MCP server failure (server: {row.name}; stage: initialize; category: timeout)"
    return Step(name, FAIL, f"{line} (not ready within startup_timeout {timeout:g}s)", facts=facts)
