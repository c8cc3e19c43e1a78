"""What a tool is, the registry, and how one model tool call is run.

A :class:`Tool` is a name, a description, JSON-schema parameters, an async callable
``run(args, ctx) -> ToolOutput | str`` and a ``concurrency_safe`` flag. The agent runs the calls of
one assistant message in model order; consecutive concurrency-safe calls form a batch that runs in
parallel (see :func:`plan_batches`). Whatever goes wrong with one call -- arguments that are not a JSON
object, an unknown tool, an exception -- becomes an error result the model sees; the turn goes on.
:func:`resolve_path` and :func:`int_arg` read the arguments the built-in tools share; :func:`arguments_schema`
and :func:`param` write their JSON schemas.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from dsh.agent_loop.events import Event
from dsh.agent_loop.image_input import ImageRules
from dsh.agent_loop.permissions import Action, Mode, Permissions, Refuse, decide
from dsh.llm import Image, ToolCall, ToolSpec, error_chain
from dsh.llm import text as json_text
from dsh.llm.redact import Redactor

__all__ = [
    "DEFAULT_MAX_PARALLEL",
    "MAX_RESULT_CHARS",
    "Approval",
    "Approver",
    "McpCallRequest",
    "SandboxedCommand",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "arguments_schema",
    "ask_approval",
    "int_arg",
    "mode_refusal",
    "param",
    "plan_batches",
    "resolve_path",
    "run_tool_call",
]

DEFAULT_MAX_PARALLEL = 10
MAX_RESULT_CHARS = 100_000  # a last bound on any tool's text, whoever wrote the tool

Approval = Literal["yes", "no", "always"]
# Called with what is to be approved: run_shell's command (a str; a :class:`SandboxedCommand` when it runs in the
# sandbox), an edit tool's ``dsh.agent_loop.tools.edits.EditRequest`` (its diff), or an MCP tool call's
# :class:`McpCallRequest`.
Approver = Callable[[Any], Awaitable["Approval | None"]]


class AskedText(str):
    """A question asked as text by a tool other than run_shell (``tool`` names it: web_fetch's ``GET <url>``): a
    str as every command is, so an approver that only knows commands still asks, naming the right tool."""

    __slots__ = ()
    tool: ClassVar[str] = "run_shell"


class SandboxedCommand(str):
    """run_shell's command, to approve, when it will run in the sandbox: a str as every command is, so an approver
    that only knows commands still works, and the question says where it runs (docs/safety.md)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class McpCallRequest:
    """What an approver is asked for an MCP tool call (agent_loop/mcp/tools.py asks it; docs/mcp.md): the server,
    the server's own tool name and the whole arguments. Here, beside :data:`Approver`, so that the session's
    approver type can name it without importing the MCP package; front ends render it sanitized."""

    server: str
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool call produced. ``diagnostic`` is fixed safe text the REPL shows on its own line."""

    text: str
    is_error: bool = False
    diagnostic: str | None = None
    images: tuple[Image, ...] = ()  # sent to the model after the step's results (read_file on an image)
    # Host-side only (the user's /why): never sent, never logged, not part of what the output is.
    cause: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass
class ToolContext:
    """What a running tool may use: where it runs, which turn, and how to talk to the owner.

    ``notify(event)`` publishes an extra event through the agent (a durable one is also logged), e.g.
    ``job/notice`` from a background job. ``session_state`` lives as long as the session (``/new``
    clears it); ``run_shell`` keeps its "always" approval there.
    """

    cwd: Path
    turn: int
    notify: Callable[[Event], None]
    approver: Approver | None = None
    session_state: dict[str, Any] = field(default_factory=dict)
    label: str = "main"
    call_id: str = ""
    post_notice: Callable[[str, str], None] | None = None  # (text, job_id) -> None; the agent's
    # The agent's redactor: what the model saw of a file is masked, so an edit checks it, and an edit's
    # approval masks only its known values (agent_loop/tools/edits.py).
    redact: Redactor = field(default_factory=Redactor)
    # The session's permission mode, read at each approval (None: the default mode; docs/safety.md).
    permissions: Permissions | None = None
    # The session's model and what decides whether it is sent images: read_file on an image (agent_loop/image_input.py).
    model: str = ""
    image_rules: ImageRules = field(default_factory=ImageRules)


ToolFunction = Callable[[dict[str, Any], ToolContext], Awaitable["ToolOutput | str"]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFunction
    concurrency_safe: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


class CallHooks(Protocol):
    """What the tool runner asks before and after each call: the session's hooks (agent_loop/hook_run.py;
    docs/hooks.md). False when there are none."""

    def __bool__(self) -> bool: ...
    async def before_tool(self, call: ToolCall, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput | None:
        ...
    async def after_tool(self, call: ToolCall, arguments: Mapping[str, Any], output: ToolOutput) -> ToolOutput: ...


class ToolRegistry:
    """Tools by name, in registration order (which is the order the model is told about them)."""

    def __init__(self, tools: Sequence[Tool] = (), *, max_parallel: int = DEFAULT_MAX_PARALLEL) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.max_parallel = max_parallel
        self._tools: dict[str, Tool] = {}
        self.hooks: CallHooks | None = None  # PreToolUse / PostToolUse (agent_loop/tool_calls.py)
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool, *, replace: bool = False) -> None:
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec() for tool in self._tools.values())

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools


# --- approval ---------------------------------------------------------------------------------------


def mode_refusal(ctx: ToolContext, action: Action) -> ToolOutput | None:
    """The refusal the session's permission mode gives ``action`` (plan mode's line), else None."""
    decision = decide(ctx.permissions.mode if ctx.permissions is not None else Mode.DEFAULT, action)
    return ToolOutput(decision.line, is_error=True) if isinstance(decision, Refuse) else None


async def ask_approval(ctx: ToolContext, ask: Approver | None, request: object, *, always_key: str | None,
                       denied: str, no_approver: str | None, always_covers: bool = True,
                       action: Action | None = None) -> ToolOutput | None:
    """The one approval flow of run_shell, the edit tools and MCP tools: None when the call may go ahead,
    else the denial the model sees (docs/configuration.md, docs/mcp.md).

    First the permission mode decides what ``action`` may do (``dsh.agent_loop.permissions.decide``;
    docs/safety.md): run without asking, be refused with its line, or ask as below. Nothing below outranks a
    refusal. Without ``action`` (or in the default mode) the call asks.

    An "always" answered earlier (``session_state[always_key]``) goes ahead without asking, unless
    ``always_covers`` is false (an edit outside the working tree is asked every time; an "always" answered
    there still counts for later edits inside it). With no one to ask: ``no_approver``'s denial, or go ahead
    when it is None (an unattended edit allowed by ``--allow-edits``). An approver that raises denies, with
    its chain; "always" is kept under ``always_key`` (None: the request cannot be always-approved, so
    "always" counts as "yes"); any other answer but "yes" denies.
    """
    if action is not None:
        decision = decide(ctx.permissions.mode if ctx.permissions is not None else Mode.DEFAULT, action)
        if isinstance(decision, Refuse):
            return ToolOutput(decision.line, is_error=True)
        if decision == "run":
            return None
    if always_key is not None and always_covers and ctx.session_state.get(always_key):
        return None
    if ask is None:
        return None if no_approver is None else ToolOutput(no_approver, is_error=True)
    try:
        answer = await ask(request)
    except Exception as exc:
        return ToolOutput(f"{denied} (approval failed: {error_chain(exc)})", is_error=True)
    if answer == "always" and always_key is not None:
        ctx.session_state[always_key] = True
    elif answer not in ("yes", "always"):
        return ToolOutput(denied, is_error=True)
    return None


# --- executing one call ------------------------------------------------------------------------


def _parse_arguments(call: ToolCall) -> dict[str, Any] | ToolOutput:
    text = call.arguments
    if not text.strip():
        return {}  # models send "" for a tool without parameters
    try:
        value = json_text.loads(text)
    except ValueError as exc:
        return ToolOutput(f'Error: invalid JSON arguments for tool "{call.name}": {exc}', is_error=True)
    if not isinstance(value, dict):
        return ToolOutput(f'Error: arguments for tool "{call.name}" must be a JSON object', is_error=True)
    return value


def _missing_required(tool: Tool, args: Mapping[str, Any]) -> ToolOutput | None:
    required = tool.parameters.get("required") if isinstance(tool.parameters, dict) else None
    for name in required or ():
        if name not in args:
            return ToolOutput(f'Error: missing required argument "{name}" for tool "{tool.name}"', is_error=True)
    return None


def _bounded(output: ToolOutput) -> ToolOutput:
    if len(output.text) <= MAX_RESULT_CHARS:
        return output
    omitted = len(output.text) - MAX_RESULT_CHARS
    text = output.text[:MAX_RESULT_CHARS] + f"\n[tool output truncated: {omitted} characters omitted]"
    return ToolOutput(text, output.is_error, output.diagnostic)


async def run_tool_call(registry: ToolRegistry, call: ToolCall, ctx: ToolContext) -> ToolOutput:
    """Run one call; every failure except cancellation comes back as an error ``ToolOutput``."""
    tool = registry.get(call.name)
    if tool is None:
        return ToolOutput(f'Error: unknown tool "{call.name}"', is_error=True)
    args = _parse_arguments(call)
    if isinstance(args, ToolOutput):
        return args
    missing = _missing_required(tool, args)
    if missing is not None:
        return missing
    try:
        value = await tool.run(args, ctx)
    except Exception as exc:
        return ToolOutput(f"Error: {error_chain(exc)}", is_error=True)
    if isinstance(value, ToolOutput):
        return _bounded(value)
    return _bounded(ToolOutput(value if isinstance(value, str) else str(value)))


def plan_batches(registry: ToolRegistry, calls: Sequence[ToolCall]) -> list[list[ToolCall]]:
    """Split calls, in model order, into batches: a run of concurrency-safe calls, or one other call."""
    batches: list[list[ToolCall]] = []
    for call in calls:
        tool = registry.get(call.name)
        safe = tool is not None and tool.concurrency_safe
        if safe and batches and batches[-1] and _is_safe(registry, batches[-1][-1]):
            batches[-1].append(call)
        else:
            batches.append([call])
    return batches


def _is_safe(registry: ToolRegistry, call: ToolCall) -> bool:
    tool = registry.get(call.name)
    return tool is not None and tool.concurrency_safe


# --- arguments the built-in tools share ---------------------------------------------------------

_PATH_MAX = 4096  # Linux's PATH_MAX: no longer path can be opened anyway


def resolve_path(ctx: ToolContext, raw: object, default: str | None = None) -> Path:
    """A tool's path argument (``default`` when absent) against the working directory; ``~`` expanded."""
    if raw is None and default is not None:
        raw = default
    if not isinstance(raw, str) or not raw:
        raise ValueError("path must be a non-empty string")
    if len(raw) > _PATH_MAX:
        # Before any Path or OSError copies it: a hostile 100 MB path would be copied several times.
        raise ValueError(f"path is longer than {_PATH_MAX} characters")
    path = Path(raw).expanduser()
    return path if path.is_absolute() else ctx.cwd / path


def int_arg(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """A tool's integer argument (``default`` when absent or null), clamped to ``low..high``."""
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"{name} must be an integer")
    return max(low, min(high, int(value)))


def param(json_type: str, description: str | None = None, **bounds: int) -> dict[str, Any]:
    """One property of a tool's arguments schema: its JSON type, what it is for, any bounds (``minimum=1``)."""
    schema: dict[str, Any] = {"type": json_type}
    if description is not None:
        schema["description"] = description
    return schema | bounds


def arguments_schema(properties: dict[str, dict[str, Any]], *required: str) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: an object of ``properties``, the ``required`` ones named."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema
