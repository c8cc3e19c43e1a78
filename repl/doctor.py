"""``dsh doctor`` and ``/doctor``: walk the path of one request and say, one line per step, where it breaks.

The nine steps (docs/doctor.md): configuration, proxy, DNS, TCP, TLS, HTTP (``GET /models``), balance
(``GET /user/balance``), stream (a one-token completion), environment. Each is ``✓`` (passed), ``✗``
(failed) or ``–`` (skipped). The request path stops at its first failure: that line carries the rendered
cause chain, and under it the same ``fix:`` line a turn would print, because the failure is built by the
same code a turn uses (:meth:`DeepSeekClient.transport_failure`, its status table, ``fix_line``). The
client is built as the shell builds it: the same proxy choice, the same trust store. The probes below HTTP
(TCP per address, TLS, an http proxy's tunnel) are network facts and live in :mod:`dsh.llm.probe`.

Everything shown is redacted (the key, URL and proxy credentials) and goes through the terminal
sanitizer at the sink. Checks are small functions of a :class:`Doctor`, whose clock and resolver can be
replaced (tests never query an outside resolver).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import json
import os
import platform
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx  # noqa: F401 - loaded before the HTTP step, so that its time is the endpoint's, not dsh's

from dsh.agent_loop.reasons import Failed, failure_from_exception
from dsh.agent_loop.session_config import client_settings
from dsh.agent_loop.subagent import ParentContext, build_provider
from dsh.agent_loop.subagent.acp import AcpInitializeRun
from dsh.agent_loop.subagent.result import SubagentRequest
from dsh.llm import ErrorCode, LlmError, Redactor, error_chain, redact_text, redact_url
from dsh.llm.deepseek import StreamTrace, open_client
from dsh.llm.endpoint import endpoint_for_url
from dsh.llm.events import ChatRequest, Finish, KeepAlive, Message, ReasoningDelta, TextDelta
from dsh.llm.network import FailureDetail, environment_proxy, no_proxy, ssl_context
from dsh.llm.probe import all_attempts_failed, connect_failure_word, open_tls, shown_host, unverified_certificate
from dsh.repl import __version__
from dsh.repl.config import Config, ConfigError, load_config, state_dir
from dsh.repl.sanitize import one_line
from dsh.repl.styles import terminal_text
from dsh.repl.turn_end import fix_line

__all__ = ["FAIL", "MARKS", "PASS", "SKIP", "Doctor", "Report", "Step", "run_doctor"]

PASS, FAIL, SKIP = "pass", "fail", "skip"
MARKS = {PASS: "✓", FAIL: "✗", SKIP: "–"}
STEPS = ("configuration", "proxy", "DNS", "TCP", "TLS", "HTTP", "balance", "stream", "environment")
STREAM_TIMEOUT_CAP = 30.0  # the doctor waits at most this long for a first token (a turn waits first_token_timeout)
SUBAGENT_TIMEOUT = 20.0  # per subagent check
_MAX_AUTH_METHODS = 5  # an ACP agent's advertised auth methods shown, at most
PROMPT = "Reply with the single word OK."
FIX_MISSING_KEY = "  fix: set DEEPSEEK_API_KEY (or api_key in config.toml)"
FIX_MODEL = "  fix: this endpoint does not list the model {model} — check {source}"
FIX_STATE_DIR = "  fix: dsh cannot write its state directory — check the permissions of {path}"

_PRODUCT_BINARIES = {"claude-code": "claude", "codex": "codex"}  # what the product providers run

Resolver = Callable[[str, int], Awaitable[list[tuple[Any, ...]]]]


@dataclass
class Step:
    """One checked step: its mark, its line, the fix under a failure, and its facts for ``--json``."""

    name: str
    status: str
    text: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)  # sub-lines (the environment's subagents)

    def lines(self) -> list[str]:
        out = [f"{MARKS[self.status]} {self.name}: {one_line(self.text)}"]  # a relayed message may hold blank lines
        out += [f"    {line}" for line in self.details]
        if self.fix:
            out.append(self.fix)
        return out

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"step": self.name, "status": self.status, "text": self.text}
        if self.fix:
            data["fix"] = self.fix.strip()
        if self.details:
            data["details"] = list(self.details)
        if self.facts:
            data["facts"] = self.facts
        return data


@dataclass
class Report:
    steps: list[Step]

    @property
    def ok(self) -> bool:
        return all(step.status != FAIL for step in self.steps)

    @property
    def failed(self) -> Step | None:
        return next((step for step in self.steps if step.status == FAIL), None)

    def lines(self) -> list[str]:
        out = [line for step in self.steps for line in step.lines()]
        failed = self.failed
        if failed is None:
            out.append("doctor: every step passed")
        else:
            out.append(f"doctor: failed at {failed.name}")
        return out

    def to_dict(self) -> dict[str, Any]:
        failed = self.failed
        return {"ok": self.ok, "failed_step": failed.name if failed else None,
                "steps": [step.to_dict() for step in self.steps]}


def _ms(seconds: float) -> str:
    return f"{max(seconds, 0.0) * 1000:.1f} ms"


async def _getaddrinfo(host: str, port: int) -> list[tuple[Any, ...]]:
    return await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _key_shape(key: str, *, deepseek: bool) -> str | None:
    """What the key's shape says, never the key itself: whitespace for any server; for DeepSeek only,
    whether it looks like what DeepSeek issues (``sk-`` and 32 hex digits). Other servers issue other
    shapes, so their keys get no DeepSeek verdict; None when there is nothing to say."""
    body = key[3:] if key.startswith("sk-") else None
    if deepseek and body is not None and len(body) == 32 and all(ch in "0123456789abcdef" for ch in body):
        return "sk- and 32 hex digits, as DeepSeek issues"
    if any(ch.isspace() for ch in key):
        return "holds whitespace: a copy-paste accident?"
    if not deepseek:
        return None
    if body is None:
        return "not the sk-… shape DeepSeek issues"
    return "sk-…, but not the 32 hex digits DeepSeek issues"


def _masked(key: str) -> str:
    return f"{'sk-' if key.startswith('sk-') else ''}***{key[-4:] if len(key) >= 16 else ''}"


def _with_line(source: str) -> str:
    """``KEY in PATH`` -> ``KEY in PATH:LINE`` (the first line that sets it), for the config file's sources."""
    key, sep, path = source.partition(" in ")
    if not sep:
        return source
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return source
    for number, line in enumerate(lines, 1):
        if line.strip().startswith(key) and line.strip()[len(key):].lstrip().startswith("="):
            return f"{key} in {path}:{number}"
    return source


def _clipped(value: Any, limit: int = 200) -> Any:
    """A certificate's text, bounded (a hostile server sends 10 KB names); other facts as they are."""
    return value if not isinstance(value, str) or len(value) <= limit else value[: limit - 1] + "…"


def _days(days: int) -> str:
    return f"{days} day{'s' if days != 1 else ''} to expiry" if days >= 0 else f"expired {-days} day(s) ago"


class Doctor:
    """The checks, in order, against one configuration. ``resolver`` and ``clock`` are replaceable."""

    def __init__(
        self,
        config: Config,
        env: Mapping[str, str],
        *,
        resolver: Resolver | None = None,
        clock: Callable[[], float] | None = None,
        demo: bool = False,
        connect_timeout: float = 10.0,
        stdout: Any = None,
    ) -> None:
        self.config = config
        self.env = dict(env)
        self.resolver = resolver or _getaddrinfo
        self._clock = clock
        self.demo = demo
        self.connect_timeout = connect_timeout
        self.stdout = stdout if stdout is not None else sys.stdout
        self.secrets = config.secrets
        self.client: Any = None
        self.addresses: list[tuple[str, int]] = []
        self.reachable: tuple[str, int] | None = None  # the first address TCP connected to
        self.models_listed = False  # GET /models answered 200: the endpoint accepted the key

    def now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return anyio.current_time()

    # -- shared ----------------------------------------------------------------------------------

    def _client(self) -> Any:
        """The client a turn would use (the shell builds its own the same way)."""
        if self.client is None:
            self.client = open_client(dataclasses.replace(
                client_settings(self.config, self.env), record=None, ring_bytes=0,  # a probe: nothing kept
                stream_idle_timeout=min(self.config.stream_idle_timeout, STREAM_TIMEOUT_CAP),
                first_token_timeout=min(self.config.first_token_timeout, STREAM_TIMEOUT_CAP),
                connect_timeout=self.connect_timeout,
            ))
        return self.client

    def _sources(self) -> dict[str, str]:
        if self.demo:
            return {"base_url": "the demo scenario", "proxy": "the demo scenario"}
        return dict(self.config.sources)

    def _failed(self, name: str, exc: BaseException, facts: dict[str, Any] | None = None) -> Step:
        """A failure rendered as a turn renders it: the cause chain (redacted) and the same fix line."""
        reason = failure_from_exception(exc, 0, self.secrets)
        head = f"[{reason.code}] " if reason.code else ""
        return Step(name, FAIL, head + reason.message, fix_line(reason, self._sources()), facts or {})

    def _target(self) -> tuple[str, int, str]:
        """``(host, port, what)``: where the client's TCP connection goes — the proxy's when one carries it."""
        url = self.config.proxy or self.config.base_url
        parts = urlsplit(url)
        default = 443 if parts.scheme == "https" else 1080 if parts.scheme.startswith("socks") else 80
        return parts.hostname or "", parts.port or default, "proxy" if self.config.proxy else "endpoint"

    # -- the steps ----------------------------------------------------------------------------------

    def configuration(self) -> Step:
        config, sources = self.config, self._sources()

        def source(key: str) -> str:
            return _with_line(sources.get(key, "default"))

        parts = [
            f"base_url {redact_url(config.base_url)} ({source('base_url')})",
            f"model {config.model} ({source('model')})",
        ]
        facts: dict[str, Any] = {
            "base_url": {"value": redact_url(config.base_url), "source": source("base_url")},
            "model": {"value": config.model, "source": source("model")},
            "config_file": str(config.config_path) if config.config_path else None,
        }
        for key in ("max_tokens", "thinking", "reasoning_effort", "max_retries"):
            value = getattr(config, key)
            if value is not None:
                parts.append(f"{key} {value} ({source(key)})")
                facts[key] = {"value": value, "source": source(key)}
        api_key = config.api_key
        if self.demo:
            parts.append("key not needed (demo)")
            return Step("configuration", PASS, "; ".join(parts), facts=facts)
        if not api_key:
            facts["api_key"] = {"present": False}
            parts.append("no API key")
            return Step("configuration", FAIL, "; ".join(parts), FIX_MISSING_KEY, facts)
        shape = _key_shape(api_key, deepseek=endpoint_for_url(config.base_url).is_deepseek)
        facts["api_key"] = {"present": True, "masked": _masked(api_key), "length": len(api_key), "shape": shape,
                            "source": source("api_key")}
        length = f"{len(api_key)} character{'s' if len(api_key) != 1 else ''}"
        said = "; ".join(part for part in (source("api_key"), length, shape) if part)
        parts.append(f"key {_masked(api_key)} ({said})")
        return Step("configuration", PASS, "; ".join(parts), facts=facts)

    def proxy(self) -> Step:
        bypass = no_proxy(self.env)
        no_proxy_shown = redact_text(bypass, self.secrets)
        host = urlsplit(self.config.base_url).hostname or ""
        facts: dict[str, Any] = {"no_proxy": no_proxy_shown or None}
        if self.config.proxy:
            shown = redact_url(self.config.proxy)
            where = self._sources().get("proxy", "configured")
            facts.update(proxy=shown, source=where)
            text = f"{shown} carries requests to {host} ({where})"
            if bypass:
                text += f"; NO_PROXY={no_proxy_shown} does not match {host}"
            return Step("proxy", PASS, text, facts=facts)
        # No proxy: say whether NO_PROXY is why (a proxy variable is set, but bypassed for this host).
        variables = [name for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy",
                                       "ALL_PROXY") if self.env.get(name, "").strip()]
        if variables and bypass and environment_proxy(self.config.base_url, {**self.env, "no_proxy": "",
                                                                                 "NO_PROXY": ""}):
            facts["bypassed_by_no_proxy"] = True
            return Step("proxy", PASS, f"none: NO_PROXY={no_proxy_shown} matches {host} (direct)", facts=facts)
        text = "none applies (direct)"
        if bypass:
            text += f"; NO_PROXY={no_proxy_shown}"
        return Step("proxy", PASS, text, facts=facts)

    async def dns(self) -> Step:
        host, port, what = self._target()
        facts: dict[str, Any] = {"host": host, "target": what}
        if _is_address(host):
            self.addresses = [(host, port)]
            return Step("DNS", PASS, f"{host} is an address (no lookup)", facts=facts)
        started = self.now()
        try:
            answers = await self.resolver(host, port)
        except Exception as exc:
            return self._failed("DNS", self._client().transport_failure(exc), facts)
        took = self.now() - started
        a = sorted({info[4][0] for info in answers if info[0] == socket.AF_INET})
        aaaa = sorted({info[4][0] for info in answers if info[0] == socket.AF_INET6})
        self.addresses = [(address, port) for address in aaaa + a]
        facts.update(a=a, aaaa=aaaa, ms=round(took * 1000, 1))
        label = f"{host} ({what})" if what == "proxy" else host
        text = f"{label}: A {', '.join(a) or 'none'}; AAAA {', '.join(aaaa) or 'none'} in {_ms(took)}"
        return Step("DNS", PASS, text, facts=facts)

    async def tcp(self) -> Step:
        results: list[str] = []
        facts: list[dict[str, Any]] = []
        connected = False
        errors: list[Exception] = []
        for address, port in self.addresses:
            started = self.now()
            try:
                with anyio.fail_after(self.connect_timeout):
                    stream = await anyio.connect_tcp(address, port)
            except (OSError, TimeoutError) as exc:
                took = self.now() - started
                errors.append(exc)
                why = connect_failure_word(exc)
                results.append(f"{shown_host(address, port)} {why} after {_ms(took)}")
                facts.append({"address": address, "port": port, "connected": False, "ms": round(took * 1000, 1)})
                continue
            took = self.now() - started
            await stream.aclose()
            connected = True
            self.reachable = self.reachable or (address, port)
            results.append(f"{shown_host(address, port)} connected in {_ms(took)}")
            facts.append({"address": address, "port": port, "connected": True, "ms": round(took * 1000, 1)})
        if connected:
            return Step("TCP", PASS, "; ".join(results), facts={"connects": facts})
        # What a turn's connect raises here (anyio's shape, from each address's error: no second lookup).
        cause = all_attempts_failed(errors)
        return self._failed("TCP", self._client().transport_failure(cause), {"connects": facts})

    async def tls(self) -> Step:
        parts = urlsplit(self.config.base_url)
        if parts.scheme != "https":
            return Step("TLS", SKIP, f"{parts.scheme}:// endpoint: no TLS")
        proxy_scheme = urlsplit(self.config.proxy).scheme if self.config.proxy else None
        if proxy_scheme not in (None, "http"):
            return Step("TLS", SKIP, f"through a {proxy_scheme} proxy: the HTTP step checks it")
        host, port = parts.hostname or "", parts.port or 443
        cafile = self.env.get("SSL_CERT_FILE", "").strip()
        store = f"SSL_CERT_FILE={cafile}" if cafile else "the system trust store"
        tunnel = " (through the proxy's tunnel)" if self.config.proxy else ""
        # Over the address TCP reached; under a proxy, through its tunnel to the endpoint.
        address, target_port = self.reachable or self._target()[:2]
        where = (address, target_port, host, port)
        try:
            with anyio.fail_after(self.connect_timeout):
                tls = await open_tls(*where, ssl_context(self.env), self.config.proxy)
        except Exception as exc:
            shown: dict[str, Any] = {}
            with anyio.move_on_after(self.connect_timeout):
                shown = await unverified_certificate(*where, self.config.proxy)
            shown = {key: _clipped(value) for key, value in shown.items()}  # the server's text: bounded
            # A turn's failure, with the same certificate facts a turn's line names (dsh.llm.certificate_truth).
            failure = await self._client().certificate_named(self._client().transport_failure(exc), where[:2])
            step = self._failed("TLS", failure, {"trust": store, **shown})
            if shown.get("subject"):
                step.details.append(f"certificate: subject {shown['subject']}; issuer {shown['issuer']}; "
                                    f"{_days(shown['days_to_expiry'])}")
            return step
        facts = {"version": tls.version, "trust": store, "tunnel": bool(tunnel), **tls.certificate}
        text = (f"{tls.version}{tunnel}; subject {facts.get('subject', '?')}; issuer {facts.get('issuer', '?')}; "
                f"{_days(facts.get('days_to_expiry', 0))}; verified against {store}")
        return Step("TLS", PASS, text, facts=facts)

    async def _get_json(self, name: str, path: str, absent: str, judge: Callable[[int, Any, float], Step]) -> Step:
        """``GET path`` as a turn's client sends it, and the step ``judge(status, body, seconds)`` makes of the
        answer; or the step failed, or skipped because the endpoint has no such route (``absent`` says what)."""
        started = self.now()
        try:
            status, body = await self._client().get_json(path)
        except LlmError as exc:
            return self._failed(name, exc)
        took = self.now() - started
        if status == 404:
            return Step(name, SKIP, f"GET {path} answered 404 in {_ms(took)}: {absent}")
        return judge(status, body, took)

    async def http(self) -> Step:
        return await self._get_json("HTTP", "/models", "this endpoint lists no models", self._model_listed)

    def _model_listed(self, status: int, body: Any, took: float) -> Step:
        data = body.get("data") if isinstance(body, dict) else None
        items = data if isinstance(data, list) else []
        names: list[str] = [item["id"] for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)]
        shown = ", ".join(redact_text(name, self.secrets)[:60] for name in names[:8]) or "none"
        facts = {"status": status, "ms": round(took * 1000, 1), "models": names[:100]}
        self.models_listed = status == 200
        model = self.config.model
        if model in names:
            return Step("HTTP", PASS, f"GET /models 200 in {_ms(took)}; {model} is listed ({shown})", facts=facts)
        source = _with_line(self._sources().get("model", "model (--model, DSH_MODEL or config.toml)"))
        return Step("HTTP", FAIL, f"GET /models 200 in {_ms(took)}; {model} is not listed ({shown})",
                    FIX_MODEL.format(model=model, source=source), facts)

    async def balance(self) -> Step:
        return await self._get_json("balance", "/user/balance", "no balance to check here", self._balance_available)

    def _balance_available(self, status: int, body: Any, took: float) -> Step:
        available = body.get("is_available") if isinstance(body, dict) else None
        infos = body.get("balance_infos") if isinstance(body, dict) else None
        amounts = [f"{info.get('total_balance')} {info.get('currency')}" for info in infos or []
                   if isinstance(info, dict) and isinstance(info.get("total_balance"), str | int | float)
                   and isinstance(info.get("currency"), str)] if isinstance(infos, list) else []
        shown = ", ".join(redact_text(amount, self.secrets)[:40] for amount in amounts[:4]) or "no amount given"
        facts = {"status": status, "ms": round(took * 1000, 1), "is_available": available, "balances": amounts[:4]}
        if available is True:
            return Step("balance", PASS, f"available: {shown} (in {_ms(took)})", facts=facts)
        if available is False:
            # The fix a turn's QUOTA gets from this endpoint: DeepSeek's top-up page only for DeepSeek.
            client = self._client()
            quota = Failed(ErrorCode.QUOTA, endpoint=client.base_url_display, endpoint_name=client.endpoint.name)
            return Step("balance", FAIL, f"[{ErrorCode.QUOTA}] not available: {shown} (in {_ms(took)})",
                        fix_line(quota, self._sources()), facts)
        return Step("balance", SKIP, f"GET /user/balance answered without is_available (in {_ms(took)})",
                    facts=facts)

    async def stream(self) -> Step:
        trace = StreamTrace()
        request = ChatRequest(model=self.config.model, messages=(Message(role="user", content=PROMPT),),
                              max_tokens=1)
        keep_alives = 0
        first: float | None = None
        finish: str | None = None
        started = self.now()
        try:
            async with contextlib.aclosing(self._client().stream(request, trace=trace)) as events:
                async for event in events:
                    if isinstance(event, KeepAlive):
                        keep_alives += 1
                    elif isinstance(event, TextDelta | ReasoningDelta) and first is None:
                        first = self.now()
                    elif isinstance(event, Finish):
                        finish = event.reason
        except LlmError as exc:
            step = self._failed("stream", exc, {"keep_alives": keep_alives})
            if exc.detail in (FailureDetail.UPSTREAM_AUTH, FailureDetail.UPSTREAM_QUOTA):
                step.text = f"[{exc.code}] {self._upstream_refused(exc)}: {step.text.removeprefix(f'[{exc.code}] ')}"
            return step
        ended = self.now()
        headers = trace.headers_at - trace.started_at if trace.headers_at and trace.started_at else None
        facts = {"headers_ms": round(headers * 1000, 1) if headers is not None else None,
                 "first_token_ms": round((first - started) * 1000, 1) if first is not None else None,
                 "total_ms": round((ended - started) * 1000, 1), "keep_alives": keep_alives,
                 "done": trace.done, "finish_reason": finish}
        parts = [f"headers in {_ms(headers or 0.0)}"]
        parts.append(f"first token in {_ms(first - started)}" if first is not None else "no token")
        parts.append(f"{keep_alives} keep-alive{'s' if keep_alives != 1 else ''}")
        parts.append("[DONE]" if trace.done else f"no [DONE] (finish reason {finish})")
        return Step("stream", PASS, "; ".join(parts) + f"; {_ms(ended - started)} in all", facts=facts)

    def _upstream_refused(self, exc: LlmError) -> str:
        """A gateway's upstream refused the gateway's own credential or account: whether the gateway took the
        key first."""
        gateway = exc.endpoint_name or "the gateway"
        owner = f"{exc.endpoint_name}'s" if exc.endpoint_name else "the gateway's"
        what = "credential" if exc.detail == FailureDetail.UPSTREAM_AUTH else "account for quota or credit"
        if self.models_listed:
            return f"{gateway} accepted your key (GET /models 200), but its upstream refused {owner} own {what}"
        return f"the upstream of {gateway} refused {owner} own {what}"

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
        state_text, state_ok = self._state_dir(facts)
        parts.append(state_text)
        details, subagents_ok = await self._subagents(facts)
        parts.append(f"{len(details)} subagent{'s' if len(details) != 1 else ''} configured" if details
                     else "no subagents configured")
        status = PASS if state_ok and subagents_ok else FAIL
        fix = None if state_ok else FIX_STATE_DIR.format(path=state_dir(self.env))
        return Step("environment", status, "; ".join(parts), fix, facts, details)

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
        settings = provider.settings
        command = tuple(getattr(settings, "command", None) or ())
        cli_path = getattr(settings, "cli_path", None)
        if not command and cli_path:
            command = (cli_path,)
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

    # -- MCP servers ----------------------------------------------------------------------------------

    async def sandbox(self) -> Step:
        """``sandbox = "bwrap"``: one command run the way run_shell runs each (docs/safety.md)."""
        from dsh.agent_loop.sandbox import sandbox_check  # only with a sandbox configured

        started = self.now()
        problem = await anyio.to_thread.run_sync(sandbox_check, self.env)
        took = self.now() - started
        network = "network on (sandbox_network)" if self.config.sandbox_network else "no network"
        facts: dict[str, Any] = {"sandbox": self.config.sandbox, "network": self.config.sandbox_network,
                                 "ms": round(took * 1000, 1)}
        if problem is not None:
            return Step("sandbox", FAIL, f'sandbox = "bwrap" but {problem.what}', f"  fix: {problem.fix}", facts)
        return Step("sandbox", PASS, f"bwrap ran a test command in a sandbox in {_ms(took)}; {network}", facts=facts)

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
        return [self._mcp_step(row, manager) for row in rows]

    @staticmethod
    def _mcp_step(row: Any, manager: Any) -> Step:
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
        timeout = manager.configs[row.name].startup_timeout
        line = f"MCP server failure (server: {row.name}; stage: initialize; category: timeout)"
        return Step(name, FAIL, f"{line} (not ready within startup_timeout {timeout:g}s)", facts=facts)

    # -- the walk -------------------------------------------------------------------------------------

    async def run(self, on_step: Callable[[Step], None] | None = None) -> Report:
        """Every step in order; after the first failure on the request path the rest of it is skipped."""
        steps: list[Step] = []

        def add(step: Step) -> None:
            steps.append(step)
            if on_step is not None:
                on_step(step)

        path: list[Callable[[], Any]] = [self.configuration, self.proxy, self.dns, self.tcp, self.tls, self.http,
                                         self.balance, self.stream]
        failed = False
        try:
            for check, name in zip(path, STEPS, strict=False):
                if failed:
                    add(Step(name, SKIP, "skipped (an earlier step failed)"))
                    continue
                try:
                    result = check()
                    step = await result if hasattr(result, "__await__") else result
                except Exception as exc:  # a bug of ours: still one line, and the walk stops here
                    step = self._failed(name, exc)
                add(step)
                failed = step.status == FAIL
            add(await self.environment())
            if self.config.sandbox is not None:
                add(await self.sandbox())
            for step in await self.mcp_servers():
                add(step)
        finally:
            if self.client is not None:
                await self.client.aclose()
        return Report(steps)


async def run_doctor(
    config: Config, env: Mapping[str, str], on_step: Callable[[Step], None] | None = None, **options: Any
) -> Report:
    """Run every step (see :class:`Doctor` for the options), telling ``on_step`` each one as it ends."""
    return await Doctor(config, env, **options).run(on_step)


def config_failure(exc: BaseException, secrets: tuple[str, ...] = ()) -> Report:
    """The report when the configuration cannot even be read: that step fails, the path is skipped."""
    steps = [Step("configuration", FAIL, redact_text(error_chain(exc), secrets))]
    steps += [Step(name, SKIP, "skipped (an earlier step failed)") for name in STEPS[1:]]
    return Report(steps)


def main(argv: list[str], env: Mapping[str, str], *, resolver: Resolver | None = None) -> int:
    """``dsh doctor [--json] [--base-url URL] [--model NAME] [--proxy URL] [--config PATH]``: 0 when every
    step passed, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="dsh doctor", description="Check each step of a request to the endpoint.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--base-url", dest="base_url", metavar="URL")
    parser.add_argument("--model")
    parser.add_argument("--proxy", metavar="URL")
    parser.add_argument("--config", metavar="PATH")
    args = parser.parse_args(argv)
    flags = {"base_url": args.base_url, "model": args.model, "proxy": args.proxy}
    env_secrets = tuple(s for s in (env.get("DEEPSEEK_API_KEY", "").strip(),) if s)

    def write(text: str) -> None:
        sys.stdout.write(terminal_text(text) + "\n")
        sys.stdout.flush()

    def show(step: Step) -> None:
        if not args.json:
            for line in step.lines():
                write(line)

    try:
        config = load_config(flags, env, require_key=False,
                             config_path=Path(args.config) if args.config else None)
    except ConfigError as exc:
        report = config_failure(exc, env_secrets)
        for step in report.steps:
            show(step)
    else:
        report = anyio.run(lambda: run_doctor(config, env, show, resolver=resolver))
    if args.json:
        write(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        write(report.lines()[-1])
    return 0 if report.ok else 1
