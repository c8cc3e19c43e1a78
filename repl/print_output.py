"""What ``dsh -p`` writes to stdout, by ``--output-format`` (docs/scripting.md).

- ``text``: the answer text alone, as it streams (the shell's :class:`~dsh.repl.render.AnswerSplit`
  sends it here; everything else goes to stderr).
- ``json``: one object once the turn is over: session id, the turn-end reason (always with ``code`` and
  ``message``), the answer text, usage, cost, duration and exit status.
- ``stream-json``: one object per line as events happen, in the session log's vocabulary: the log's
  header line (``{"type":"session",...}``) first, then each event's wire form
  (:func:`dsh.agent_loop.events.to_wire`), deltas and keep-alives included, up to ``turn/end``.

JSON is written ASCII-only (``\\uXXXX`` escapes), so no byte of it can drive a terminal and the sink's
sanitizer never has to touch it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from dsh.agent_loop.events import Event, TurnStart, to_wire
from dsh.llm import ErrorCode, redact_text
from dsh.repl.shell import Shell, Sink

__all__ = ["PrintOutput", "result_object"]


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


def result_object(shell: Shell, reason: Mapping[str, Any] | None, status: int, duration_s: float,
                  text: str) -> dict[str, Any]:
    """The ``--output-format json`` object for a finished ``-p`` turn."""
    reason = dict(reason or {"kind": "error", "code": str(ErrorCode.STARTUP), "message": "no turn ran"})
    kind = reason.get("kind")
    if kind == "error":
        message = reason.get("message")
    elif kind in ("aborted", "rejected"):
        message = reason.get("reason")
    else:
        message = None
    reason.setdefault("code", None)
    reason["message"] = message if isinstance(message, str) and message else None
    tally = shell.turn_usage
    return {
        "type": "result",
        "session_id": shell.session_id,
        "reason": _redacted(reason, shell.config.secrets),
        "exit_code": status,
        "text": text,
        "usage": {
            "requests": tally.requests,
            "prompt_tokens": tally.prompt,
            "cached_tokens": tally.cached,
            "output_tokens": tally.output,
            "reasoning_tokens": tally.reasoning,
        },
        "cost_usd": round(tally.cost, 6) if tally.cost is not None else None,
        "duration_s": round(duration_s, 3),
    }


class PrintOutput:
    """stdout for one ``-p`` run: :attr:`answer` receives the answer text; the rest is by format."""

    def __init__(self, output_format: str, stdout: Any) -> None:
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
        agent = shell.ensure_agent()

        def on_event(event: Event) -> None:
            if not self._header_sent and isinstance(event, TurnStart) and shell.session is not None:
                self._header_sent = True
                self.stdout.write(_dumps(dict(shell.session.header)))
            self.stdout.write(_dumps(to_wire(event)))

        unsubscribe = agent.subscribe(on_event)
        try:
            yield
        finally:
            unsubscribe()

    def finish(self, shell: Shell, reason: Mapping[str, Any] | None, status: int, duration_s: float) -> None:
        if self._collected is not None:
            self.stdout.write(_dumps(result_object(shell, reason, status, duration_s, self._collected.text())))
        self.flush()

    def flush(self) -> None:
        flush = getattr(self.stdout, "flush", None)
        if flush is not None:
            flush()
