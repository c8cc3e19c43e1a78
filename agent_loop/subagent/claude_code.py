"""Claude Code as a subagent: the official ``claude-agent-sdk`` driving the ``claude`` CLI, unattended.

Config (``[subagents.NAME]``, ``provider = "claude-code"``; the ``dsh-agent[claude]`` extra installs the SDK,
whose wheel bundles the CLI)::

    cli_path = "/opt/claude/bin/claude"   # optional; "claude" means the one on PATH; default: bundled
    model = "claude-sonnet-4-5"           # optional
    permission_mode = "dontAsk"           # dontAsk (default) | acceptEdits | plan | bypassPermissions
    max_turns = 20                        # optional
    max_budget_usd = 1.0                  # optional
    setting_sources = []                  # which Claude Code settings to load (default: none)
    env = { ANTHROPIC_API_KEY = "..." }   # explicit child environment entries
    pass_env = ["ANTHROPIC_API_KEY"]      # parent variables passed through by name
    endpoint = "deepseek"                 # DeepSeek's Anthropic-format API with the parent's DeepSeek key
    system_prompt = "You review code."    # optional: replaces Claude Code's system prompt (--system-prompt)
    tools = ["Read", "Grep"]              # optional: the only built-in tools it has (--tools; never approved)
    endpoint_url = "https://…/anthropic"  # optional: where (default: the parent's DeepSeek origin + /anthropic)

With ``endpoint`` the model defaults to the parent's (see :mod:`dsh.agent_loop.subagent._anthropic_endpoint`).

Unattended means: no session persistence, the fixed permission mode, and a permission callback that
denies with a fixed message (recorded as an unattended decision). The CLI's environment is the
managed-process allowlist plus the explicit entries above — nothing else of the parent — and its stderr
never reaches the terminal (see :mod:`dsh.agent_loop.subagent._claude_transport`).

A run succeeds only for a ``result`` with subtype ``success``, ``is_error`` false and a non-blank
``result``, followed by a normal end of the stream. Anything else is ``error`` with the line
``Product subagent failure (product: Claude Code; stage: …; category: …[; exit code: …][; signal: …])``,
built from closed facts only: the stage, the SDK's exact result subtype (or our own ``invalid-success``,
``missing-result``, ``process-exit``, ``configuration``, ``unknown``), the typed exception class and
the observed exit.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio

from dsh.agent_loop.process import ExitStatus
from dsh.agent_loop.subagent import ConfigTable, ParentContext, SubagentConfigError, diagnostics
from dsh.agent_loop.subagent._anthropic_endpoint import ChildEndpoint, child_endpoint
from dsh.agent_loop.subagent._product import explicit_env
from dsh.agent_loop.subagent.diagnostics import Failure, safe_token, unattended_decision
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.agent_loop.subagent.run import Outcome, Provider, Run, configured

if TYPE_CHECKING:
    from dsh.agent_loop.subagent._claude_transport import ManagedCLITransport  # imports the SDK: only when run

__all__ = [
    "DENY_MESSAGE",
    "ERROR_SUBTYPES",
    "PERMISSION_MODES",
    "PRODUCT",
    "Category",
    "ClaudeCodeConfig",
    "ClaudeCodeRun",
    "Stage",
    "from_config",
]

log = logging.getLogger(__name__)

PRODUCT = "Claude Code"
PERMISSION_MODES: frozenset[str] = frozenset({"dontAsk", "acceptEdits", "plan", "bypassPermissions"})
ERROR_SUBTYPES: frozenset[str] = frozenset(
    {"error_during_execution", "error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"}
)
SETTING_SOURCES: frozenset[str] = frozenset({"user", "project", "local"})
DENY_MESSAGE = (
    "Permission denied: this Claude Code subagent runs unattended and cannot ask for approval. "
    "Continue without this tool call."
)
_EXIT_WAIT = 2.0  # a transport failure: how long to wait for the CLI's exit, which then classifies it


class Stage(diagnostics.Stage):
    QUERY_START = "query-start"
    QUERY_RUN = "query-run"
    PROCESS = "process"
    TEARDOWN = "teardown"


class Category(diagnostics.Category):
    # the SDK's result subtypes, verbatim
    ERROR_DURING_EXECUTION = "error_during_execution"
    ERROR_MAX_TURNS = "error_max_turns"
    ERROR_MAX_BUDGET_USD = "error_max_budget_usd"
    ERROR_MAX_STRUCTURED_OUTPUT_RETRIES = "error_max_structured_output_retries"
    # our own facts
    INVALID_SUCCESS = "invalid-success"
    MISSING_RESULT = "missing-result"
    PROCESS_EXIT = "process-exit"
    CONFIGURATION = "configuration"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ClaudeCodeConfig:
    cli_path: str | None = None
    command: tuple[str, ...] | None = None  # a whole argv prefix instead of cli_path (tests, wrappers)
    model: str | None = None
    permission_mode: str = "dontAsk"
    max_turns: int | None = None
    max_budget_usd: float | None = None
    setting_sources: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    eof_grace: float = 3.0
    term_grace: float = 2.0
    endpoint: ChildEndpoint | None = None  # ``endpoint = "deepseek"``: where the CLI is sent, with which key
    system_prompt: str | None = None  # ``--system-prompt``: Claude Code's own replaced, as for its agent files
    tools: tuple[str, ...] | None = None  # ``--tools``: the built-in tools it has (never an approval)

    @classmethod
    def from_mapping(
        cls, name: str, config: Mapping[str, Any], parent: ParentContext | None = None
    ) -> ClaudeCodeConfig:
        """Raises :class:`SubagentConfigError` (naming the table and key only)."""
        table = ConfigTable.checked(name, config, _CONFIG_KEYS)
        mode = table.choice("permission_mode", "dontAsk", PERMISSION_MODES)
        sources = table.names("setting_sources")
        if not set(sources) <= SETTING_SOURCES:
            raise SubagentConfigError(name, f"setting_sources may only name: {', '.join(sorted(SETTING_SOURCES))}")
        max_turns = table.positive_int("max_turns")
        command = table.optional_command()
        env, pass_env = table.env(), table.names("pass_env")
        parent = parent or ParentContext()
        endpoint = child_endpoint(table, parent, env, pass_env)
        return cls(
            cli_path=table.string("cli_path"),
            command=command,
            model=table.string("model", parent.model if endpoint is not None else None),
            permission_mode=mode or "dontAsk",
            max_turns=max_turns,
            max_budget_usd=table.number("max_budget_usd"),
            setting_sources=sources,
            env=env,
            pass_env=pass_env,
            eof_grace=table.seconds("eof_grace", 3.0),
            term_grace=table.seconds("term_grace", 2.0),
            endpoint=endpoint,
            system_prompt=table.string("system_prompt"),
            tools=table.names("tools") if "tools" in config else None,
        )


_CONFIG_KEYS = frozenset(
    {"provider", "cli_path", "command", "args", "model", "permission_mode", "max_turns", "max_budget_usd",
     "setting_sources", "env", "pass_env", "eof_grace", "term_grace", "endpoint", "endpoint_url", "system_prompt",
     "tools"}
)  # fmt: skip


def from_config(
    name: str, config: Mapping[str, Any], parent: ParentContext | None = None
) -> Provider[ClaudeCodeConfig]:
    """``[subagents.NAME]`` with ``provider = "claude-code"``. Nothing is inherited from ``parent``, except
    with ``endpoint = "deepseek"``: its DeepSeek key, its base URL's origin and its model.

    Never raises: a bad table gives runs that fail with ``stage: query-start; category:
    configuration`` (the problem, which names only the table and key, goes to the host log now).
    """
    return configured(name, ClaudeCodeRun, lambda: ClaudeCodeConfig.from_mapping(name, config, parent))


# -- one run --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Observed:
    """What the message stream told us, kept as typed values only."""

    texts: list[str] = field(default_factory=list)
    result: Any = None  # the latest ResultMessage
    denied: bool = False

    def partial_output(self) -> str:
        return "\n\n".join(self.texts)


class ClaudeCodeRun(Run[ClaudeCodeConfig]):
    product = PRODUCT
    configuration = Failure(Stage.QUERY_START, Category.CONFIGURATION)

    def __init__(self, provider: Provider[ClaudeCodeConfig], request: SubagentRequest) -> None:
        super().__init__(provider, request)
        self._observed = _Observed()
        self.transport: ManagedCLITransport | None = None  # once built (tests read its pid)
        self.started = anyio.Event()  # set once the CLI is up and initialized
        endpoint = provider.settings.endpoint if provider.settings is not None else None
        self.endpoint = endpoint.label if endpoint is not None else None

    def partial_output(self) -> str:
        return self._observed.partial_output()

    async def execute(self) -> Outcome:
        client: Any = None
        failure: Failure | None
        try:
            sdk, transport_module = _load_sdk()
        except ImportError as exc:  # the dsh-agent[claude] extra is not installed
            return self._outcome(Failure(Stage.QUERY_START, Category.CONFIGURATION, cause=exc), None)
        try:
            if not os.path.isdir(self.request.cwd):
                raise NotADirectoryError("the working directory does not exist")
            argv = self._argv(sdk)
            self.transport = transport_module.ManagedCLITransport(
                argv,
                env=self._child_env(sdk),
                cwd=self.request.cwd,
                eof_grace=self.settings.eof_grace,
                term_grace=self.settings.term_grace,
            )
            self.process = self.transport.process  # a failed run keeps its stderr's last lines host-side
            client = sdk.ClaudeSDKClient(
                options=sdk.ClaudeAgentOptions(can_use_tool=self._deny_tool), transport=self.transport
            )
        except (sdk.CLINotFoundError, NotADirectoryError) as exc:
            failure = Failure(Stage.QUERY_START, Category.CONFIGURATION, cause=exc)
        except Exception as exc:  # e.g. an environment entry the OS cannot take
            failure = Failure(Stage.QUERY_START, Category.UNKNOWN, cause=exc)
        else:
            failure = None
        teardown: Failure | None = None
        try:
            if client is not None and failure is None:
                failure = await self._drive(sdk, client)
        finally:
            with anyio.CancelScope(shield=True):
                teardown = await self._teardown(client)
        return self._outcome(failure, teardown)

    # -- start and run ----------------------------------------------------------------------------

    async def _drive(self, sdk: ModuleType, client: Any) -> Failure | None:
        stage = Stage.QUERY_START
        error: Exception | None = None
        async with anyio.create_task_group() as tg:

            async def bound_linger() -> None:
                # After its result the CLI gets stdin EOF and exits; one that lingers is left to teardown.
                await result_seen.wait()
                await anyio.sleep(self.settings.eof_grace)
                tg.cancel_scope.cancel()

            result_seen = anyio.Event()
            tg.start_soon(bound_linger)
            try:
                await client.connect(self._prompt_stream())
                stage = Stage.QUERY_RUN
                self.started.set()
                async with contextlib.aclosing(client.receive_messages()) as messages:
                    async for message in messages:
                        self._observe(sdk, message)
                        if isinstance(message, sdk.ResultMessage):
                            result_seen.set()
            except Exception as exc:
                error = exc
            tg.cancel_scope.cancel()
        if error is not None:
            return await self._classify(sdk, stage, error)
        return self._judge_result(sdk)

    async def _prompt_stream(self) -> AsyncIterator[dict[str, Any]]:
        yield {
            "type": "user",
            "message": {"role": "user", "content": self.request.prompt},
            "parent_tool_use_id": None,
            "session_id": "",
        }

    async def _deny_tool(self, tool_name: str, tool_input: dict[str, Any], context: Any) -> Any:
        sdk, _ = _load_sdk()
        self._observed.denied = True
        return sdk.PermissionResultDeny(message=DENY_MESSAGE)

    def _observe(self, sdk: ModuleType, message: Any) -> None:
        if isinstance(message, sdk.AssistantMessage):
            # A synthetic message carrying an API error is the product's error prose, not the agent's work.
            if message.error is None and message.parent_tool_use_id is None:
                text = "".join(block.text for block in message.content if isinstance(block, sdk.TextBlock))
                if text.strip():
                    self._observed.texts.append(text)
        elif isinstance(message, sdk.ResultMessage):
            self._observed.result = message
            if isinstance(message.permission_denials, list) and message.permission_denials:
                self._observed.denied = True

    def _judge_result(self, sdk: ModuleType) -> Failure | None:
        """The stream ended normally: is its last ``result`` a real success?"""
        exit_status = self._exit_status()
        result = self._observed.result
        if result is None:
            return Failure(Stage.QUERY_RUN, Category.MISSING_RESULT, exit_status=exit_status)
        subtype = result.subtype
        if subtype == "success":
            if result.is_error is False and isinstance(result.result, str) and result.result.strip():
                return None
            return Failure(Stage.QUERY_RUN, Category.INVALID_SUCCESS, exit_status=exit_status)
        return Failure(Stage.QUERY_RUN, _subtype_category(subtype), exit_status=exit_status)

    async def _classify(self, sdk: ModuleType, stage: Stage, exc: Exception) -> Failure:
        """A typed SDK failure -> closed facts. By type only; the message is never read."""
        exit_stage = Stage.PROCESS if stage is Stage.QUERY_RUN else stage
        if isinstance(exc, sdk.ResultError):
            subtype = exc.subtype
            # an is_error "success": an API failure the CLI reported
            category = Category.INVALID_SUCCESS if subtype == "success" else _subtype_category(subtype)
            return Failure(stage, category, exit_status=self._exit_status(), cause=exc)
        if isinstance(exc, sdk.ProcessError):
            # The CLI ended before a terminal result (or after a result, abnormally).
            return Failure(exit_stage, Category.PROCESS_EXIT, exit_status=self._exit_status(), cause=exc)
        if isinstance(exc, sdk.CLINotFoundError):  # the configured CLI cannot be executed
            return Failure(stage, Category.CONFIGURATION, cause=exc)
        if isinstance(exc, sdk.CLIConnectionError):
            # A write to a child that is dying: the observed exit classifies it, not the transport error.
            status = await self._wait_exit()
            if status is not None and status != ExitStatus(0, None):
                return Failure(exit_stage, Category.PROCESS_EXIT, exit_status=status, cause=exc)
            return Failure(stage, Category.UNKNOWN, exit_status=status, cause=exc)
        # CLIJSONDecodeError, MessageParseError, a control-request timeout, anything else.
        return Failure(stage, Category.UNKNOWN, exit_status=self._exit_status(), cause=exc)

    def _exit_status(self) -> ExitStatus | None:
        """The CLI's own exit, if it happened before anyone (we or the SDK's rollback) tore it down."""
        transport = self.transport
        if transport is None:
            return None
        return transport.exit_before_close if transport.closing else transport.process.exit_status

    async def _wait_exit(self) -> ExitStatus | None:
        transport = self.transport
        if transport is None or not transport.process.started:
            return None
        if not transport.closing:
            await transport.process.wait_exit(_EXIT_WAIT)
        return self._exit_status()

    # -- teardown and settlement ------------------------------------------------------------------

    async def _teardown(self, client: Any) -> Failure | None:
        error: BaseException | None = None
        if client is not None:
            try:
                await client.disconnect()
            except Exception as exc:
                error = exc
        if self.transport is None or not self.transport.process.started:
            return Failure(Stage.TEARDOWN, Category.UNKNOWN, cause=error) if error is not None else None
        teardown = await self.transport.process.terminate(
            eof_grace=self.settings.eof_grace, term_grace=self.settings.term_grace
        )
        log.debug("Claude Code teardown: %s (stderr tail kept host-side: %d bytes)", teardown.tier,
                  self.transport.process.stderr_bytes_seen)  # fmt: skip
        if error is not None or teardown.tier in ("sigkill", "unreaped"):
            return Failure(Stage.TEARDOWN, Category.UNKNOWN, exit_status=teardown.exit_status, cause=error)
        return None

    def _outcome(self, failure: Failure | None, teardown: Failure | None) -> Outcome:
        observed = self._observed
        if failure is None and teardown is None:
            return Outcome("completed", observed.result.result)
        # When only the teardown failed, the answer is still the best partial output.
        output = observed.result.result if failure is None else observed.partial_output()
        decision = (
            unattended_decision(PRODUCT, self.settings.permission_mode, "tool permission", "denied")
            if observed.denied
            else None
        )
        return Outcome("error", output, failure, teardown, decision)

    # -- the child ------------------------------------------------------------------------------

    def _argv(self, sdk: ModuleType) -> list[str]:
        config = self.settings
        argv = [*config.command] if config.command else [_resolve_cli(sdk, config.cli_path)]
        argv += ["--output-format", "stream-json", "--verbose"]
        if config.model:
            argv += ["--model", config.model]
        if config.max_turns:
            argv += ["--max-turns", str(config.max_turns)]
        if config.max_budget_usd is not None:
            argv += ["--max-budget-usd", str(config.max_budget_usd)]
        # One ``--flag=value`` argument each: a value that starts with a dash stays a value.
        if config.system_prompt:
            argv.append(f"--system-prompt={config.system_prompt}")
        if config.tools is not None:
            argv.append(f"--tools={','.join(config.tools)}")  # narrows what it has; --allowedTools would approve
        argv += [
            "--permission-mode", config.permission_mode,
            # Permission prompts come to our can_use_tool callback over the control protocol.
            "--permission-prompt-tool", "stdio",
            f"--setting-sources={','.join(config.setting_sources)}",
            "--no-session-persistence",
            "--input-format", "stream-json",
        ]  # fmt: skip
        return argv

    def _child_env(self, sdk: ModuleType) -> dict[str, str]:
        env = {
            # What the SDK's own transport tells the CLI about its host.
            "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
            # The CLI then reports session state, which the SDK needs to close stdin at the right time.
            "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1",
        }
        env.update(explicit_env(self.settings.env, self.settings.pass_env, self.request))
        if self.settings.endpoint is not None:  # last: nothing else names the child's endpoint or key
            env.update(self.settings.endpoint.env())
            log.info("subagent %s: Claude Code on %s", safe_token(self.name), self.settings.endpoint.label)
        env["CLAUDE_AGENT_SDK_VERSION"] = sdk.__version__
        env["PWD"] = self.request.cwd
        return env


def _subtype_category(subtype: object) -> Category:
    return Category(subtype) if isinstance(subtype, str) and subtype in ERROR_SUBTYPES else Category.UNKNOWN


def _load_sdk() -> tuple[ModuleType, ModuleType]:
    """Import the SDK lazily (the ``dsh-agent[claude]`` extra); silence its logger's last-resort stderr output."""
    sdk = importlib.import_module("claude_agent_sdk")
    sdk_log = logging.getLogger("claude_agent_sdk")
    if not any(isinstance(h, logging.NullHandler) for h in sdk_log.handlers):
        # Without a handler, logging's last resort prints the SDK's errors over the REPL; with one,
        # records still propagate to whatever host log is configured.
        sdk_log.addHandler(logging.NullHandler())
    transport = importlib.import_module("dsh.agent_loop.subagent._claude_transport")
    return sdk, transport


def _resolve_cli(sdk: ModuleType, cli_path: str | None) -> str:
    """Configured ``cli_path`` (a bare name is looked up on PATH), else the bundled CLI, else PATH."""
    if cli_path:
        found = shutil.which(cli_path) if os.sep not in cli_path else cli_path
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return found
        raise sdk.CLINotFoundError("Claude Code not found")
    if sdk.__file__ is not None:  # a regular package always has one
        bundled = Path(sdk.__file__).parent / "_bundled" / "claude"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    found = shutil.which("claude")
    if found:
        return found
    raise sdk.CLINotFoundError("Claude Code not found")
