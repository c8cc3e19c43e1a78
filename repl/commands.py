"""Slash commands. Each is a small async function of the shell and its argument text.

An unknown command is one clear line that names the nearest command, and the next prompt starts empty
(the typed line is in the history, one ↑ away). ``//text`` sends ``/text`` as a prompt.

The shell imports this module, never the other way round: a command sees the shell only through
:class:`~dsh.repl.host.Host`, the few attributes and methods the commands use.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.agent_loop.budget import budget_line
from dsh.agent_loop.hooks import hook_lines
from dsh.agent_loop.plan import current_plan, plan_head, plan_lines
from dsh.agent_loop.reasons import EndReason
from dsh.agent_loop.usage import UsageTally, estimate_tokens
from dsh.llm import HarnessError, error_chain, redact_text
from dsh.llm.models import PRICES_AS_OF, model_info
from dsh.repl import custom_commands, model_commands
from dsh.repl.host import Host
from dsh.repl.lazy import entry
from dsh.repl.usage import cache_split_lines, compact_count, usage_line
from dsh.repl.why import why_lines

if TYPE_CHECKING:
    from dsh.agent_loop.events import ToolResult
    from dsh.agent_loop.mcp import ServerStatus
    from dsh.agent_loop.subagent.jobs import Job, JobManager

__all__ = ["COMMANDS", "REPORT_WRITTEN", "Command", "dispatch", "expanded_output", "help_text"]


Handler = Callable[[Host, str], Awaitable["EndReason | None"]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str
    summary: str
    run: Handler
    demo_only: bool = False


COMMANDS: dict[str, Command] = {}


def _command(name: str, args: str, summary: str, *, demo_only: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        COMMANDS[name] = Command(name, args, summary, handler, demo_only)
        return handler

    return register


REPORT_WRITTEN = "report written to {path} (it holds this turn's requests, like --record: read it before you share it)"

KEYS_HELP = (
    "keys: Enter sends · Esc Enter or a trailing \\ adds a line · Ctrl-C cancels a turn or clears the line\n"
    "      Ctrl-C twice on an empty line or Ctrl-D exits · Up/Down walk the history · Tab completes /commands\n"
    "      Ctrl-O (or /expand) shows the last tool output in full · Shift+Tab cycles the permission mode\n"
    "      @path adds a file or folder to the prompt (Tab completes it) · Ctrl-G or Ctrl-X Ctrl-E opens $EDITOR\n"
    "      @shot.png or a pasted image path sends the image to a model that sees"
)


def help_text(demo: bool, custom: list[str] | None = None) -> str:
    """The commands and keys; ``custom``: the custom commands' lines (repl/custom_commands.py), before the keys."""
    lines = ["commands:"]
    for command in COMMANDS.values():
        if command.demo_only and not demo:
            continue
        usage = f"/{command.name}" + (f" {command.args}" if command.args else "")
        lines.append(f"  {usage:<18} {command.summary}")
    lines.append("  //text             send a prompt that starts with /")
    lines.extend(custom or ())
    lines.append(KEYS_HELP)
    return "\n".join(lines)


async def dispatch(shell: Host, text: str) -> EndReason | None:
    name, _, arg = text[1:].partition(" ")
    command = COMMANDS.get(name.lower())
    scenarios = shell.endpoint.controls is not None
    if command is None and (end := await custom_commands.run_custom(shell, COMMANDS, name, arg.strip())) is not None:
        return end  # a custom command (.dsh/commands/NAME.md ...: docs/extending.md)
    if command is None or (command.demo_only and not scenarios):
        if command is not None:
            shell.say(f"/{name} works in demo mode only (dsh --demo)")
        else:
            shell.say(_unknown(name, scenarios))
        return None  # the input line starts empty; ↑ brings the typed line back from the history
    try:
        return await command.run(shell, arg.strip())
    except HarnessError as exc:
        shell.say(f"/{command.name} failed: {redact_text(error_chain(exc), shell.config.secrets)}")
        return None


def _nearest(typed: str, known: list[str]) -> str:
    """``: did you mean X?`` for the closest of ``known`` to a mistyped name, or nothing when none is close."""
    nearest = difflib.get_close_matches(typed.strip().lower(), known, n=1, cutoff=0.6)
    return f": did you mean {nearest[0]}?" if nearest else ""


def _unknown(name: str, demo: bool) -> str:
    """``unknown command /NAME``, with the nearest command when one is close (a typo, say)."""
    known = [f"/{command.name}" for command in COMMANDS.values() if demo or not command.demo_only]
    return f"unknown command /{redact_text(name[:40])}{_nearest('/' + name, known)} (/help lists the commands)"


@_command("help", "", "show commands and keys")
async def _help(shell: Host, arg: str) -> None:
    shell.say(help_text(shell.endpoint.controls is not None, custom_commands.help_lines(shell, COMMANDS)))


@_command("exit", "", "leave dsh (exit status 0)")
async def _exit(shell: Host, arg: str) -> None:
    shell.exit_code = 0


@_command("new", "", "start a new conversation (new session log)")
async def _new(shell: Host, arg: str) -> None:
    ident = await shell.session.new_session()
    shell.say(f"new session {ident}")


@_command("retry", "", "send the last prompt again")
async def _retry(shell: Host, arg: str) -> EndReason | None:
    prompt = shell.session.last_prompt
    if not prompt:
        shell.say("nothing to retry yet")
        return None
    return await shell.run_turn(prompt)


_command("model", "[name]", "list the endpoint's models, or switch (from the next turn)")(model_commands.run_model)
_command("profile", "[NAME]", "list the [profiles.NAME] of config.toml, or switch to one (from the next turn)")(
    model_commands.run_profile)


@_command("vim", "", "switch the prompt between vi and emacs key bindings")
async def _vim(shell: Host, arg: str) -> None:
    shell.vi_mode = not shell.vi_mode
    shell.say("vi key bindings (Esc: normal mode; /vim switches back)" if shell.vi_mode
              else "emacs key bindings (/vim switches to vi)")


@_command("context", "", "show what is sent with each request, with sizes in tokens")
async def _context(shell: Host, arg: str) -> None:
    session = shell.session
    context = await session.ensure_context()
    agent = session.agent
    assert agent is not None and context is not None  # ensure_context built them
    rows: list[tuple[str, int]] = []
    for source in context.sources:
        label = f"{source.label}  {source.path}" if source.path is not None else source.label
        rows.append((label + ("  (cut)" if source.truncated else ""), source.tokens))
    specs = agent.tools.specs()
    tools_text = json.dumps([[spec.name, spec.description, spec.parameters] for spec in specs])
    rows.append((f"tool definitions ({len(specs)} tools)", estimate_tokens(tools_text)))
    history = [message for message in agent.messages if message.role != "system"]
    history_text = "".join(m.content + (m.reasoning_content or "") + "".join(c.arguments for c in m.tool_calls)
                           for m in history)
    rows.append((f"history ({len(history)} messages)", estimate_tokens(history_text)))
    total = sum(tokens for _, tokens in rows)
    width = max(len(label) for label, _ in rows)
    lines = ["context sent with each request (estimated at 4 characters a token):"]
    lines += [f"  {label:<{width}}  ≈ {compact_count(tokens)}" for label, tokens in rows]
    info = model_info(session.model, shell.config.models)
    window = f" of {compact_count(info.context_window)}" if info is not None and info.context_window else ""
    lines.append(f"  {'total':<{width}}  ≈ {compact_count(total)}{window}")
    if session.usage.requests:
        tally = session.usage
        how = "estimated since /compact" if tally.context_estimated else "reported by the server"
        lines.append(f"last request: {tally.context:,} tokens in the window ({how})")
    shell.say("\n".join([*lines, *custom_commands.context_lines(shell)]))


@_command("undo", "", "revert the file changes of the last turn that changed files")
async def _undo(shell: Host, arg: str) -> None:
    if arg:
        shell.say("/undo takes no argument; /rewind N undoes the last N turns' file changes")
        return
    shell.say("\n".join(await shell.session.undo(1)))


@_command("rewind", "N", "revert the file changes of the last N turns that changed files, newest first")
async def _rewind(shell: Host, arg: str) -> None:
    if not arg.isdigit() or not 0 < int(arg) <= 1000:
        shell.say("/rewind needs a number of turns (1-1000), e.g. /rewind 2")
        return
    shell.say("\n".join(await shell.session.undo(int(arg))))


_command("skill", "[NAME [request]]", "list the skills, or send one's instructions with a request")(
    custom_commands.run_skill)


@_command("compact", "[focus]", "summarize the conversation so far and continue from the summary")
async def _compact(shell: Host, arg: str) -> None:
    await shell.compact(arg)


@_command("cost", "", "tokens and cost since dsh started")
async def _cost(shell: Host, arg: str) -> None:
    tally = shell.session.usage
    for line in _cost_lines(shell, tally) if tally.requests else ["no requests yet"]:
        shell.say(line)
    if (spent := shell.session.spent) is not None:  # max_cost: what the cap counts, a resumed session's included
        shell.say(budget_line(*spent))


def _cost_lines(shell: Host, tally: UsageTally) -> list[str]:
    lines = [f"{tally.requests} request{'s' if tally.requests != 1 else ''}: {usage_line(tally, shell.config.models)}",
             *cache_split_lines(tally),  # the prompt cache's hits and misses, when the endpoint reported them
             *model_commands.cost_by_model_lines(tally, shell.config.models)]  # with more than one model
    if tally.cost is None:
        lines.append(f"no price known for {tally.model}: set [models.\"{tally.model}\"] prices in config.toml")
    elif tally.tokens_known and model_info(tally.model) is not None and tally.model not in shell.config.models:
        lines.append(f"prices as published by DeepSeek on {PRICES_AS_OF}, peak or off-peak by the hour of each request")
    return lines


@_command("why", "", "the last failure's full cause chain, one link per line (subagents and MCP servers too)")
async def _why(shell: Host, arg: str) -> None:
    shell.say("\n".join(why_lines(shell.session)))


@_command("hooks", "", "the hooks that run and where each is configured (docs/hooks.md)")
async def _hooks(shell: Host, arg: str) -> None:
    hooks = shell.session.extras.hooks  # with claude_settings: the project's too
    shell.say("\n".join(hook_lines(hooks.specs if hooks is not None else ())))


@_command("report", "[FILE]", "write the last failed turn to one masked file to share or replay (docs/reporting.md)")
async def _report(shell: Host, arg: str) -> None:
    from dsh.repl.capsule import NO_FAILURE, failed_turn, write_capsule  # only when asked: not before the prompt

    if failed_turn(shell) is None:
        shell.say(NO_FAILURE)
        return
    shell.say("report: running dsh doctor's steps again for it…")
    path = await write_capsule(shell, arg or None, on_step=lambda step: shell.say("\n".join(step.lines())))
    shell.say(REPORT_WRITTEN.format(path=path))


@_command("export", "[FILE]", "write this conversation to a masked file to read or share (.md, .json, .html)")
async def _export(shell: Host, arg: str) -> None:
    # by name when asked (repl/lazy.py): the log's reader is not needed before the prompt
    run: Handler = entry("dsh.repl.export_command", "repl_export")
    await run(shell, arg)


def _server_state(status: ServerStatus) -> str:
    if status.state == "ready":
        return f"ready with {status.tools} tool{'s' if status.tools != 1 else ''}"
    if status.state == "failed":
        return f"failed: {status.line}"
    return status.state  # starting, disabled, stopped


@_command("mcp", "[restart NAME]", "list MCP servers and their state, or restart one")
async def _mcp(shell: Host, arg: str) -> None:
    manager = shell.session.mcp
    verb, _, name = arg.partition(" ")
    name = name.strip()
    if arg and (verb != "restart" or not name):
        shell.say("usage: /mcp [restart NAME]")
        return
    if manager is None:
        shell.say("no MCP servers configured ([mcp_servers.NAME] in config.toml; docs/mcp.md)")
        return
    if not arg:  # names are the user's own table keys; the sink makes any odd character visible
        rows = manager.status()
        width = max(len(row.name) for row in rows)
        shell.say("\n".join(["MCP servers:", *(f"  {row.name:<{width}}  {_server_state(row)}" for row in rows)]))
        return
    if name not in manager.configs:
        known = ", ".join(manager.configs) or "none"
        shell.say(f"no MCP server {redact_text(name[:40], shell.config.secrets)!r} (servers: {known})")
        return
    if not manager.configs[name].enabled:
        shell.say(f"MCP server {name} is disabled (enabled = false in [mcp_servers.{name}])")
        return
    problem = await manager.restart(name)
    shell.say(problem or f"MCP server {name} restarting (/mcp shows when it is ready)")


@_command("sessions", "[--all]", "list this project's saved sessions (--all: every project)")
async def _sessions(shell: Host, arg: str) -> None:
    from dsh.repl.sessions import listing_lines  # the log's reader: not before the first prompt

    if arg not in ("", "--all"):
        shell.say("usage: /sessions [--all]")
        return
    session = shell.session
    root = session.sessions_root
    assert root is not None  # the REPL's sessions keep a log
    project = None if arg else session.project
    sessions = session.saved_sessions(project)
    if not sessions:
        scope = f" of {project}" if project is not None else ""
        shell.say(f"no sessions{scope} in {root}" + (" (/sessions --all lists every project)" if project else ""))
        return
    lines = listing_lines(sessions, project=project, current=session.id)
    lines.append("resume one with /resume ID (or dsh --resume ID)")
    shell.say("\n".join(redact_text(line, shell.config.secrets) for line in lines))


@_command("resume", "ID|last", "continue a saved session (last: this project's latest)")
async def _resume(shell: Host, arg: str) -> None:
    if not arg:
        shell.say("usage: /resume ID|last (see /sessions)")
        return
    await shell.session.resume(arg)
    shell.report_resumed()


def expanded_output(result: ToolResult | None) -> str:
    """What ``/expand`` (and Ctrl-O) print: the whole tool output, indented under a counted header.

    The sink sanitizes it like every other line; the output itself was redacted when the tool returned.
    """
    if result is None:
        return "no tool output yet"
    output = result.output.replace("\r\n", "\n").strip("\n")
    lines = output.split("\n") if output else []
    name = " ".join(result.name.split()) or "?"
    count = f"{len(lines)} line{'s' if len(lines) != 1 else ''}"
    head = f"  [tool output] {name}, {count}" + (" (error)" if result.is_error else "") + (":" if lines else "")
    return "\n".join([head, *(f"    {line}" for line in lines)])


@_command("expand", "", "show the last tool output in full (the turn shows a short preview)")
async def _expand(shell: Host, arg: str) -> None:
    shell.say(expanded_output(shell.session.last_tool_result))


@_command("plan", "", "show the model's plan: [x] done, [>] in progress, [ ] to do")
async def _plan(shell: Host, arg: str) -> None:
    plan = current_plan(shell.session)
    if plan is None or not plan.total:
        shell.say("no plan yet (the model keeps one with todo_write)" if plan is None else "the plan is empty")
        return
    lines = [f"  {redact_text(line, shell.config.secrets)}" for line in plan_lines(plan)]
    shell.say("\n".join([plan_head(plan), *lines]))


def _age(job: Job) -> str:
    from dsh.agent_loop.subagent.jobs import age_text  # only with subagents configured

    return age_text(job.age())


def _jobs_manager(shell: Host) -> JobManager | None:
    toolkit = shell.session.toolkit
    return toolkit.jobs if toolkit is not None else None


def _find_job(shell: Host, arg: str, usage: str) -> Job | None:
    jobs = _jobs_manager(shell)
    if not arg:
        shell.say(usage)
        return None
    job = jobs.get(arg) if jobs is not None else None
    if job is None:
        known = ", ".join(j.id for j in jobs.jobs) if jobs is not None else ""
        shell.say(f"no job {arg[:40]!r} (jobs: {known or 'none'})")
    return job


@_command("jobs", "", "list background jobs with status and age")
async def _jobs(shell: Host, arg: str) -> None:
    jobs = _jobs_manager(shell)
    if jobs is None or not jobs.jobs:
        shell.say("(no jobs)")
        return
    rows = [f"{job.id:<12} {job.status:<9} {_age(job):>6}  {job.label}" for job in jobs.jobs]
    shell.say("\n".join([*rows, "/job ID shows a job's output · /kill ID stops a running one"]))


@_command("doctor", "", "check each step of a request to the endpoint (like dsh doctor)")
async def _doctor(shell: Host, arg: str) -> None:
    from dsh.repl.doctor import run_doctor  # the endpoint checks: loaded when asked for

    config = dataclasses.replace(shell.endpoint.probed(shell.config), model=shell.session.model)
    report = await run_doctor(config, shell.env, lambda step: shell.say("\n".join(step.lines())),
                              endpoint=shell.endpoint)
    shell.say(report.lines()[-1])


JOB_OUTPUT_LINES = 40  # the tail of a job's output that /job shows
JOB_OUTPUT_CHARS = 8000


def _output_tail(text: str) -> tuple[list[str], bool]:
    """The last lines of a job's output (bounded in lines and characters), and whether any were left out."""
    text = text.replace("\r\n", "\n").rstrip("\n")
    cut = len(text) > JOB_OUTPUT_CHARS
    if cut:
        tail = text[-JOB_OUTPUT_CHARS:]
        newline = tail.find("\n")
        text = tail[newline + 1 :] if 0 <= newline < len(tail) - 1 else tail  # start on a whole line
    body = text.split("\n") if text else []
    if len(body) > JOB_OUTPUT_LINES:
        body, cut = body[-JOB_OUTPUT_LINES:], True
    return body, cut


@_command("job", "ID", "show a background job's output so far")
async def _job(shell: Host, arg: str) -> None:
    job = _find_job(shell, arg, "usage: /job ID (see /jobs)")
    if job is None:
        return
    verb = "running for" if job.status == "running" else f"{job.status} after"
    lines = [f"job {job.id} ({job.label}) {verb} {_age(job)}"]
    body, cut = _output_tail(redact_text(job.output_so_far(), shell.config.secrets))
    if cut:
        lines.append("  … (earlier output not shown)")
    lines += [f"  {line}" for line in body] or ["  (no output yet)"]
    result = job.result
    if job.settled and result is not None and result.diagnostic:
        lines += [f"  {line}" for line in result.diagnostic.split("\n")]
    shell.say("\n".join(lines))


@_command("kill", "ID", "stop a running background job")
async def _kill(shell: Host, arg: str) -> None:
    job = _find_job(shell, arg, "usage: /kill ID (see /jobs)")
    if job is None:
        return
    if job.settled:
        shell.say(f"job {job.id} had already finished: {job.status}")
        return
    jobs = _jobs_manager(shell)
    assert jobs is not None  # the job was found there
    if job.kill_requested:
        shell.say(f"job {job.id} is already being stopped")
        return
    shell.say(f"stopping job {job.id} ({job.label}); a line follows when it has stopped")
    jobs.kill_soon(job, lambda killed: shell.say(f"killed job {killed.id} ({killed.label}) after {_age(killed)}"))


@_command("scenario", "[name]", "list demo scenarios, or pick one", demo_only=True)
async def _scenario(shell: Host, arg: str) -> None:
    controls = shell.endpoint.controls
    assert controls is not None  # the command is demo_only: dispatch checked
    if not arg:
        shell.say(controls.listing())
        return
    try:
        name, summary = controls.select(arg)
    except KeyError:
        nearest = _nearest(arg, [name for name, _ in controls.scenarios()])
        shell.say(f"no scenario {arg[:40]!r}{nearest} (/scenario lists them)")
        return
    shell.say(f"scenario {name}: {summary}")
