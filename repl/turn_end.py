"""The lines a turn's end shows: the turn-end line (``[turn failed CODE] message``) and, under a failure the
user can act on, its one-line remedy (``  fix: ...``). Pure: the caller passes where each setting came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from dsh.agent_loop.budget import budget_words
from dsh.agent_loop.plan import Plan, open_words
from dsh.agent_loop.reasons import Aborted, BudgetStop, Completed, EndReason, Failed, Interrupted, MaxTokens, Rejected
from dsh.llm import ErrorCode
from dsh.llm.defaults import DEFAULT_BASE_URL
from dsh.llm.endpoint import DEEPSEEK, Endpoint, endpoint_for_url, host_and_address
from dsh.llm.fix_lines import (
    FIX_CERTIFICATE,
    FIX_CERTIFICATE_EXPIRED,
    FIX_CERTIFICATE_NOT_YET_VALID,
    FIX_NAME_NOT_FOUND,
    FIX_PLAIN_HTTP,
    FIX_PROXY_AUTH,
    FIX_PROXY_NAME,
    FIX_PROXY_REFUSED,
    FIX_REFUSED,
)
from dsh.llm.network import FailureDetail
from dsh.llm.redact import redact_text
from dsh.repl.sanitize import one_line

__all__ = [
    "FIX_AUTH",
    "FIX_AUTH_FROM",
    "FIX_CERTIFICATE",
    "FIX_CERTIFICATE_EXPIRED",
    "FIX_CERTIFICATE_NAME",
    "FIX_CERTIFICATE_NOT_YET_VALID",
    "FIX_CONCURRENCY_CAP",
    "FIX_CONTEXT",
    "FIX_CONTEXT_ALONE",
    "FIX_INVALID_URL",
    "FIX_NAME_NOT_FOUND",
    "FIX_NAME_NOT_FOUND_DEFAULT",
    "FIX_NAME_UNRESOLVED",
    "FIX_PLAIN_HTTP",
    "FIX_PROXY",
    "FIX_PROXY_AUTH",
    "FIX_PROXY_DEPENDENCY",
    "FIX_PROXY_NAME",
    "FIX_PROXY_REFUSED",
    "FIX_PROXY_UNRESOLVED",
    "FIX_QUOTA",
    "FIX_QUOTA_ELSEWHERE",
    "FIX_RATE_LIMIT",
    "FIX_REFUSED",
    "FIX_SERVER",
    "FIX_UPSTREAM_AUTH",
    "FIX_UPSTREAM_QUOTA",
    "fix_line",
    "turn_end_line",
]

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
# A deepseek-dialect 429 (dsh.llm.request_gate): the account's cap on requests in flight, not a rate.
FIX_CONCURRENCY_CAP = (
    "  fix: the cap counts the account's requests in flight from every key and program; set max_parallel in "
    "config.toml to run fewer at once, or wait for the others to finish"
)
FIX_SERVER = "  fix: {endpoint} is having trouble; retry later"
FIX_CONTEXT = "  fix: the conversation is too long for the model — /compact or /new"
# The same with nothing before the prompt (detail nothing-to-compact): dsh's instructions and tools and the prompt.
FIX_CONTEXT_ALONE = (
    "  fix: dsh's instructions and this prompt alone are too long for the model — shorten the prompt or give the "
    "model more context"
)
# Transport and proxy failures, by FailureDetail; {host} and {url} come from the failure, {source} names
# the flag, environment variable or config file that set the value (docs/reliability.md). Those web_fetch says
# too are dsh.llm.fix_lines' (imported below); these are the turn's own.
# dsh's own default host exists: a resolver that denies it is this machine's DNS or network, not a setting.
FIX_NAME_NOT_FOUND_DEFAULT = (
    "  fix: this machine's DNS says {name} (dsh's default host) does not exist — check DNS or the network"
)
# No answer (a resolver failure, a timeout, no network): the name may well exist, so no setting is blamed.
FIX_NAME_UNRESOLVED = "  fix: the host name {name} could not be resolved — check DNS or the network"
FIX_CERTIFICATE_NAME = (
    "  fix: the certificate is for other host names — use one it names in {source}, or the server needs a"
    " certificate for {name}"
)
FIX_INVALID_URL = "  fix: the URL is not valid — check {source}"
FIX_PROXY_UNRESOLVED = "  fix: the proxy host {name} could not be resolved — check DNS or the network"
FIX_PROXY_DEPENDENCY = "  fix: this proxy needs an extra package — pip install 'httpx[socks]'"
FIX_PROXY = "  fix: the proxy failed the request — check the proxy, or unset {source}"


def turn_end_line(reason: EndReason, secrets: Sequence[str] = (), plan: Plan | None = None) -> str | None:
    """The exact line for a turn-end reason; ``None`` for completed, disposed, unknown. A completed turn whose
    ``plan`` (the session's, then) still has open items says so: the turn stopped, the work did not."""
    match reason:
        case Completed() if plan is not None and plan.open:
            return f"[turn completed] {open_words(plan)}"
        case Failed(code=code, message=message):
            code = one_line(code)
            message = one_line(redact_text(_named(reason, message), secrets))
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
        case BudgetStop(spent=spent, max_cost=cap):
            return f"[turn stopped BUDGET] {budget_words(spent, cap)}"
        case Interrupted():
            return "[turn interrupted by a previous process exit]"
    return None


_UNNAMED_TEXT = frozenset({DEEPSEEK, "LiteLLM"})


def _named(reason: Failed, message: str) -> str:
    """An HTTP answer's text as the server wrote it, named as every other failure line names the endpoint
    (``llama.cpp: request (818 tokens) exceeds …``); DeepSeek's own text, and text that names its server, stay, and
    so does a gateway's (LiteLLM's text is mostly its upstream's, relayed: naming LiteLLM would mislabel it)."""
    name = reason.endpoint_name
    if reason.status is None or not name or name in _UNNAMED_TEXT or name.lower() in message.lower():
        return message
    return f"{name}: {message}"


_FIX_BY_CODE: dict[str, str] = {
    ErrorCode.AUTH: FIX_AUTH,
    ErrorCode.RATE_LIMIT: FIX_RATE_LIMIT,
    ErrorCode.CONTEXT_WINDOW_EXCEEDED: FIX_CONTEXT,
}
_KEY_SOURCE = "DEEPSEEK_API_KEY (or api_key in config.toml)"
_DEFAULT_HOST = urlsplit(DEFAULT_BASE_URL).hostname


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


def _name_fix(detail: str, host: str) -> str:
    """Which DNS line: "does not exist" only for a denied name the user set; else check DNS or the network."""
    if detail == FailureDetail.NAME_UNRESOLVED:
        return FIX_NAME_UNRESOLVED
    if host == _DEFAULT_HOST:  # it exists: whoever set it, the resolver that denies it is at fault
        return FIX_NAME_NOT_FOUND_DEFAULT
    return FIX_NAME_NOT_FOUND


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
        elif detail == FailureDetail.NAME_UNRESOLVED and host:
            line = FIX_PROXY_UNRESOLVED
        elif detail == FailureDetail.PROXY_DEPENDENCY:
            line = FIX_PROXY_DEPENDENCY
        else:
            line = FIX_PROXY
        return one_line(line.format(host=host_port, name=host, source=source))
    if reason.code == ErrorCode.TRANSPORT and detail is not None:
        source = sources.get("base_url", "base_url (--base-url, DEEPSEEK_BASE_URL or config.toml)")
        if detail == FailureDetail.REFUSED and host_port:
            return one_line(FIX_REFUSED.format(host=host_port, source=source))
        if detail in (FailureDetail.NAME_NOT_FOUND, FailureDetail.NAME_UNRESOLVED) and host:
            return one_line(_name_fix(detail, host).format(name=host, source=source))
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
    if reason.code == ErrorCode.RATE_LIMIT and detail == FailureDetail.CONCURRENCY_CAP:
        return FIX_CONCURRENCY_CAP
    if reason.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED and detail == FailureDetail.NOTHING_TO_COMPACT:
        return FIX_CONTEXT_ALONE
    if reason.code == ErrorCode.AUTH and "api_key" in sources:
        return one_line(FIX_AUTH_FROM.format(source=sources["api_key"]))
    return _FIX_BY_CODE.get(reason.code)
