"""A failure before any response, kept as structured links so a replay can raise it again (docs/record-replay.md).

The recorder (:meth:`dsh.llm.wire_trace.TraceWriter.end`) writes :func:`chain_record` into the ``chain`` field of an
``end`` record; the replay server checks it with :func:`check_chain` when it loads the trace and hands it to a
replaying dsh (the ``x-dsh-replay`` request header asks for it), whose transport (dsh.llm.replay_transport) rebuilds
the exceptions. Each link names its class from the closed list :data:`ALLOWED` (a class outside it is recorded as
its nearest listed base), its masked text and the fields :func:`dsh.llm.network.classify_transport` reads.

The standard library and dsh.llm.errors only: the trace's writer and the loopback server use it without httpx.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dsh.llm.errors import cause_beneath

__all__ = ["ALLOWED", "EXCHANGE_EXTENSION", "FIELDS", "FINDING_EXTENSION", "MAX_LINKS", "MAX_TEXT",
           "REPLAY_FAILURE_HEADER", "REPLAY_REQUEST_HEADER", "UNTAPPED_EXTENSION", "chain_record", "check_chain",
           "class_name", "rebuildable"]

# A replaying dsh marks its requests with this header; the replay server then answers a failure before any
# response with a 200 carrying this header and ``{"chain": [...], "finding": ...}`` instead of a reset.
REPLAY_REQUEST_HEADER = "x-dsh-replay"
REPLAY_FAILURE_HEADER = "x-dsh-replay-failure"
# The recorder puts an exchange's number in its request's extensions, so the client can add a finding to it.
EXCHANGE_EXTENSION = "dsh.exchange"
# A request the recorder lets by untapped: a side look of dsh's own (the first turn's GET /models) is neither in a
# --record file nor in the capsule's ring, which hold the turns' exchanges.
UNTAPPED_EXTENSION = "dsh.untapped"
# A replay puts the finding recorded with a failure in its request's extensions: the client names it as the live
# run did, without probing the server (docs/record-replay.md).
FINDING_EXTENSION = "dsh.recorded-finding"

# Every class a link may name, as errors.chain_links names it (module.qualname; builtins bare). A replay only
# ever builds one of these: a hand-edited name outside the list replays as a reset, never as an import.
ALLOWED = frozenset({
    *(f"httpx.{name}" for name in (
        "HTTPError", "RequestError", "TransportError", "TimeoutException", "ConnectTimeout", "ReadTimeout",
        "WriteTimeout", "PoolTimeout", "NetworkError", "ConnectError", "ReadError", "WriteError", "CloseError",
        "ProtocolError", "LocalProtocolError", "RemoteProtocolError", "ProxyError", "UnsupportedProtocol",
        "DecodingError", "InvalidURL")),
    *(f"httpcore.{name}" for name in (
        "TimeoutException", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "NetworkError",
        "ConnectError", "ReadError", "WriteError", "ProtocolError", "LocalProtocolError", "RemoteProtocolError",
        "ProxyError", "UnsupportedProtocol", "ConnectionNotAvailable")),
    "anyio.BrokenResourceError", "anyio.ClosedResourceError", "anyio.EndOfStream",
    "ssl.SSLError", "ssl.SSLCertVerificationError", "ssl.SSLZeroReturnError", "ssl.SSLEOFError",
    "ssl.SSLSyscallError", "socket.gaierror", "socket.herror",
    "OSError", "ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "ConnectionAbortedError",
    "BrokenPipeError", "TimeoutError", "PermissionError", "OverflowError", "ImportError", "ModuleNotFoundError",
    "ExceptionGroup", "Exception",
})  # fmt: skip
# The fields a link may hold besides its class, text and members, and the JSON type of each: what an OS or TLS
# failure carries that dsh.llm.network.classify_transport reads.
FIELDS: dict[str, type] = {"errno": int, "strerror": str, "verify_code": int, "verify_message": str,
                           "reason": str, "library": str}
MAX_LINKS = 32  # links in one chain, group members included
MAX_TEXT = 4096  # characters of one link's text
_MAX_MEMBERS = 8  # members of one exception group kept


def class_name(cls: type) -> str:
    """``cls`` as errors.chain_links names it: ``httpx.ConnectError``, ``ConnectionRefusedError``."""
    module = cls.__module__ or ""
    return cls.__qualname__ if module in ("builtins", "") else f"{module}.{cls.__qualname__}"


def _listed(exc: BaseException) -> str:
    return next((name for cls in type(exc).__mro__ if (name := class_name(cls)) in ALLOWED), "Exception")


def _text(exc: BaseException) -> str:
    """The text errors.chain_links shows for ``exc`` (a group's message, not its member count)."""
    try:
        text = exc.message if isinstance(exc, BaseExceptionGroup) else str(exc)
    except Exception:
        text = ""
    return text if isinstance(text, str) else ""


def failure_fields(exc: BaseException) -> dict[str, int | str]:
    """The :data:`FIELDS` that ``exc`` carries, each of its type (a bool is no int here), in that order."""
    found: dict[str, int | str] = {}
    for key, kind in FIELDS.items():
        # Optional on foreign exceptions: only an OSError has errno, and ssl sets verify_code and verify_message
        # only when OpenSSL itself refused (truststore on macOS and Windows raises the error without either).
        value = getattr(exc, key, None)
        if isinstance(value, int | str) and isinstance(value, kind) and not isinstance(value, bool):
            found[key] = value
    return found


def chain_record(exc: BaseException, mask: Callable[[str], str]) -> list[dict[str, Any]]:
    """``exc`` and everything beneath it as links (top first), each text ``mask``-ed and bounded."""
    return _links(exc, mask, set(), [MAX_LINKS])


def _links(exc: BaseException | None, mask: Callable[[str], str], on_path: set[int],
           budget: list[int]) -> list[dict[str, Any]]:
    links: list[dict[str, Any]] = []
    while exc is not None and budget[0] > 0 and id(exc) not in on_path:
        budget[0] -= 1
        on_path.add(id(exc))
        link: dict[str, Any] = {"class": _listed(exc), "text": mask(_text(exc)[:MAX_TEXT])}
        for key, value in failure_fields(exc).items():  # the fields a link may hold besides its class and text
            link[key] = mask(value[:MAX_TEXT]) if isinstance(value, str) else value
        if isinstance(exc, BaseExceptionGroup):
            link["members"] = [_links(member, mask, on_path, budget) for member in exc.exceptions[:_MAX_MEMBERS]]
        links.append(link)
        beneath = cause_beneath(exc)  # as errors.chain_links walks it
        exc = beneath if isinstance(beneath, BaseException) else None
    return links


def check_chain(value: object, *, depth: int = 0, budget: list[int] | None = None) -> str | None:
    """What is wrong with a recorded ``chain`` (for the loader's one line), or None when it is well formed.

    A class name outside :data:`ALLOWED` is well formed (:func:`rebuildable` says it cannot be replayed).
    """
    budget = [MAX_LINKS] if budget is None else budget
    if not isinstance(value, list) or (depth == 0 and not value):
        return "'chain' is not a list of exception links"
    for link in value:
        budget[0] -= 1
        if budget[0] < 0 or depth > 4:
            return f"'chain' holds more than {MAX_LINKS} links"
        if not isinstance(link, dict) or not isinstance(link.get("class"), str) or not isinstance(
                link.get("text"), str) or len(link["text"]) > MAX_TEXT:
            return "a 'chain' link is not an object with a string 'class' and 'text'"
        for key, kind in FIELDS.items():
            if key in link and (not isinstance(link[key], kind) or isinstance(link[key], bool)):
                return f"a 'chain' link's {key!r} is not a{'n' if kind is int else ''} {kind.__name__}"
        members = link.get("members")
        if members is not None:
            if not isinstance(members, list) or not members or len(members) > _MAX_MEMBERS:
                return "a 'chain' link's 'members' is not a list of chains"
            for member in members:
                problem = check_chain(member, depth=depth + 1, budget=budget)
                if problem:
                    return problem
    return None


def rebuildable(chain: list[dict[str, Any]]) -> bool:
    """Whether every link of a checked chain names an allowed class (a group only with its members)."""
    for link in chain:
        members = link.get("members")
        if link["class"] not in ALLOWED or (link["class"] == "ExceptionGroup") != bool(members):
            return False
        if members and not all(member and rebuildable(member) for member in members):
            return False
    return True
