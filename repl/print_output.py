"""What ``dsh -p`` writes to stdout, by ``--output-format`` (docs/scripting.md).

- ``text``: the answer text alone, as it streams (the shell's :class:`~dsh.repl.answer_split.AnswerSplit`
  sends it here; everything else goes to stderr).
- ``json``: one object once the turn is over: session id, the turn-end reason (always with ``code`` and
  ``message``), the answer text, usage, cost, the plan's open items, duration and exit status.
- ``stream-json``: one object per line as events happen, in the session log's vocabulary: the log's
  header line (``{"type":"session",...}``) first, then each event's wire form
  (:func:`dsh.agent_loop.events.to_wire`), deltas and keep-alives included, up to ``turn/end``.

JSON is written ASCII-only (``\\uXXXX`` escapes), so no byte of it can drive a terminal and the sink's
sanitizer never has to touch it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio

from dsh.agent_loop.events import Event, TurnStart, to_wire
from dsh.agent_loop.plan import current_plan
from dsh.agent_loop.reasons import Aborted, EndReason
from dsh.agent_loop.session import SessionUpdate
from dsh.llm import HarnessError, error_chain, redact_text
from dsh.repl.capsule import failed_turn, write_capsule
from dsh.repl.config import Config
from dsh.repl.frontend import PlainFrontEnd, Sink, StreamSink
from dsh.repl.options import LaunchOptions
from dsh.repl.shell import Shell, color, open_shell
from dsh.repl.signals import Signals

__all__ = ["PrintFrontEnd", "result_object", "run_print"]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")) + "\n"


class _Collect:
    """The answer text, kept for the ``json`` object (the conversation holds it anyway)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def text(self) -> str:
        return "".join(self.parts).removesuffix("\n")


class _Discard:
    def write(self, text: str) -> None:
        pass


def _redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, Mapping):
        return {key: _redacted(item, secrets) for key, item in value.items()}
    return value


def result_object(shell: Shell, end: EndReason, status: int, duration_s: float, text: str) -> dict[str, Any]:
    """The ``--output-format json`` object for a finished ``-p`` turn."""
    reason = end.to_dict()
    kind = reason.get("kind")
    if kind == "error":
        message = reason.get("message")
    elif kind in ("aborted", "rejected"):
        message = reason.get("reason")
    else:
        message = None
    reason.setdefault("code", None)
    reason["message"] = message if isinstance(message, str) and message else None
    tally = shell.session.turn_usage
    known = tally.tokens_known  # a request without usage makes the sums unknown (null), never zero
    return {
        "type": "result",
        "session_id": shell.session.id,
        "reason": _redacted(reason, shell.config.secrets),
        "exit_code": status,
        "text": text,
        "usage": {
            "requests": tally.requests,
            "prompt_tokens": tally.prompt if known else None,
            "cached_tokens": tally.cached if known else None,
            "output_tokens": tally.output if known else None,
            "reasoning_tokens": tally.reasoning if known else None,
        },
        "cost_usd": round(tally.cost, 6) if known and tally.cost is not None else None,
        "cache_hit_rate": None if tally.cache_hit_rate is None else round(tally.cache_hit_rate, 4),
        "budget": _budget(shell),
        **_plan_counts(shell),
        "duration_s": round(duration_s, 3),
    }


def _budget(shell: Shell) -> dict[str, float] | None:
    """``max_cost`` and the cost so far (a resumed session's included: what the cap counts); None with no cap."""
    spent = shell.session.spent
    return None if spent is None else {"max_cost": spent[1], "spent": round(spent[0], 6)}


def _plan_counts(shell: Shell) -> dict[str, int | None]:
    """The plan's open and total items (todo_write's, a resumed session's included); null with no plan."""
    plan = current_plan(shell.session)
    return {"plan_open": plan.open if plan is not None else None,
            "plan_total": plan.total if plan is not None else None}


class PrintFrontEnd(PlainFrontEnd):
    """``-p``: everything but the answer to stderr; stdout gets what ``--output-format`` says.

    :attr:`answer` receives the answer text (the shell's display splits it off).
    """

    def __init__(self, output_format: str, stderr: StreamSink, stdout: StreamSink) -> None:
        super().__init__(stderr, flush=stderr.flush)
        self.format = output_format
        self.stdout = stdout
        self._collected = _Collect() if output_format == "json" else None
        self.answer: Sink = (
            stdout if output_format == "text" else self._collected if self._collected is not None else _Discard()
        )
        self._header_sent = False

    @contextlib.contextmanager
    def watching(self, shell: Shell) -> Iterator[None]:
        """While the turn runs: ``stream-json`` writes each event of the main agent as it is published."""
        if self.format != "stream-json":
            yield
            return

        def on_update(update: SessionUpdate) -> None:
            if not isinstance(update, Event):
                return  # the session's own notices are lines on stderr
            log = shell.session.log
            if not self._header_sent and isinstance(update, TurnStart) and log is not None:
                self._header_sent = True
                self.stdout.write(_dumps(dict(log.header)))
            self.stdout.write(_dumps(to_wire(update)))

        unsubscribe = shell.session.subscribe(on_update)
        try:
            yield
        finally:
            unsubscribe()

    def finish(self, shell: Shell, end: EndReason, status: int, duration_s: float) -> None:
        if self._collected is not None:
            self.stdout.write(_dumps(result_object(shell, end, status, duration_s, self._collected.text())))
        self.stdout.flush()


async def run_print(options: LaunchOptions, config: Config, env: dict[str, str]) -> int:
    stderr = StreamSink(sys.stderr)
    output_format = options.output_format or "text"
    frontend = PrintFrontEnd(output_format, stderr, StreamSink(sys.stdout))
    # The answer is Markdown on a colour terminal, as in the REPL; piped or redirected, as the model wrote it.
    answer_markdown = output_format == "text" and color(env, sys.stdout)
    try:
        async with contextlib.AsyncExitStack() as stack:
            shell = await open_shell(stack, options, config, env, frontend, color=color(env, sys.stderr),
                                     answer=frontend.answer, answer_markdown=answer_markdown)
            return await _one_turn(shell, options.print_prompt or "", frontend, options.report,
                                   tuple(Path(image) for image in options.images))
    finally:
        stderr.flush()  # nothing written, even while closing down, is left behind
        frontend.stdout.flush()


async def _one_turn(shell: Shell, prompt: str, frontend: PrintFrontEnd, report: str | None = None,
                    images: tuple[Path, ...] = ()) -> int:
    signals = Signals(shell.session, lambda: None)
    started = time.monotonic()
    async with anyio.create_task_group() as tasks:
        await tasks.start(signals.watch)
        with frontend.watching(shell):
            end = await shell.run_turn(prompt, images=images)
        frontend.flush()
        tasks.cancel_scope.cancel()
    status = signals.exit_status(end.exit_code) if isinstance(end, Aborted) else end.exit_code
    frontend.finish(shell, end, status, time.monotonic() - started)
    if report is not None:  # after the turn's own lines (and --output-format json's object)
        await _report(shell, report, frontend)
    return status


async def _report(shell: Shell, path: str, frontend: PrintFrontEnd) -> None:
    """``--report FILE``: the failure capsule, only when the turn did not complete; the exit status stays the turn's."""
    if failed_turn(shell) is None:
        return
    try:
        written = await write_capsule(shell, path)
    except HarnessError as exc:
        shell.say(f"dsh: report not written: {redact_text(error_chain(exc), shell.config.secrets)}")
    else:
        shell.say(f"dsh: report written to {written}")
    frontend.flush()
