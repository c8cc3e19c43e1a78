"""Events -> terminal text. Pure: no I/O, no clock, no terminal queries.

The app feeds every agent event to :meth:`Renderer.render` and writes what comes back. The
renderer remembers only where the cursor is on the current line, so a status line never glues
onto streamed text. :class:`TurnActivity` is the toolbar's view of a running turn; the caller
passes the clock in, which keeps it testable too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from dsh.agent_loop.events import (
    Event,
    JobNotice,
    LlmRetry,
    ReasoningDelta,
    StepStart,
    StreamKeepAlive,
    TextDelta,
    ToolCallStart,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from dsh.agent_loop.reasons import Aborted, EndReason, Failed, Interrupted, MaxTokens, Rejected
from dsh.llm import ErrorCode
from dsh.llm.network import FailureDetail
from dsh.llm.redact import redact_text

__all__ = [
    "DIM",
    "FIX_AUTH",
    "FIX_CERTIFICATE",
    "FIX_INVALID_URL",
    "FIX_NAME_NOT_FOUND",
    "FIX_PLAIN_HTTP",
    "FIX_PROXY",
    "FIX_PROXY_AUTH",
    "FIX_PROXY_DEPENDENCY",
    "FIX_PROXY_NAME",
    "FIX_PROXY_REFUSED",
    "FIX_QUOTA",
    "FIX_RATE_LIMIT",
    "FIX_REFUSED",
    "FIX_SERVER",
    "HIGHLIGHT",
    "RESET",
    "Renderer",
    "TurnActivity",
    "approval_answer",
    "approval_question",
    "fix_line",
    "sanitize",
    "turn_end_line",
]

DIM = "\x1b[2m"
HIGHLIGHT = "\x1b[1;33m"
RESET = "\x1b[0m"

# DeepSeek's documented remedies for the errors a user can act on, one short fixed line each.
FIX_AUTH = "  fix: check your API key (DEEPSEEK_API_KEY, or api_key in config.toml)"
FIX_QUOTA = "  fix: your DeepSeek balance has run out; top up at https://platform.deepseek.com/top_up"
FIX_RATE_LIMIT = "  fix: requests are arriving too fast; back off and try again shortly"
FIX_SERVER = "  fix: the DeepSeek server is having trouble; retry later"
# Transport and proxy failures, by FailureDetail; {host} and {url} come from the failure, {source} names
# the flag, environment variable or config file that set the value (docs/reliability.md).
FIX_REFUSED = "  fix: nothing is listening at {host} — check {source}"
FIX_NAME_NOT_FOUND = "  fix: the host name {name} does not exist — check {source}"
FIX_PLAIN_HTTP = "  fix: the server speaks plain HTTP — did you mean {url}?"
FIX_CERTIFICATE = (
    "  fix: the certificate is not trusted — install its CA in the system trust store, or point SSL_CERT_FILE at it"
)
FIX_INVALID_URL = "  fix: the URL is not valid — check {source}"
FIX_PROXY_REFUSED = "  fix: nothing is listening at the proxy {host} — check {source}"
FIX_PROXY_NAME = "  fix: the proxy host {name} does not exist — check {source}"
FIX_PROXY_AUTH = "  fix: the proxy refused the credentials — check the user:password in {source}"
FIX_PROXY_DEPENDENCY = "  fix: this proxy needs an extra package — pip install 'httpx[socks]'"
FIX_PROXY = "  fix: the proxy failed the request — check the proxy, or unset {source}"

_TOOL_RESULT_WIDTH = 240
_TOOL_ARGS_WIDTH = 400
_TOOL_PREVIEW_LINES = 3
_ELLIPSIS = "…"

# C0 controls except TAB and LF, DEL, and C1 controls: model or tool text must not drive the terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPACE_RUN = re.compile(r"\s*\n\s*")


def _control_picture(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return chr(0x2400 + code)  # ␛ for ESC, ␇ for BEL ...
    if code == 0x7F:
        return "\u2421"
    return "\ufffd"


def sanitize(text: str) -> str:
    """Make untrusted text inert on a terminal: CRLF -> LF, other controls -> visible pictures."""
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(_control_picture, text)


def _one_line(text: str) -> str:
    return sanitize(_SPACE_RUN.sub(" ", text))


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + _ELLIPSIS


def turn_end_line(reason: EndReason, secrets: Sequence[str] = ()) -> str | None:
    """The exact line for a turn-end reason; ``None`` for completed, disposed, unknown."""
    match reason:
        case Failed(code=code, message=message):
            code = _one_line(code)
            message = _one_line(redact_text(message, secrets))
            head = f"[turn failed {code}]" if code else "[turn failed]"
            return f"{head} {message}" if message else head
        case Aborted(reason=why):
            why = _one_line(why or "")
            return f"[turn aborted] {why}" if why else "[turn aborted]"
        case Rejected(reason=why):
            why = _one_line(redact_text(why, secrets))
            return f"[turn rejected] {why}" if why else "[turn rejected]"
        case MaxTokens():
            return "[turn hit the output-token limit]"
        case Interrupted():
            return "[turn interrupted by a previous process exit]"
    return None


_FIX_BY_CODE = {
    ErrorCode.AUTH: FIX_AUTH,
    ErrorCode.QUOTA: FIX_QUOTA,
    ErrorCode.RATE_LIMIT: FIX_RATE_LIMIT,
    ErrorCode.SERVER: FIX_SERVER,
}


def _host_port(url: str) -> tuple[str, str, str]:
    """``(host, host:port, scheme)`` of a redacted URL, the port filled in from the scheme."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "", "", ""
    shown = f"[{host}]" if ":" in host else host
    return host, f"{shown}:{port}", parts.scheme


def fix_line(reason: EndReason, sources: Mapping[str, str] | None = None) -> str | None:
    """The one-line remedy for a failure: by code (never the bare status), then by what the failure was.

    ``sources`` says where ``base_url``, ``api_key`` and ``proxy`` came from (``Config.sources``).
    """
    if not isinstance(reason, Failed):
        return None
    sources = sources or {}
    detail, endpoint = reason.detail, reason.endpoint or ""
    host, host_port, scheme = _host_port(endpoint)
    if reason.code == ErrorCode.PROXY:
        source = sources.get("proxy", "the proxy setting (--proxy, HTTPS_PROXY, or proxy in config.toml)")
        if detail == FailureDetail.PROXY_AUTH:
            line = FIX_PROXY_AUTH
        elif detail == FailureDetail.REFUSED and host_port:
            line = FIX_PROXY_REFUSED
        elif detail == FailureDetail.NAME_NOT_FOUND and host:
            line = FIX_PROXY_NAME
        elif detail == FailureDetail.PROXY_DEPENDENCY:
            line = FIX_PROXY_DEPENDENCY
        else:
            line = FIX_PROXY
        return _one_line(line.format(host=host_port, name=host, source=source))
    if reason.code == ErrorCode.TRANSPORT and detail is not None:
        source = sources.get("base_url", "base_url (--base-url, DEEPSEEK_BASE_URL or config.toml)")
        if detail == FailureDetail.REFUSED and host_port:
            return _one_line(FIX_REFUSED.format(host=host_port, source=source))
        if detail == FailureDetail.NAME_NOT_FOUND and host:
            return _one_line(FIX_NAME_NOT_FOUND.format(name=host, source=source))
        if detail == FailureDetail.PLAIN_HTTP and scheme == "https":
            return _one_line(FIX_PLAIN_HTTP.format(url="http" + endpoint[len("https"):]))
        if detail == FailureDetail.CERTIFICATE:
            return FIX_CERTIFICATE
        if detail == FailureDetail.INVALID_URL:
            return _one_line(FIX_INVALID_URL.format(source=source))
        return None
    return _FIX_BY_CODE.get(reason.code)


# Where the cursor stands on the current screen line.
_START = "start"  # column 0
_HEADER = "header"  # just after "[main turn N] ": a status line may follow on the same line
_MID = "mid"  # after streamed text that did not end its line


class Renderer:
    """Turns agent events into text. Holds only cursor-position state; never writes anywhere."""

    def __init__(
        self, *, color: bool, label: str = "main", secrets: Sequence[str] = (), sources: Mapping[str, str] | None = None
    ) -> None:
        self.color = color
        self.sources = dict(sources or {})
        self.label = label
        self.secrets = tuple(secret for secret in secrets if secret)
        self._column = _START
        self._stream: str | None = None  # "text" or "reasoning": which kind of delta came last

    @property
    def at_line_start(self) -> bool:
        return self._column == _START

    # --- public entry points --------------------------------------------------------------

    def render(self, event: Event) -> str:
        # Deltas first: a turn streams 100 000s of them.
        match event:
            case TextDelta(text=text):
                return self._emit(self._stream_delta("text", text))
            case ReasoningDelta(text=text):
                return self._emit(self._stream_delta("reasoning", text))
            case TurnStart(turn=turn):
                return self.header(turn)
            case ToolCallStart():
                return self._emit(self._tool_call(event))
            case ToolResult():
                return self._emit(self._tool_result(event))
            case LlmRetry():
                return self._emit(self._retry(event))
            case TurnEnd(reason=reason):
                return self._emit(self._turn_end(reason))
            case JobNotice(text=text):
                return self._emit(self._job_notice(text))
        return ""  # step starts, assistant messages, keep-alives, unknown types: nothing to show

    def header(self, turn: int) -> str:
        """``[main turn N] `` on a fresh line."""
        self._stream = None
        text = self._break_line() + f"[{self.label} turn {turn}] "
        self._column = _HEADER
        return text

    def resume_notice(self, turn: int) -> str:
        """What ``--resume`` reports first for a turn the log repair just closed."""
        return self.header(turn) + self._emit(f"{turn_end_line(Interrupted())}\n")

    def end_line(self) -> str:
        """End a partial line (or a bare header) so that what follows starts at column 0."""
        return self._emit(self._break_line())

    def line(self, text: str) -> str:
        """A free-standing message line (command output, hints) placed on its own line."""
        return self._emit(self._break_line() + text + "\n")

    # --- cursor bookkeeping -----------------------------------------------------------------

    def _emit(self, text: str) -> str:
        if text:
            self._column = _START if text.endswith("\n") else _MID
        return text

    def _break_line(self) -> str:
        """Newline needed before a line of its own (tool lines, notices)."""
        return "" if self._column == _START else "\n"

    def _status_break(self) -> str:
        """Newline needed before a status line: none right after the turn header."""
        return "\n" if self._column == _MID else ""

    def _styled(self, text: str, style: str) -> str:
        if not self.color or not text:
            return text
        # Style each line separately so a line never ends inside an open escape sequence.
        return "\n".join(f"{style}{part}{RESET}" if part else part for part in text.split("\n"))

    # --- handlers ----------------------------------------------------------------------------

    def _stream_delta(self, kind: str, text: str) -> str:
        if not text:
            return ""
        prefix = ""
        if self._stream not in (None, kind) and self._column == _MID:
            prefix = "\n"  # reasoning and answer each get their own lines
        self._stream = kind
        body = sanitize(text)
        return prefix + (self._styled(body, DIM) if kind == "reasoning" else body)

    def _tool_call(self, event: ToolCallStart) -> str:
        self._stream = None
        name = _one_line(event.name) or "?"
        arguments = _clip(_one_line(event.arguments), _TOOL_ARGS_WIDTH)
        return self._break_line() + f"  [tool call] {name}({arguments})\n"

    def _tool_result(self, event: ToolResult) -> str:
        self._stream = None
        output = sanitize(event.output).strip("\n")
        lines = output.split("\n") if output else ["(no output)"]
        diagnostic = event.diagnostic
        has_diagnostic = bool(diagnostic)
        first = lines[0]
        if event.is_error and not first.lower().startswith("error"):
            first = "Error: " + first
        # With a diagnostic, the output's first line is the verdict and the diagnostic says why;
        # otherwise a short preview of the output (the model sees all of it).
        shown = [first] if has_diagnostic else [first, *lines[1:_TOOL_PREVIEW_LINES]]
        text = self._break_line() + f"  [tool result] {_clip(shown[0], _TOOL_RESULT_WIDTH)}\n"
        for line in shown[1:]:
            text += f"    {_clip(line, _TOOL_RESULT_WIDTH)}\n"
        hidden = len(lines) - len(shown)
        if hidden > 0 and not has_diagnostic:
            text += f"    … (+{hidden} more line{'s' if hidden != 1 else ''})\n"
        if diagnostic:
            for line in sanitize(diagnostic).split("\n"):
                text += "    " + self._styled(line, HIGHLIGHT) + "\n"
        return text

    def _retry(self, event: LlmRetry) -> str:
        delay_s = _finite(event.delay_s)
        code = _one_line(event.code) or ErrorCode.UNKNOWN
        message = _one_line(redact_text(event.message, self.secrets))
        self._stream = None
        return (
            self._status_break() + f"[retry {event.attempt}/{event.max_attempts} in {delay_s:.1f}s] {code}: {message}\n"
        )

    def _turn_end(self, reason: EndReason) -> str:
        self._stream = None
        line = turn_end_line(reason, self.secrets)
        if line is None:
            return self._break_line()
        text = self._status_break() + line + "\n"
        fix = fix_line(reason, self.sources)
        if fix:
            text += fix + "\n"
        return text

    def _job_notice(self, text: str) -> str:
        self._stream = None
        return self._break_line() + f"[job] {_one_line(text)}\n"


def approval_question(command: str) -> str:
    """The inline question for a shell command (shown live; committed with its answer)."""
    shown = sanitize(command).strip("\n").replace("\n", "\n      ")
    return f"  [approve] run_shell: {shown}  (y / n / a) "


def approval_answer(answer: str | None) -> str:
    return {"y": "yes", "a": "always"}.get(answer or "", "no")


# --- the toolbar's view of a running turn --------------------------------------------------------


class TurnActivity:
    """``waiting for first token 12s · keep-alive 2s ago`` and friends, from events and a clock."""

    def __init__(self) -> None:
        self._state = "idle"
        self._since = 0.0
        self._keepalive_at: float | None = None
        self._detail = ""

    @property
    def busy(self) -> bool:
        return self._state != "idle"

    def _wait(self, now: float) -> None:
        self._state, self._since, self._keepalive_at = "waiting", now, None

    def on_event(self, event: Event, now: float) -> None:
        match event:
            case TextDelta() | ReasoningDelta():
                self._state = "streaming"
            case TurnStart() | StepStart():
                self._wait(now)
            case StreamKeepAlive():
                self._keepalive_at = now
            case ToolCallStart(name=name):
                self._state, self._detail = "tool", _one_line(name)
            case LlmRetry(attempt=attempt, max_attempts=total, delay_s=delay_s):
                self._state, self._since, self._keepalive_at = "retry", now + max(_finite(delay_s), 0.0), None
                self._detail = f"{attempt}/{total}"
            case TurnEnd():
                self._state = "idle"

    def text(self, now: float) -> str:
        if self._state == "retry" and now >= self._since:
            self._state = "waiting"  # the backoff is over: the next request is out
        if self._state == "waiting":
            text = f"waiting for first token {max(0, int(now - self._since))}s"
            if self._keepalive_at is not None:
                text += f" · keep-alive {max(0, int(now - self._keepalive_at))}s ago"
            return text
        if self._state == "retry":
            return f"retry {self._detail} in {math.ceil(self._since - now)}s"
        if self._state == "streaming":
            return "streaming"
        if self._state == "tool":
            return f"running {self._detail}" if self._detail else "running a tool"
        return ""
