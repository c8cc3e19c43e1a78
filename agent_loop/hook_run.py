"""Running hooks (docs/hooks.md): each one a managed child, bounded, and what its answer does to the session.

:func:`run_hook` runs one command with ``sh -c``: the event's JSON on stdin, in its own process group, with the
child environment allowlist (:func:`dsh.agent_loop.process.child_env`) plus ``CLAUDE_PROJECT_DIR``, in the
session's folder, killed with its group and reaped at its timeout. Its stdout is kept up to
:data:`STDOUT_LIMIT` and the rest drained (a hook printing a gigabyte does not grow dsh); its stderr is the
managed ring's (bounded too).

:class:`Hooks` is the session's set: the tool runner asks it before and after each call
(:mod:`dsh.agent_loop.tool_hooks`), the prompt guard before each prompt, the session at its other points
(:mod:`dsh.agent_loop.session_extensions`). Every run is a durable ``hook/run`` event (closed facts), and a hook's
own words (its stderr, masked) go to dsh.log and, with a failure line, to ``/why`` -- never to the screen.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from dsh.agent_loop.child_words import AgentWords, ChildFailure
from dsh.agent_loop.events import Event, HookRan
from dsh.agent_loop.hooks import (
    CONTEXT_EVENTS,
    GUARDING,
    HookSpec,
    Verdict,
    claude_settings_hooks,
    decide,
    failure_line,
    tool_payload,
)
from dsh.agent_loop.process import ManagedProcess, ProcessStartError
from dsh.llm.codes import ErrorCode

__all__ = ["STDOUT_LIMIT", "HookFailure", "HookRun", "Hooks", "Outcome", "doctor_checks", "hook_point", "run_hook",
           "session_hooks"]

log = logging.getLogger(__name__)

STDOUT_LIMIT = 64 * 1024  # a JSON decision is small; the rest is drained, not kept
REASON_LIMIT = 4096  # what of a blocking hook's words the model is told
RECENT = 32  # the last runs kept for a failure capsule
_READ_CHUNK = 64 * 1024
_EXIT_GRACE = 0.5  # after the hook exits, how long a grandchild holding stdout may keep it open
_KILL_GRACE = 0.5


class HookFailure(ChildFailure):
    """``/why``'s record of a hook that failed: its failure line, and its stderr (masked, bounded)."""

    code_name = ErrorCode.HOOK
    speaker = "hook"


@dataclass(frozen=True, slots=True)
class HookRun:
    """How one run went: ``exit_code`` None when killed by a signal or never started."""

    started: bool
    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: str  # at most STDOUT_LIMIT bytes of it
    stdout_bytes: int  # all it printed
    stderr: str  # whole lines, bounded (ManagedProcess.stderr_lines)
    seconds: float


async def run_hook(command: str, payload: bytes, *, cwd: str, timeout: float,
                   env: Mapping[str, str] | None = None) -> HookRun:
    """Run ``command`` once; never raises but for cancellation (the group is killed and reaped before it goes on)."""
    began = time.monotonic()
    process = ManagedProcess(["/bin/sh", "-c", command], env={"CLAUDE_PROJECT_DIR": cwd, **(env or {})}, cwd=cwd,
                             eof_grace=0, term_grace=_KILL_GRACE)
    with anyio.CancelScope(shield=True):  # a cancel while the pipes are wired would leave an unowned child
        try:
            await process.start()
        except ProcessStartError:
            return HookRun(False, None, None, False, "", 0, "", time.monotonic() - began)
    kept = bytearray()
    seen = 0
    timed_out = False

    async def read() -> None:
        nonlocal seen
        assert process.stdout is not None
        with contextlib.suppress(OSError):
            while chunk := await process.stdout.read(_READ_CHUNK):
                seen += len(chunk)
                if len(kept) < STDOUT_LIMIT:
                    kept.extend(chunk[: STDOUT_LIMIT - len(kept)])

    async def feed() -> None:
        assert process.stdin is not None
        with contextlib.suppress(OSError, RuntimeError):
            process.stdin.write(payload)
            await process.stdin.drain()
        with contextlib.suppress(OSError, RuntimeError):
            process.stdin.close()

    try:
        with anyio.move_on_after(timeout) as deadline:
            async with anyio.create_task_group() as group:
                group.start_soon(feed)
                reader = anyio.Event()

                async def read_then_set() -> None:
                    await read()
                    reader.set()

                group.start_soon(read_then_set)
                await process.wait_exit()
                with anyio.move_on_after(_EXIT_GRACE):
                    await reader.wait()
                group.cancel_scope.cancel()
        timed_out = deadline.cancelled_caught
    finally:
        teardown = await process.terminate()
    status = teardown.exit_status or process.exit_status
    return HookRun(True, status.exit_code if status else None, status.signal if status else None, timed_out,
                   kept.decode("utf-8", "replace"), seen, process.stderr_lines(), time.monotonic() - began)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the hooks of one event said: ``refusal`` (the line or reason that refuses), ``shown`` lines for the
    user, ``context`` the hooks added, ``cause`` for /why."""

    refusal: str | None = None
    ask: str | None = None
    shown: tuple[str, ...] = ()
    context: str = ""
    cause: BaseException | None = None


class Hooks:
    """The session's hooks. ``publish`` records a ``hook/run`` event (the agent's, set once it exists);
    ``session_id`` names the session in each payload."""

    def __init__(self, specs: Sequence[HookSpec], *, cwd: str, redact: Callable[[str], str],
                 session_id: Callable[[], str | None] = lambda: None) -> None:
        self.specs = tuple(specs)
        self.cwd = cwd
        self.redact = redact
        self.session_id = session_id
        self.publish: Callable[[Event], None] | None = None
        self.recent: deque[HookRan] = deque(maxlen=RECENT)  # a failure capsule's (repl/capsule.py)
        self.last_failure: HookFailure | None = None

    def __bool__(self) -> bool:
        return bool(self.specs)

    def matching(self, event: str, tool: str | None = None) -> list[HookSpec]:
        return [spec for spec in self.specs if spec.event == event and spec.matches(tool)]

    async def fire(self, event: str, fields: Mapping[str, Any], *, tool: str | None = None,
                   arguments: Mapping[str, Any] | None = None, target: str = "the call") -> Outcome:
        """Run ``event``'s matching hooks in order; the first that blocks or refuses ends the run of them."""
        shown: list[str] = []
        context: list[str] = []
        for spec in self.matching(event, tool):
            payload = {"session_id": self.session_id() or "", "cwd": self.cwd, "hook_event_name": event, **fields}
            if tool is not None:
                payload |= tool_payload(spec, tool, arguments or {}, self.cwd)
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8", "replace")
            run = await run_hook(spec.command, data, cwd=self.cwd, timeout=spec.timeout)
            verdict = decide(exit_code=run.exit_code, timed_out=run.timed_out, started=run.started,
                             stdout=run.stdout, stderr=run.stderr, plain_context=event in CONTEXT_EVENTS)
            outcome = self._judge(spec, run, verdict, tool=tool, target=target)
            if verdict.context:  # the model's to read: masked and bounded as a hook's reason is
                context.append(self.redact(verdict.context)[:REASON_LIMIT])
            if outcome.refusal is not None or outcome.ask is not None:
                return Outcome(outcome.refusal, outcome.ask, (*shown, *outcome.shown), "\n".join(context),
                               outcome.cause)
            shown.extend(outcome.shown)
        return Outcome(shown=tuple(shown), context="\n".join(context))

    def _judge(self, spec: HookSpec, run: HookRun, verdict: Verdict, *, tool: str | None, target: str) -> Outcome:
        """Record the run, and say what it means for what it guards."""
        if verdict.says == "failed":
            assert verdict.category is not None
            refused = spec.event in GUARDING and verdict.category != "exit"
            line = failure_line(spec, verdict.category, run.seconds, target=target, exit_code=run.exit_code,
                                refused=refused)
            cause = self._failed(line, run)
            self._record(spec, run, "refused" if refused else "error", verdict.category, tool)
            return Outcome(refusal=line if refused else None, shown=(line,), cause=cause)
        self._record(spec, run, verdict.says, None, tool)
        reason = self.redact(verdict.reason)[:REASON_LIMIT]
        if verdict.says == "block":
            return Outcome(refusal=reason)
        if verdict.says == "ask":
            return Outcome(ask=reason or f"hook {spec.name} asks before {target} runs")
        return Outcome()

    def _failed(self, line: str, run: HookRun) -> HookFailure:
        words = AgentWords.gather((), run.stderr, self.redact)
        log.warning("%s", line)
        for text in words.lines("hook"):
            log.warning("%s", text)
        self.last_failure = HookFailure(line, words)
        return self.last_failure

    def _record(self, spec: HookSpec, run: HookRun, outcome: str, category: str | None, tool: str | None) -> None:
        event = HookRan(spec.event, spec.name, outcome, category, run.exit_code, round(run.seconds, 3), tool)
        self.recent.append(event)
        if self.publish is not None:
            self.publish(event)

    # --- the points of the session's life -------------------------------------------------------------

    async def check_prompt(self, prompt: str) -> tuple[str | None, str]:
        """UserPromptSubmit: the reason the prompt is refused (or None), and what the hooks added for the model
        (their plain stdout or ``additionalContext``, as in Claude Code)."""
        outcome = await self.fire("UserPromptSubmit", {"prompt": prompt}, target="prompt")
        return outcome.refusal, outcome.context


def session_hooks(configured: Sequence[HookSpec], claude_settings: bool, *, cwd: str, redact: Callable[[str], str],
                  session_id: Callable[[], str | None]) -> Hooks | None:
    """The session's hooks: config.toml's, then (``claude_settings``) the project's ``.claude/settings.json``'s;
    None when there are none. A settings file that cannot be read is a ``SettingsError`` (fail closed)."""
    specs = (*configured, *(claude_settings_hooks(cwd) if claude_settings else ()))
    return Hooks(specs, cwd=cwd, redact=redact, session_id=session_id) if specs else None


_POINTS = {"Stop": "the turn", "SessionStart": "the session", "PreCompact": "the compaction",
           "Notification": "the question"}


async def hook_point(hooks: object, event: str, fields: Mapping[str, Any], notice: Callable[[str], None]) -> None:
    """Stop, SessionStart, PreCompact, Notification: the session's hooks of ``event`` run (``hooks``: the agent's
    ``tools.hooks``); each failed one's line is shown. They guard nothing here: the session goes on."""
    if isinstance(hooks, Hooks) and hooks.matching(event):
        for line in (await hooks.fire(event, fields, target=_POINTS.get(event, "the session"))).shown:
            notice(line)


_SAMPLE_TOOL = ("run_shell", {"command": "true"})  # what `dsh doctor` asks a tool hook about


async def doctor_checks(specs: Sequence[HookSpec], *, cwd: str, redact: Callable[[str], str]) -> list[tuple[bool, str]]:
    """``dsh doctor``: each hook run once on a sample payload: (whether it answered, its line). A block or a deny of
    the sample is an answer (the hook runs); only a failure (timeout, not-found, exit, crash) is not."""
    checks: list[tuple[bool, str]] = []
    for spec in specs:
        tool, arguments = _SAMPLE_TOOL if spec.event in ("PreToolUse", "PostToolUse") else (None, None)
        fields: dict[str, Any] = {"prompt": "dsh doctor"} if spec.event == "UserPromptSubmit" else {}
        if spec.event == "PostToolUse":
            fields["tool_response"] = {"output": "", "is_error": False}
        single = Hooks((spec,), cwd=cwd, redact=redact, session_id=lambda: "doctor")
        outcome = await single.fire(spec.event, fields, tool=tool, arguments=arguments, target=tool or "the sample")
        ran = single.recent[-1] if single.recent else None
        if ran is None or ran.category is not None:
            checks.append((False, outcome.shown[-1] if outcome.shown else f"hook {spec.name} did not run"))
            continue
        checks.append((True, f"hook {spec.name} ({spec.event}): answered {ran.outcome} (exit code {ran.exit_code}) "
                             f"in {ran.duration_s:.1f}s; {spec.source}"))
    return checks
