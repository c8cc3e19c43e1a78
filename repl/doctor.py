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
replaced (tests never query an outside resolver). This module walks the request path; the steps after it
(environment, sandbox, MCP servers) are repl/doctor_environment.py, the report's shape repl/doctor_report.py.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx  # noqa: F401 - loaded before the HTTP step, so that its time is the endpoint's, not dsh's

from dsh.agent_loop.budget import dollars
from dsh.agent_loop.reasons import Failed, failure_from_exception
from dsh.agent_loop.safe_open import read_regular
from dsh.agent_loop.session_config import client_settings
from dsh.llm import ErrorCode, LlmError, redact_text, redact_url
from dsh.llm.deepseek import StreamTrace, open_client
from dsh.llm.endpoint import DIALECTS, endpoint_for_url, legacy_warning
from dsh.llm.events import ChatRequest, Finish, KeepAlive, Message, ReasoningDelta, TextDelta
from dsh.llm.network import FailureDetail, environment_proxy, no_proxy, ssl_context
from dsh.llm.probe import all_attempts_failed, connect_failure_word, open_tls, shown_host, unverified_certificate
from dsh.repl.config import Config, ConfigError, load_config
from dsh.repl.doctor_environment import EnvironmentChecks, context_step
from dsh.repl.doctor_report import FAIL, PASS, SKIP, STEPS, Report, Step, config_failure, milliseconds
from dsh.repl.endpoint import Endpoint, configured_endpoint, open_endpoint
from dsh.repl.options import LaunchOptions
from dsh.repl.styles import terminal_text
from dsh.repl.trust import gate as trust_gate
from dsh.repl.turn_end import fix_line

__all__ = ["Doctor", "main", "run_doctor"]

STREAM_TIMEOUT_CAP = 30.0  # the doctor waits at most this long for a first token (a turn waits first_token_timeout)
PROMPT = "Reply with the single word OK."
FIX_MISSING_KEY = "  fix: set DEEPSEEK_API_KEY (or api_key in config.toml)"
FIX_MODEL = "  fix: this endpoint does not list the model {model} — check {source}"
DIALECT_BY_HOST = "default for this host"  # the dialect's source when nothing set it (docs/endpoints.md, "Dialects")

Resolver = Callable[[str, int], Awaitable[list[tuple[Any, ...]]]]


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
    project = path.startswith("project config ")  # ``KEY in project config ~/repo/.dsh/config.toml, line N``
    if not sep:
        return source
    try:
        file = Path(os.path.expanduser(path.removeprefix("project config ")))
        lines = read_regular(file, 1 << 20).splitlines() if project else file.read_text(
            encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return source
    for number, line in enumerate(lines, 1):
        if line.strip().startswith(key) and line.strip()[len(key):].lstrip().startswith("="):
            return f"{key} in {path}, line {number}" if project else f"{key} in {path}:{number}"
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
        endpoint: Endpoint | None = None,
        connect_timeout: float = 10.0,
        stdout: Any = None,
    ) -> None:
        self.config = config
        self.env = dict(env)
        self.resolver = resolver or _getaddrinfo
        self._clock = clock
        self.endpoint = endpoint if endpoint is not None else configured_endpoint(config)  # dsh.repl.endpoint
        self.connect_timeout = connect_timeout
        self.stdout = stdout if stdout is not None else sys.stdout
        self.secrets = config.secrets
        self.client: Any = None
        self.addresses: list[tuple[str, int]] = []
        self.reachable: tuple[str, int] | None = None  # the first address TCP connected to
        self.models_listed = False  # GET /models answered 200: the endpoint accepted the key
        self.models_body: Any = {}  # and what it said (a context size, vLLM's max_model_len)
        self._after_path = EnvironmentChecks(config, self.env, stdout=self.stdout, clock=self.now)

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
        return dict(self.endpoint.sources)

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
        """What is configured and where each setting came from; a legacy DeepSeek model name adds a line under it
        saying what serves the name (only when the endpoint is DeepSeek's host)."""
        step = self._settings()
        sources = self._sources()
        source = _with_line(sources["model"]) if "model" in sources else None
        legacy = legacy_warning(self.config.model, self.config.base_url, source, self.config.dialect)
        if legacy is not None:
            step.details.append(legacy)
            step.facts.setdefault("model", {})["legacy"] = legacy
        return step

    def _settings(self) -> Step:
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
        optional = {"max_tokens": config.max_tokens, "thinking": config.thinking,
                    "reasoning_effort": config.reasoning_effort, "max_retries": config.max_retries}
        if self.endpoint.probe is None:  # the configured endpoint's dialect (an endpoint of dsh's own has its own)
            optional = {"dialect": config.dialect, **optional}
        for key, value in optional.items():
            if value is not None:
                shown = _with_line(sources.get(key, DIALECT_BY_HOST)) if key == "dialect" else source(key)
                parts.append(f"{key} {value} ({shown})")
                facts[key] = {"value": value, "source": shown}
        if config.max_cost is not None:  # the spending cap (docs/contracts.md, "Budgets")
            parts.append(f"max_cost {dollars(config.max_cost)} ({source('max_cost')})")
            facts["max_cost"] = {"value": config.max_cost, "source": source("max_cost")}
        api_key = config.api_key
        if self.endpoint.probe is not None:  # an endpoint of dsh's own that needs no key (the demo's)
            parts.append(self.endpoint.probe.key_note)
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
        text = f"{label}: A {', '.join(a) or 'none'}; AAAA {', '.join(aaaa) or 'none'} in {milliseconds(took)}"
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
                results.append(f"{shown_host(address, port)} {why} after {milliseconds(took)}")
                facts.append({"address": address, "port": port, "connected": False, "ms": round(took * 1000, 1)})
                continue
            took = self.now() - started
            await stream.aclose()
            connected = True
            self.reachable = self.reachable or (address, port)
            results.append(f"{shown_host(address, port)} connected in {milliseconds(took)}")
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
            return Step(name, SKIP, f"GET {path} answered 404 in {milliseconds(took)}: {absent}")
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
        self.models_body = body if status == 200 else {}
        model = self.config.model
        if model in names:
            return Step("HTTP", PASS, f"GET /models 200 in {milliseconds(took)}; {model} is listed ({shown})",
                        facts=facts)
        source = _with_line(self._sources().get("model", "model (--model, DSH_MODEL or config.toml)"))
        return Step("HTTP", FAIL, f"GET /models 200 in {milliseconds(took)}; {model} is not listed ({shown})",
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
            return Step("balance", PASS, f"available: {shown} (in {milliseconds(took)})", facts=facts)
        if available is False:
            # The fix a turn's QUOTA gets from this endpoint: DeepSeek's top-up page only for DeepSeek.
            client = self._client()
            quota = Failed(ErrorCode.QUOTA, endpoint=client.base_url_display, endpoint_name=client.endpoint.name)
            return Step("balance", FAIL, f"[{ErrorCode.QUOTA}] not available: {shown} (in {milliseconds(took)})",
                        fix_line(quota, self._sources()), facts)
        return Step("balance", SKIP, f"GET /user/balance answered without is_available (in {milliseconds(took)})",
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
        parts = [f"headers in {milliseconds(headers or 0.0)}"]
        parts.append(f"first token in {milliseconds(first - started)}" if first is not None else "no token")
        parts.append(f"{keep_alives} keep-alive{'s' if keep_alives != 1 else ''}")
        parts.append("[DONE]" if trace.done else f"no [DONE] (finish reason {finish})")
        return Step("stream", PASS, "; ".join(parts) + f"; {milliseconds(ended - started)} in all", facts=facts)

    def _upstream_refused(self, exc: LlmError) -> str:
        """A gateway's upstream refused the gateway's own credential or account: whether the gateway took the
        key first."""
        gateway = exc.endpoint_name or "the gateway"
        owner = f"{exc.endpoint_name}'s" if exc.endpoint_name else "the gateway's"
        what = "credential" if exc.detail == FailureDetail.UPSTREAM_AUTH else "account for quota or credit"
        if self.models_listed:
            return f"{gateway} accepted your key (GET /models 200), but its upstream refused {owner} own {what}"
        return f"the upstream of {gateway} refused {owner} own {what}"

    # -- after the request path (repl/doctor_environment.py) ------------------------------------------------

    async def environment(self) -> Step:
        return await self._after_path.environment()

    async def sandbox(self) -> Step:
        return await self._after_path.sandbox()

    async def mcp_servers(self) -> list[Step]:
        return await self._after_path.mcp_servers()

    async def hooks(self) -> list[Step]:
        return await self._after_path.hooks()

    # -- the walk -------------------------------------------------------------------------------------

    async def run(self, on_step: Callable[[Step], None] | None = None) -> Report:
        """Every step in order; after the first failure on the request path the rest of it is skipped."""
        steps: list[Step] = []

        def add(step: Step) -> None:
            steps.append(step)
            if on_step is not None:
                on_step(step)

        path: list[Callable[[], Step | Awaitable[Step]]] = [
            self.configuration, self.proxy, self.dns, self.tcp, self.tls, self.http, self.balance, self.stream]
        failed = False
        try:
            for check, name in zip(path, STEPS, strict=False):
                if failed:
                    add(Step(name, SKIP, "skipped (an earlier step failed)"))
                    continue
                try:
                    result = check()
                    step = result if isinstance(result, Step) else await result
                except Exception as exc:  # a bug of ours: still one line, and the walk stops here
                    step = self._failed(name, exc)
                add(step)
                failed = step.status == FAIL
            if not failed:  # a local server that says its context size (llama.cpp's /props): one more step
                try:
                    context = await context_step(self._client(), self.config, self.models_body)
                except Exception as exc:  # a bug of ours: one line, as on the request path
                    context = self._failed("context", exc)
                if context is not None:
                    add(context)
            add(await self.environment())
            if self.config.sandbox is not None:
                add(await self.sandbox())
            for step in [*await self.mcp_servers(), *await self.hooks()]:
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


async def _check_configured(config: Config, env: Mapping[str, str], show: Callable[[Step], None],
                            resolver: Resolver | None) -> Report:
    """``dsh doctor``'s steps against the endpoint the config names (dsh.repl.endpoint)."""
    async with contextlib.AsyncExitStack() as stack:
        endpoint = await open_endpoint(stack, LaunchOptions(), config)
        return await run_doctor(config, env, show, resolver=resolver, endpoint=endpoint)


def main(argv: list[str], env: Mapping[str, str], *, resolver: Resolver | None = None) -> int:
    """``dsh doctor [--json] [--base-url URL] [--model NAME] [--proxy URL] [--config PATH]``: 0 when every
    step passed, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="dsh doctor", description="Check each step of a request to the endpoint.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--base-url", dest="base_url", metavar="URL")
    parser.add_argument("--model")
    parser.add_argument("--proxy", metavar="URL")
    parser.add_argument("--dialect", choices=DIALECTS)
    parser.add_argument("--max-cost", dest="max_cost", metavar="USD")
    parser.add_argument("--config", metavar="PATH")
    parser.add_argument("--profile", metavar="NAME")
    args = parser.parse_args(argv)
    flags = {"base_url": args.base_url, "model": args.model, "proxy": args.proxy, "dialect": args.dialect,
             "max_cost": args.max_cost, "profile": args.profile}
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
        config = trust_gate(config, env, None)[0]  # an untrusted project's hooks are not run, not even once
    except ConfigError as exc:
        report = config_failure(exc, env_secrets)
        for step in report.steps:
            show(step)
    else:
        report = anyio.run(lambda: _check_configured(config, env, show, resolver))
    if args.json:
        write(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        write(report.lines()[-1])
    return 0 if report.ok else 1
