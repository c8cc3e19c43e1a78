"""Events -> terminal text. Pure: no I/O, no clock, no terminal queries.

The app feeds every agent event to :meth:`Renderer.render` and writes what comes back. The
renderer remembers only where the cursor is on the current line, so a status line never glues
onto streamed text. :class:`TurnActivity` is the toolbar's view of a running turn; the caller
passes the clock in, which keeps it testable too.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from dsh.agent_loop.events import (
    ContextCompacted,
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
from dsh.llm.endpoint import Endpoint, endpoint_for_url, host_and_address
from dsh.llm.network import FailureDetail
from dsh.llm.redact import redact_text
from dsh.repl.markdown import CODE_CHAR_COST, DELTA_MARKUP_BUDGET, MARKDOWN_STYLES, MarkdownLines, Segment
from dsh.repl.sanitize import sanitize

__all__ = [
    "ADDED",
    "ANSWER",
    "APPROVAL_MAX_CHARS",
    "DIM",
    "FIX_AUTH",
    "FIX_AUTH_FROM",
    "FIX_CERTIFICATE",
    "FIX_CERTIFICATE_EXPIRED",
    "FIX_CERTIFICATE_NAME",
    "FIX_CERTIFICATE_NOT_YET_VALID",
    "FIX_CONTEXT",
    "FIX_INVALID_URL",
    "FIX_NAME_NOT_FOUND",
    "FIX_PLAIN_HTTP",
    "FIX_PROXY",
    "FIX_PROXY_AUTH",
    "FIX_PROXY_DEPENDENCY",
    "FIX_PROXY_NAME",
    "FIX_PROXY_REFUSED",
    "FIX_QUOTA",
    "FIX_QUOTA_ELSEWHERE",
    "FIX_RATE_LIMIT",
    "FIX_REFUSED",
    "FIX_SERVER",
    "FIX_UPSTREAM_AUTH",
    "FIX_UPSTREAM_QUOTA",
    "HIGHLIGHT",
    "REMOVED",
    "RESET",
    "REST",
    "STALL_AFTER_S",
    "AnswerSplit",
    "Approval",
    "Renderer",
    "Rewrite",
    "Styled",
    "TurnActivity",
    "approval_answer",
    "approval_question",
    "compacted_line",
    "diff_approval",
    "fit_width",
    "fix_line",
    "mcp_approval",
    "mcp_arguments",
    "sanitize",
    "shown_command",
    "shown_diff",
    "styled",
    "terminal_text",
    "turn_end_line",
]

DIM = "\x1b[2m"
HIGHLIGHT = "\x1b[1;33m"
ADDED = "\x1b[32m"
REMOVED = "\x1b[31m"
RESET = "\x1b[0m"

# Remedies for the errors a user can act on, one short line each. {endpoint} names who answered
# (dsh.llm.endpoint): "the DeepSeek server", "the LiteLLM server", "the endpoint at 127.0.0.1:4000".
FIX_AUTH = "  fix: check your API key (DEEPSEEK_API_KEY, or api_key in config.toml)"
FIX_AUTH_FROM = "  fix: the API key was refused — check {source}"  # where the key came from is known
# A gateway accepted the user's key and relayed its upstream's refusal of the gateway's own credential.
FIX_UPSTREAM_AUTH = (
    "  fix: {gateway} accepted your key, but its upstream refused {owner} own credential"
    " — check the upstream key in {owner} configuration"
)
# The same for quota or credit: the gateway's upstream account ran out, not the account of the user's key.
FIX_UPSTREAM_QUOTA = (
    "  fix: {gateway} accepted your key, but its upstream refused {owner} own account for quota or credit"
    " — check the balance of the upstream account in {owner} configuration"
)
FIX_QUOTA = "  fix: your DeepSeek balance has run out; top up at https://platform.deepseek.com/top_up"
FIX_QUOTA_ELSEWHERE = (
    "  fix: {endpoint} refused the request for quota or credit — check the account of the key in {source}"
)
FIX_RATE_LIMIT = "  fix: requests are arriving too fast; back off and try again shortly"
FIX_SERVER = "  fix: {endpoint} is having trouble; retry later"
FIX_CONTEXT = "  fix: the conversation is too long for the model — /compact or /new"
# Transport and proxy failures, by FailureDetail; {host} and {url} come from the failure, {source} names
# the flag, environment variable or config file that set the value (docs/reliability.md).
FIX_REFUSED = "  fix: nothing is listening at {host} — check {source}"
FIX_NAME_NOT_FOUND = "  fix: the host name {name} does not exist — check {source}"
FIX_PLAIN_HTTP = "  fix: the server speaks plain HTTP — did you mean {url}?"
# Certificate failures, by FailureDetail: how to trust the CA, or what the server must change. Never "turn
# verification off" (docs/reliability.md, "Certificate failures"); tests/repl/test_render.py holds them to it.
FIX_CERTIFICATE = (
    "  fix: trust the CA that issued it: point SSL_CERT_FILE at a bundle that holds that CA, or add the CA to the"
    " OS trust store (update-ca-certificates on Debian)"
)
FIX_CERTIFICATE_NAME = (
    "  fix: the certificate is for other host names — use one it names in {source}, or the server needs a"
    " certificate for {name}"
)
FIX_CERTIFICATE_EXPIRED = (
    "  fix: the server's certificate has expired and must be renewed there (if it looks current, check this"
    " machine's clock)"
)
FIX_CERTIFICATE_NOT_YET_VALID = (
    "  fix: the certificate is not valid yet — check this machine's clock, or the dates of the server's certificate"
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

_SPACE_RUN = re.compile(r"\s*\n\s*")


_STYLES = {"dim": DIM, "highlight": HIGHLIGHT, "added": ADDED, "removed": REMOVED, **MARKDOWN_STYLES}


class Styled(str):
    """Text plus dsh's own styling: the str value is the plain (untrusted) text, ``spans`` name styles.

    Styles are names, never escape bytes: only :func:`terminal_text` turns them into SGR, after
    sanitizing the text. Joining with ``+`` keeps the spans; any other str operation drops them, so
    a lost style costs colour, never safety.
    """

    spans: tuple[tuple[int, int, str], ...]

    def __new__(cls, text: str, spans: tuple[tuple[int, int, str], ...] = ()) -> Styled:
        self = super().__new__(cls, text)
        self.spans = spans
        return self

    def __add__(self, other: str) -> Styled:
        if not isinstance(other, str):
            return NotImplemented
        shift = len(self)
        extra = tuple((a + shift, b + shift, s) for a, b, s in _spans_of(other))
        return Styled(str.__add__(self, other), self.spans + extra)

    def __radd__(self, other: str) -> Styled:
        if not isinstance(other, str):
            return NotImplemented
        shift = len(other)
        return Styled(str.__add__(other, self), tuple((a + shift, b + shift, s) for a, b, s in self.spans))


def _spans_of(text: str) -> tuple[tuple[int, int, str], ...]:
    """The style spans of ``text``: none for a plain str."""
    return text.spans if isinstance(text, Styled) else ()


class Rewrite(Styled):
    """Text that replaces the sink's unfinished line: the raw line streamed so far, now rendered.

    Only a sink that keeps its unfinished line aside (the interactive one, ``rewrites_partial``) gets
    these; it drops that line and writes this text in its place.
    """

    rewrites_partial = True


def _rewrite(text: str) -> Rewrite:
    return Rewrite(str(text), _spans_of(text))


def segments_text(segments: list[Segment]) -> Styled:
    """Styled text from ``(text, style)`` segments (the markdown renderer's output)."""
    parts: list[str] = []
    spans: list[tuple[int, int, str]] = []
    at = 0
    for text, style in segments:
        if style is not None and text:
            if spans and spans[-1][1] == at and spans[-1][2] == style:
                spans[-1] = (spans[-1][0], at + len(text), style)  # one run for neighbours alike
            else:
                spans.append((at, at + len(text), style))
        parts.append(text)
        at += len(text)
    return Styled("".join(parts), tuple(spans))


def styled(text: str, style: str) -> Styled:
    return Styled(text, ((0, len(text), style),) if text else ())


def _paint(text: str, style: str) -> str:
    # Style each line separately so a line never ends inside an open escape sequence.
    sgr = _STYLES[style]
    return "\n".join(f"{sgr}{part}{RESET}" if part else part for part in sanitize(text).split("\n"))


def terminal_text(text: str) -> str:
    """What a sink writes for ``text``: every untrusted character sanitized, then dsh's own styles as SGR."""
    spans = _spans_of(text)
    if not spans:
        return sanitize(str(text))
    plain = str(text)
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(plain):
        return _paint(plain, spans[0][2])  # one styled delta (reasoning): the common case
    out: list[str] = []
    at = 0
    for start, end, style in sorted(spans):
        if start < at:
            continue
        out.append(sanitize(plain[at:start]))
        out.append(_paint(plain[start:end], style))
        at = end
    out.append(sanitize(plain[at:]))
    return "".join(out)


def one_line(text: str) -> str:
    return _SPACE_RUN.sub(" ", text)


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n")


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + _ELLIPSIS


def turn_end_line(reason: EndReason, secrets: Sequence[str] = ()) -> str | None:
    """The exact line for a turn-end reason; ``None`` for completed, disposed, unknown."""
    match reason:
        case Failed(code=code, message=message):
            code = one_line(code)
            message = one_line(redact_text(message, secrets))
            head = f"[turn failed {code}]" if code else "[turn failed]"
            return f"{head} {message}" if message else head
        case Aborted(reason=why):
            why = one_line(why or "")
            return f"[turn aborted] {why}" if why else "[turn aborted]"
        case Rejected(reason=why):
            why = one_line(redact_text(why, secrets))
            return f"[turn rejected] {why}" if why else "[turn rejected]"
        case MaxTokens():
            return "[turn hit the output-token limit]"
        case Interrupted():
            return "[turn interrupted by a previous process exit]"
    return None


_FIX_BY_CODE: dict[str, str] = {
    ErrorCode.AUTH: FIX_AUTH,
    ErrorCode.RATE_LIMIT: FIX_RATE_LIMIT,
    ErrorCode.CONTEXT_WINDOW_EXCEEDED: FIX_CONTEXT,
}
_KEY_SOURCE = "DEEPSEEK_API_KEY (or api_key in config.toml)"


def _host_port(url: str) -> tuple[str, str, str]:
    """``(host, host:port, scheme)`` of a redacted URL, the port filled in from the scheme."""
    host, address = host_and_address(url)
    try:
        scheme = urlsplit(url).scheme if address else ""
    except ValueError:
        scheme = ""
    return host, address, scheme


def _answered_by(reason: Failed) -> Endpoint | None:
    """Who answered the failed request, or None when the failure does not say (a log from before dsh knew)."""
    if not reason.endpoint:
        return None
    return endpoint_for_url(reason.endpoint, reason.endpoint_name)


def _server_words(endpoint: Endpoint | None) -> str:
    """``the DeepSeek server``, ``the LiteLLM server``, ``the endpoint at 127.0.0.1:4000``, ``the server``."""
    if endpoint is None:
        return "the server"
    return f"the {endpoint.name} server" if endpoint.name else str(endpoint)


# A gateway relayed its upstream's refusal of the gateway's own credential or account (llm/http_status.py).
_UPSTREAM_FIXES: dict[tuple[str, str], str] = {
    (ErrorCode.AUTH, FailureDetail.UPSTREAM_AUTH): FIX_UPSTREAM_AUTH,
    (ErrorCode.QUOTA, FailureDetail.UPSTREAM_QUOTA): FIX_UPSTREAM_QUOTA,
}


def _endpoint_fix(reason: Failed, sources: Mapping[str, str]) -> str | None:
    """The fix lines that name the endpoint: SERVER, QUOTA (DeepSeek's top-up page only for DeepSeek) and
    a gateway's upstream refusing the gateway's own credential or account."""
    endpoint = _answered_by(reason)
    upstream = _UPSTREAM_FIXES.get((reason.code, reason.detail or ""))
    if upstream is not None:
        gateway = endpoint.name if endpoint is not None and endpoint.name else None
        words = gateway or (f"the gateway at {endpoint.address}" if endpoint is not None else "the gateway")
        return one_line(upstream.format(gateway=words, owner=f"{gateway}'s" if gateway else "the gateway's"))
    if reason.code == ErrorCode.SERVER:
        return one_line(FIX_SERVER.format(endpoint=_server_words(endpoint)))
    if reason.code == ErrorCode.QUOTA:
        if endpoint is not None and endpoint.is_deepseek:
            return FIX_QUOTA
        words = str(endpoint) if endpoint is not None else "the endpoint"
        return one_line(FIX_QUOTA_ELSEWHERE.format(endpoint=words, source=sources.get("api_key", _KEY_SOURCE)))
    return None


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
        return one_line(line.format(host=host_port, name=host, source=source))
    if reason.code == ErrorCode.TRANSPORT and detail is not None:
        source = sources.get("base_url", "base_url (--base-url, DEEPSEEK_BASE_URL or config.toml)")
        if detail == FailureDetail.REFUSED and host_port:
            return one_line(FIX_REFUSED.format(host=host_port, source=source))
        if detail == FailureDetail.NAME_NOT_FOUND and host:
            return one_line(FIX_NAME_NOT_FOUND.format(name=host, source=source))
        if detail == FailureDetail.PLAIN_HTTP and scheme == "https":
            return one_line(FIX_PLAIN_HTTP.format(url="http" + endpoint[len("https"):]))
        if detail == FailureDetail.CERTIFICATE:
            return FIX_CERTIFICATE
        if detail == FailureDetail.CERTIFICATE_NAME and host:
            return one_line(FIX_CERTIFICATE_NAME.format(name=host, source=source))
        if detail == FailureDetail.CERTIFICATE_EXPIRED:
            return FIX_CERTIFICATE_EXPIRED
        if detail == FailureDetail.CERTIFICATE_NOT_YET_VALID:
            return FIX_CERTIFICATE_NOT_YET_VALID
        if detail == FailureDetail.INVALID_URL:
            return one_line(FIX_INVALID_URL.format(source=source))
        return None
    named = _endpoint_fix(reason, sources)
    if named is not None:
        return named
    if reason.code == ErrorCode.AUTH and "api_key" in sources:
        return one_line(FIX_AUTH_FROM.format(source=sources["api_key"]))
    return _FIX_BY_CODE.get(reason.code)


def compacted_line(event: ContextCompacted) -> str:
    """``[compacted] 12 messages replaced by a summary of 340 tokens`` (then the retry, when automatic)."""
    usage = event.usage
    size = f"{usage.completion_tokens:,} tokens" if usage is not None and usage.completion_tokens else (
        f"{len(event.summary):,} characters")
    count = f"{event.replaced} message{'s' if event.replaced != 1 else ''}"
    line = f"[compacted] {count} replaced by a summary of {size}"
    return line + ("; sending the request again" if event.turn is not None else "")


# Where the cursor stands on the current screen line.
_START = "start"  # column 0
_HEADER = "header"  # just after "[main turn N] ": a status line may follow on the same line
_MID = "mid"  # after streamed text that did not end its line


class Renderer:
    """Turns agent events into text. Holds only cursor-position state; never writes anywhere."""

    def __init__(
        self,
        *,
        color: bool,
        label: str = "main",
        secrets: Sequence[str] = (),
        sources: Mapping[str, str] | None = None,
        markdown: str | None = None,
    ) -> None:
        """``markdown``: None (answer text verbatim), ``"lines"`` (each line rendered when its newline
        arrives) or ``"live"`` (the same, and the unfinished line streams raw, then is rewritten)."""
        self.color = color
        self.sources = dict(sources or {})
        self.label = label
        self.secrets = tuple(secret for secret in secrets if secret)
        self._column = _START
        self._stream: str | None = None  # "text" or "reasoning": which kind of delta came last
        self._markdown = MarkdownLines() if markdown is not None else None
        self._live = markdown == "live"
        self._line: list[str] = []  # the answer's unfinished line, raw (markdown only)
        self._screen_prefix = ""  # dsh's own text before that line on the screen line (the turn header)

    @property
    def markdown_live(self) -> bool:
        return self._live

    @markdown_live.setter
    def markdown_live(self, live: bool) -> None:
        """Whether the sink keeps the unfinished line aside (set when the front end swaps sinks)."""
        assert not self._line, "the sink changes between replies only"
        self._live = live and self._markdown is not None

    @property
    def at_line_start(self) -> bool:
        return self._column == _START

    # --- public entry points --------------------------------------------------------------

    def render(self, event: Event) -> str:
        # Deltas first: a turn streams 100 000s of them.
        if type(event) is TextDelta and self._markdown is not None:
            return self._markdown_delta(event.text)
        if self._line and type(event) is not StreamKeepAlive:  # anything shown ends the unfinished line
            flushed = self._flush_line()
            return self._rewritten(flushed, self._render(event))
        return self._render(event)

    def _render(self, event: Event) -> str:
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
            case ContextCompacted():
                self._stream = None  # inside a turn it is a status line, like a retry
                return self._emit(self._status_break() + compacted_line(event) + "\n")
        return ""  # step starts, assistant messages, keep-alives, unknown types: nothing to show

    def header(self, turn: int) -> str:
        """``[main turn N] `` on a fresh line."""
        flushed = self._flush_line()
        self._stream = None
        if self._markdown is not None:
            self._markdown.reset()
        head = f"[{self.label} turn {turn}] "
        text = self._break_line() + head
        self._column = _HEADER
        self._screen_prefix = head
        return self._rewritten(flushed, text)

    def resume_notice(self, turn: int) -> str:
        """What ``--resume`` reports first for a turn the log repair just closed."""
        return self.header(turn) + self._emit(f"{turn_end_line(Interrupted())}\n")

    def end_line(self) -> str:
        """End a partial line (or a bare header) so that what follows starts at column 0."""
        flushed = self._flush_line()
        return self._rewritten(flushed, self._emit(self._break_line()))

    def line(self, text: str) -> str:
        """A free-standing message line (command output, hints) placed on its own line."""
        flushed = self._flush_line()
        return self._rewritten(flushed, self._emit(self._break_line() + text + "\n"))

    def block(self, text: str) -> str:
        """Whole lines that already end in a newline (an approval's view), from a fresh line."""
        return self._emit(self._break_line() + text)

    def dim_line(self, text: str) -> str:
        """A secondary line of dsh's own (the usage line), dim on a terminal."""
        flushed = self._flush_line()
        return self._rewritten(flushed, self._emit(self._break_line() + self._styled(text, "dim") + "\n"))

    # --- cursor bookkeeping -----------------------------------------------------------------

    def _emit(self, text: str) -> str:
        if text:
            self._column = _START if text.endswith("\n") else _MID
            self._screen_prefix = ""
        return text

    # --- markdown: answer text line by line -------------------------------------------------------

    def _markdown_delta(self, text: str) -> str:
        """Complete lines rendered; the unfinished one held (and, live, streamed raw until it completes)."""
        if not text:
            return ""
        assert self._markdown is not None
        prefix = ""
        if self._stream not in (None, "text") and self._column == _MID:
            prefix = "\n"  # reasoning and answer each get their own lines
            self._screen_prefix = ""
        self._stream = "text"
        if "\n" not in text:
            self._line.append(text)
            if not self._live:
                return self._emit(prefix) if prefix else ""
            self._column = _MID
            return prefix + text
        first, *middle, rest = text.split("\n")
        had_partial = bool(self._line)
        self._line.append(first)
        segments: list[Segment] = []  # one Styled at the end: adding per line was quadratic in a big delta
        budget = DELTA_MARKUP_BUDGET  # past it, the rest of this delta is shown as written (docs/markdown.md)
        for line in ("".join(self._line), *middle):
            markup = budget > 0
            budget -= len(line) * (CODE_CHAR_COST if self._markdown.in_code else 1)
            segments += self._markdown.line(line, markup=markup)
            segments.append(("\n", None))
        rendered = segments_text(segments)
        self._line = [rest] if rest else []
        live_rest = rest if self._live else ""
        self._column = _MID if live_rest else _START
        if had_partial and self._live:
            out: str = _rewrite(self._screen_prefix + rendered + live_rest)
        else:
            out = prefix + rendered + live_rest
        self._screen_prefix = ""
        return out

    def _flush_line(self) -> str:
        """The held unfinished line, rendered as it stands (the answer stopped mid-line); "" if none."""
        if not self._line:
            return ""
        assert self._markdown is not None
        rendered = segments_text(self._markdown.line("".join(self._line)))
        self._line = []
        self._column = _MID if rendered else self._column
        if not self._live:
            return rendered
        out = _rewrite(self._screen_prefix + rendered)
        self._screen_prefix = ""
        return out

    @staticmethod
    def _rewritten(flushed: str, text: str) -> str:
        """``flushed + text``, still a :class:`Rewrite` when ``flushed`` was one."""
        if not flushed:
            return text
        joined = flushed + text
        return _rewrite(joined) if isinstance(flushed, Rewrite) else joined

    def _break_line(self) -> str:
        """Newline needed before a line of its own (tool lines, notices)."""
        return "" if self._column == _START else "\n"

    def _status_break(self) -> str:
        """Newline needed before a status line: none right after the turn header."""
        return "\n" if self._column == _MID else ""

    def _styled(self, text: str, style: str) -> str:
        return styled(text, style) if self.color else text

    # --- handlers ----------------------------------------------------------------------------

    def _stream_delta(self, kind: str, text: str) -> str:
        if not text:
            return ""
        prefix = ""
        if self._stream not in (None, kind) and self._column == _MID:
            prefix = "\n"  # reasoning and answer each get their own lines
        self._stream = kind
        body = self._styled(text, "dim") if kind == "reasoning" else text
        return prefix + body if prefix else body

    def _tool_call(self, event: ToolCallStart) -> str:
        self._stream = None
        name = one_line(event.name) or "?"
        arguments = _clip(one_line(event.arguments), _TOOL_ARGS_WIDTH)
        return self._break_line() + f"  [tool call] {name}({arguments})\n"

    def _tool_result(self, event: ToolResult) -> str:
        self._stream = None
        output = _lines(event.output).strip("\n")
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
            for line in _lines(diagnostic).split("\n"):
                text += "    " + self._styled(line, "highlight") + "\n"
        return text

    def _retry(self, event: LlmRetry) -> str:
        delay_s = _finite(event.delay_s)
        code = one_line(event.code) or ErrorCode.UNKNOWN
        message = one_line(redact_text(event.message, self.secrets))
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
        return self._break_line() + f"[job] {one_line(text)}\n"


ANSWER = "answer"  # AnswerSplit: the chunk belongs on stdout
REST = "rest"  # AnswerSplit: the chunk belongs on stderr


class AnswerSplit:
    """``-p``: the answer text apart from everything else, so a script reads the answer alone.

    :meth:`render` returns the event's output as ``(stream, text)`` chunks in the order they must be
    written: the text deltas to :data:`ANSWER` (stdout), verbatim, or rendered as Markdown when stdout is
    a colour terminal; every other event rendered by
    ``renderer`` to :data:`REST` (stderr). No ``[main turn N]`` header on either stream (``-p`` runs one
    turn). When both streams are one terminal (``2>&1``), neither may glue onto the other's unfinished
    line: a stream that is mid-line gets its line break before the other one writes.
    """

    def __init__(self, renderer: Renderer, *, markdown: bool = False) -> None:
        """``markdown``: stdout is a colour terminal, so the answer is rendered as Markdown, each line when
        its newline arrives (docs/markdown.md); otherwise it goes out verbatim, as it streams."""
        self.renderer = renderer
        # The answer's own renderer: its unfinished line is held until its newline (or until anything else
        # is shown, or the turn ends), so what reaches stdout is whole rendered lines.
        self._answer = Renderer(color=True, secrets=renderer.secrets, markdown="lines") if markdown else None
        self._mid = False  # the answer stream's cursor is not at a line start
        self._gap = False  # a step or tool ran since the last text: the next text starts a new line

    def render(self, event: Event) -> list[tuple[str, str]]:
        match event:
            case TextDelta(text=text):
                if not text:
                    return []
                prefix = "\n" if self._gap and self._mid else ""
                if self._answer is not None:
                    if self._gap:
                        prefix = self._answer.end_line()  # a held line ends where the step or tool ran
                    text = self._answer.render(event)
                    self._gap = False
                    if not (prefix or text):
                        return []
                else:
                    self._gap, self._mid = False, not text.endswith("\n")
                if self.renderer.at_line_start:
                    return [(ANSWER, prefix + text)]
                return [(REST, self.renderer.end_line()), (ANSWER, prefix + text)]
            case TurnStart():
                self._gap = True
                return []
            case ReasoningDelta() | StreamKeepAlive():
                pass
            case _:
                self._gap = True
        rest = self.renderer.render(event)
        if not rest:
            return []
        held = self._answer.end_line() if self._answer is not None else ""
        if held:
            return [(ANSWER, held), (REST, rest)]
        if self._mid:
            self._mid = False
            return [(ANSWER, "\n"), (REST, rest)]
        return [(REST, rest)]

    def end(self) -> str:
        """The answer's last line ended, once the turn is over."""
        if self._answer is not None:
            return self._answer.end_line()
        mid, self._mid = self._mid, False
        return "\n" if mid else ""


APPROVAL_MAX_CHARS = 2000  # a longer command is viewed in full before it can be approved
_WHITE_RUN = re.compile(r"[^\S\n]{9,}")  # 9+ blanks in a row: counted, so nothing hides behind them
_BLANK_LINES = 3  # this many blank lines in a row and more: one counted line


def _mark_whitespace(line: str) -> str:
    line = line.replace("\t", "\u2409")  # a tab's width depends on the column: show it
    return _WHITE_RUN.sub(lambda m: f"\u2420\u00d7{len(m.group(0))}", line)


def shown_command(command: str) -> list[str]:
    """The lines an approval shows for ``command``: long blank runs and blank-line runs counted visibly.

    Unsafe characters stay as they are here; the sink makes them visible (:func:`terminal_text`).
    """
    lines = [_mark_whitespace(line) for line in _lines(command).split("\n")]
    shown: list[str] = []
    blank = 0
    for line in [*lines, None]:
        if line is not None and not line.strip():
            blank += 1
            continue
        if blank >= _BLANK_LINES:
            shown.append(f"({blank} blank lines)")
        else:
            shown.extend([""] * blank)
        blank = 0
        if line is not None:
            shown.append(line)
    return shown


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval: the inline question, and whether the command must be viewed (``v``) first."""

    question: str
    must_view: bool
    view: str  # the whole command, as lines to print above the question ("" when it is inline)
    viewed_question: str  # the question once the command was viewed
    noun: str = "command"  # what ``v`` views: "command" or "diff"
    always: bool = True  # ``a`` is offered; an edit in a git directory is asked every time (y / n)


def _size(command: str) -> str:
    lines = command.count("\n") + 1
    return f"{lines} line{'s' if lines != 1 else ''} / {len(command)} chars"


def _fits(shown: Sequence[str], text: str, rows: int, cols: int) -> bool:
    """Whether ``shown`` (the lines an approval prints for ``text``) fits inline in the live view."""
    width = max(cols, 20)
    screen_rows = sum(max(1, -(-len(sanitize(line)) // width)) for line in shown)
    budget = max(rows - 4, 1)  # the toolbar, the question's own line and a little context
    return screen_rows <= budget and text.count("\n") + 1 <= budget and len(text) <= APPROVAL_MAX_CHARS


_INDENT = "      "


def approval_question(command: str, *, rows: int = 24, cols: int = 80, tool: str = "run_shell") -> Approval:
    """The question for a command; one that does not fit the screen is shown by ``v`` before ``y`` counts. A
    command that will run in the sandbox says so (docs/safety.md)."""
    from dsh.agent_loop.tools.registry import SandboxedCommand  # loaded with the tools, before any approval

    where = " (sandboxed)" if isinstance(command, SandboxedCommand) else ""
    head = f"  [approve] {tool}{where}: "
    shown = shown_command(command.strip("\n") if command.strip() else command)
    if _fits(shown, command, rows, cols):
        text = head + ("\n" + _INDENT).join(shown) + "  (y / n / a) "
        return Approval(text, False, "", text)
    size = _size(command)
    view = f"  [command] {tool}{where}, {size}:\n" + "".join(f"{_INDENT}{line}\n" for line in shown)
    return Approval(
        f"{head}command is {size} \u2014 v to view  (v / n) ",
        True,
        view,
        f"{head}the command above ({size})  (y / n / a) ",
    )


def mcp_arguments(arguments: object) -> str:
    """An MCP call's arguments as the approval shows them: the whole JSON on one line, nothing left out.

    Not ASCII-escaped: the sink's sanitizer makes every unsafe character (controls, bidi, lone surrogates)
    visible, so the user reads the text the server will get.
    """
    try:
        return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError, RecursionError):
        return repr(arguments)


def mcp_approval(server: str, tool: str, arguments: object, *, rows: int = 24, cols: int = 80) -> Approval:
    """The question for an MCP tool call (docs/mcp.md, "Approval"): server, tool and the whole arguments JSON,
    y / n / a like ``run_shell``; arguments that do not fit the screen are viewed (``v``) before ``y`` counts."""
    tool, server = one_line(tool), one_line(server)  # a name drawn on the question's own line, never a new one
    head = f"  [approve] MCP tool {tool} (server {server}): "
    text = mcp_arguments(arguments)
    shown = shown_command(text)
    if _fits([head + shown[0], *shown[1:]], text, rows, cols):
        question = head + ("\n" + _INDENT).join(shown) + "  (y / n / a) "
        return Approval(question, False, "", question, "arguments")
    size = _size(text)
    view = f"  [arguments] MCP tool {tool} (server {server}), {size}:\n"
    view += "".join(f"{_INDENT}{line}\n" for line in shown)
    return Approval(
        f"{head}arguments are {size} \u2014 v to view  (v / n) ",
        True,
        view,
        f"{head}the arguments above ({size})  (y / n / a) ",
        "arguments",
    )


def _diff_style(line: str) -> str | None:
    if line.startswith(("+++ ", "--- ")):
        return None
    if line.startswith("+"):
        return "added"
    if line.startswith("-"):
        return "removed"
    return "dim" if line.startswith("@@") else None


def shown_diff(diff: str) -> list[str]:
    """The lines an edit approval shows for a unified diff: the command rule for blanks and tabs."""
    return shown_command(diff.strip("\n"))


def _indented_block(lines: Sequence[str], *, color: bool) -> Styled:
    """``lines`` indented, one per line, added/removed lines coloured; built in one pass (no O(n²) joins)."""
    parts: list[str] = []
    spans: list[tuple[int, int, str]] = []
    at = 0
    for line in lines:
        parts.append(_INDENT)
        at += len(_INDENT)
        style = _diff_style(line) if color else None
        if style is not None and line:
            spans.append((at, at + len(line), style))
        parts.append(line + "\n")
        at += len(line) + 1
    return Styled("".join(parts), tuple(spans))


def _hidden_note(hidden: int) -> str:
    return f", hides {hidden} known secret{'s' if hidden != 1 else ''}" if hidden else ""


def diff_approval(
    diff: str, subject: str, *, tool: str, rows: int = 24, cols: int = 80, color: bool = False, hidden: int = 0,
    always: bool = True,
) -> Approval:
    """The question for an edit: the whole diff above ``[approve] tool subject``; a long one needs ``v``.

    ``subject`` names the file and the change (``notes.txt (+1 -1)``). The diff lines follow the
    command rule (:func:`shown_command`), and a diff that does not fit the screen is announced as
    ``diff is N lines / M chars — v to view``, exactly like a long command. ``hidden`` known secret
    values on the lines to be written (each shown as ``***(N chars)``) need ``v`` too: the question
    says so (``hides 1 known secret``), and ``v`` shows the diff masked alike.
    ``always=False`` (a git directory) offers ``y / n`` only.
    """
    head = f"  [approve] {tool} {subject}"
    answers = "(y / n / a)" if always else "(y / n)"
    shown = shown_diff(diff)
    block = _indented_block(shown, color=color)
    if not hidden and _fits([*shown, head], diff, rows, cols):
        text = block + head + f"  {answers} "
        return Approval(text, False, "", text, "diff", always)
    size = _size(diff.strip("\n")) + _hidden_note(hidden)
    return Approval(
        f"{head}: diff is {size} \u2014 v to view  (v / n) ",
        True,
        f"  [diff] {tool} {subject}, {size}:\n" + block,
        f"{head}: the diff above ({size})  {answers} ",
        "diff",
        always,
    )


def approval_answer(answer: str | None) -> str:
    return {"y": "yes", "a": "always"}.get(answer or "", "no")


# --- the toolbar's view of a running turn --------------------------------------------------------


# A stream that has sent content and then nothing for this long is shown as stalled, not "streaming".
STALL_AFTER_S = 3.0


class TurnActivity:
    """``waiting for first token 12s · keep-alive 2s ago`` and friends, from events and a clock.

    Mid-stream too: once the content stops for :data:`STALL_AFTER_S`, ``streaming`` becomes
    ``no content for 12s`` (with ``· keep-alive 2s ago`` when keep-alives still arrive), so a stall
    is visible long before the idle timeout ends it.
    """

    def __init__(self) -> None:
        self._state = "idle"
        self._since = 0.0
        self._keepalive_at: float | None = None
        self._content_at = 0.0
        self._detail = ""

    @property
    def busy(self) -> bool:
        return self._state != "idle"

    def _wait(self, now: float) -> None:
        self._state, self._since, self._keepalive_at = "waiting", now, None

    def on_event(self, event: Event, now: float) -> None:
        match event:
            case TextDelta() | ReasoningDelta():
                self._state, self._content_at = "streaming", now
            case TurnStart() | StepStart():
                self._wait(now)
            case StreamKeepAlive():
                self._keepalive_at = now
            case ToolCallStart(name=name):
                self._state, self._detail = "tool", one_line(name)
            case LlmRetry(attempt=attempt, max_attempts=total, delay_s=delay_s):
                self._state, self._since, self._keepalive_at = "retry", now + max(_finite(delay_s), 0.0), None
                self._detail = f"{attempt}/{total}"
            case TurnEnd():
                self._state = "idle"

    def _keepalive(self, now: float, after: float) -> str:
        at = self._keepalive_at
        return f" · keep-alive {max(0, int(now - at))}s ago" if at is not None and at >= after else ""

    def text(self, now: float) -> str:
        if self._state == "retry" and now >= self._since:
            self._state = "waiting"  # the backoff is over: the next request is out
        if self._state == "waiting":
            return f"waiting for first token {max(0, int(now - self._since))}s" + self._keepalive(now, self._since)
        if self._state == "retry":
            return f"retry {self._detail} in {math.ceil(self._since - now)}s"
        if self._state == "streaming":
            silent = now - self._content_at
            if silent < STALL_AFTER_S:
                return "streaming"
            return f"no content for {int(silent)}s" + self._keepalive(now, self._content_at)
        if self._state == "tool":
            return f"running {self._detail}" if self._detail else "running a tool"
        return ""


def _cells(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def fit_width(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells, ``…`` marking the cut (a toolbar line never wraps)."""
    if width <= 0:
        return ""
    if len(text) <= width and text.isascii():
        return text
    cells = [_cells(char) for char in text]
    if sum(cells) <= width:
        return text
    used, end = 0, 0
    while end < len(text) and used + cells[end] <= width - 1:
        used += cells[end]
        end += 1
    return text[:end] + _ELLIPSIS
