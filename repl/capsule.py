"""A failure capsule: the failed turn as one masked 0600 file another person can read and replay (docs/reporting.md).

``/report [FILE]`` and ``dsh -p … --report FILE`` write it. The file is a wire trace
(:mod:`dsh.llm.wire_trace`) whose header says ``dsh-failure-capsule``, then one ``report`` record (the
turn-end and fix lines, the ``/why`` chain, version and platform, the settings and where each came from,
the proxy and trust store, ``dsh doctor``'s steps run again now), then the failed turn's exchanges from the
client's ring (:mod:`dsh.llm.exchange_ring`), numbered from 1 so that ``dsh --replay`` meets them in order.
The ring holds the exchanges' bytes raw: they are masked here, with every secret the configuration knows
now, and every string is masked again with them as it is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dsh.agent_loop.events import to_wire
from dsh.agent_loop.mcp.config import McpServerConfig
from dsh.agent_loop.reasons import Completed, EndReason
from dsh.llm import HarnessError, redact_url
from dsh.llm._version import __version__
from dsh.llm.codes import ErrorCode
from dsh.llm.models import ModelSettings
from dsh.llm.network import no_proxy
from dsh.llm.wire_trace import CAPSULE_TYPE, TraceWriter
from dsh.repl.config import KNOWN_KEYS, state_dir
from dsh.repl.turn_end import fix_line, turn_end_line
from dsh.repl.why import why_lines

if TYPE_CHECKING:
    from dsh.repl.doctor_report import Step
    from dsh.repl.host import Host

__all__ = ["NO_FAILURE", "default_name", "default_path", "failed_turn", "write_capsule"]

NO_FAILURE = "no failed turn to report yet"
# Settings whose values are shown by their shape only: a table's values, a prompt's text or a hook's arguments
# could hold a secret or the user's own words (docs/reporting.md, "What a capsule holds").
_TABLES = ("subagents", "mcp_servers", "models")
_TEXTS = ("system_prompt", "system_prompt_append")
_COMMANDS = ("prompt_hook",)  # an argv list or a shell command line: a checking service's token rides in it


def default_name(session_id: str | None = None) -> str:
    """``dsh-report-<session id>-20261204T102703Z.jsonl``: one a second per session."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    session_id = "".join(c for c in session_id or "" if c.isascii() and (c.isalnum() or c in "-_"))[:64]
    return f"dsh-report-{session_id}-{stamp}.jsonl" if session_id else f"dsh-report-{stamp}.jsonl"


def default_path(env: Mapping[str, str], session_id: str | None) -> str:
    """Where a capsule goes when no FILE is named: dsh's state directory (``~/.local/state/dsh/reports/``,
    made 0700), never the current folder, where a clone's ``git status`` would show it and a careless commit
    publish its request bodies (docs/reporting.md)."""
    folder = state_dir(env) / "reports"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not folder.is_symlink():
        folder.chmod(0o700)  # a folder made before, by hand or an older dsh: its capsules are the user's alone
    return str(folder / default_name(session_id))


def failed_turn(shell: Host) -> EndReason | None:
    """The last turn's end when it did not complete (a failure, an abort, a limit); None otherwise."""
    reason = shell.session.last_reason
    if reason is None or isinstance(reason, Completed) or turn_end_line(reason) is None:
        return None
    return reason


def _sources(shell: Host) -> dict[str, str]:
    """Where each setting came from, in the words fix lines use (the endpoint's own words over the config's: the
    demo's scenario picks the endpoint and the proxy)."""
    return {**shell.config.sources, **shell.endpoint.sources}


def _table_keys(table: object) -> list[str] | str:
    """A table's keys, as written (a dict) or as read at load (repl/config.py)."""
    if isinstance(table, dict):
        return sorted(table)
    return sorted(table.keys()) if isinstance(table, ModelSettings | McpServerConfig) else "?"


def settings(shell: Host) -> dict[str, Any]:
    """Each setting's value and source, never a secret: the key only as set or not, URLs redacted, tables by
    their names and keys, prompts by their length, commands by their program (the whole record is masked
    again when written)."""
    config, sources = shell.config, _sources(shell)
    out: dict[str, Any] = {}
    for key in sorted(KNOWN_KEYS):
        value = getattr(config, key, None)
        if key == "api_key":
            value = {"set": bool(value)}
        elif key in ("base_url", "proxy") and isinstance(value, str):
            value = redact_url(value)
        elif key in _TABLES and isinstance(value, dict):
            value = {name: _table_keys(table) for name, table in value.items()}
        elif key in _TEXTS and isinstance(value, str):
            value = {"chars": len(value)}
        elif key in _COMMANDS and value is not None:
            value = _command_shape(value)
        elif key == "hooks":  # by event, matcher and name: a hook's arguments may carry a token (docs/hooks.md)
            value = [{"event": spec.event, "matcher": spec.matcher, "hook": spec.name} for spec in config.hooks]
        out[key] = {"value": value, "source": sources.get(key, "default")}
    return out


def _command_shape(command: str | list[str]) -> dict[str, Any]:
    """An argv list as its program and how many arguments follow; a shell command line (its first word may be
    ``TOKEN=… check``) by its length alone."""
    if isinstance(command, list) and command:
        return {"program": command[0], "arguments": len(command) - 1}
    return {"chars": len(command)}


def _trust(env: dict[str, str]) -> dict[str, Any]:
    """The trust store a request verifies against (dsh.llm.trust_store), as a request picks it."""
    from dsh.llm.trust_store import request_store  # cryptography: only when a report is written

    store = request_store(env)
    return {"store": store.label, "files": list(store.files), "listable": store.listable,
            "SSL_CERT_FILE": env.get("SSL_CERT_FILE") or None, "SSL_CERT_DIR": env.get("SSL_CERT_DIR") or None}


def _proxy(shell: Host) -> dict[str, Any]:
    config, bypass = shell.config, no_proxy(shell.env)
    return {"proxy": redact_url(config.proxy) if config.proxy else None,
            "source": _sources(shell).get("proxy") if config.proxy else None, "no_proxy": bypass or None}


async def _doctor(shell: Host, on_step: Callable[[Step], None] | None) -> dict[str, Any]:
    """``dsh doctor``'s steps, run again now, bounded by its own timeouts (repl/doctor.py)."""
    from dsh.repl.doctor import run_doctor  # the endpoint checks: loaded when asked for

    config = dataclasses.replace(shell.endpoint.probed(shell.config), model=shell.session.model)
    report = await run_doctor(config, shell.env, on_step, endpoint=shell.endpoint)
    return report.to_dict()


def report_record(shell: Host, reason: EndReason, doctor: dict[str, Any], exchanges: dict[str, Any]) -> dict[str, Any]:
    """The ``report`` record: what the user saw, why, and where it ran."""
    secrets = shell.config.secrets
    fix = fix_line(reason, _sources(shell))
    return {
        "type": "report",
        "turn": turn_end_line(reason, secrets),
        "fix": fix.strip() if fix else None,
        "why": why_lines(shell.session),
        "dsh": __version__,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "model": shell.session.model,
        "settings": settings(shell),
        "proxy": _proxy(shell),
        "trust": _trust(shell.env),
        "doctor": doctor,
        "exchanges": exchanges,
        "frames": _frames(shell),
        "hooks": _hook_runs(shell),
    }


def _hook_runs(shell: Host) -> list[dict[str, Any]]:
    """The last hook runs (closed facts: event, name, outcome, category, exit code, duration; docs/hooks.md)."""
    hooks = shell.session.extras.hooks
    return [to_wire(ran)["data"] for ran in hooks.recent] if hooks is not None else []


def _frames(shell: Host) -> dict[str, Any]:
    """The children's JSON-RPC frames as closed facts (agent_loop/frames.py), per peer; none without that log."""
    frames = shell.session.frames  # a FrameLog once a subagent or an MCP server was started
    return frames.snapshot() if frames is not None else {}


def _turn_records(shell: Host, secrets: tuple[str, ...]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The failed turn's records from the ring, masked with ``secrets`` (and the client's own) and renumbered
    from 1, and a summary of what was kept."""
    client = shell.session.client
    ring = client.ring if client is not None else None
    first, last = shell.session.turn_exchanges
    summary: dict[str, Any] = {"turn": last - first, "kept": 0, "ring": "off" if ring is None else "on"}
    if ring is None:
        return [], summary
    records: list[dict[str, Any]] = []
    kept: set[int] = set()
    masker = TraceWriter(secrets=(*ring.secrets, *secrets))  # the client's secrets and every one known now
    for n, line in ring.lines(first, masker.finish):
        if n > last:
            break
        record = json.loads(line)
        record["n"] = n - first
        kept.add(n)
        records.append(record)
    summary["kept"] = len(kept)
    if kept and min(kept) != first + 1:  # the ring's cap dropped the turn's first exchanges
        summary["first_kept"] = min(kept) - first
    return records, summary


def _open(path: str, header: dict[str, Any], secrets: tuple[str, ...]) -> TraceWriter:
    """The capsule's writer; a path it will not take is a TraceFileError (``report file PATH cannot be written: …``)."""
    try:
        return TraceWriter(path, secrets=secrets, base_url=header.get("base_url", ""), proxy=header.get("proxy"),
                           timeouts=header.get("timeouts"), kind=CAPSULE_TYPE, dialect=header.get("dialect"))
    except OSError as exc:
        raise HarnessError(f"report file {path} cannot be written: {exc.strerror or type(exc).__name__}",
                           ErrorCode.CONFIG) from None


async def write_capsule(shell: Host, path: str | None = None, *,
                        on_step: Callable[[Step], None] | None = None) -> str:
    """Write the capsule of the last failed turn to ``path`` (:func:`default_path` under dsh's state directory
    when None; the file 0600 either way) and return the path; a :class:`HarnessError` names a path that cannot
    take it. ``on_step`` hears each of the doctor's steps as it ends."""
    reason = failed_turn(shell)
    if reason is None:
        raise HarnessError(NO_FAILURE, ErrorCode.CONFIG)
    try:
        path = os.path.expanduser(path) if path else default_path(shell.env, shell.session.id)
    except OSError as exc:
        raise HarnessError(f"report folder under {state_dir(shell.env)} cannot be made: "
                           f"{exc.strerror or type(exc).__name__}", ErrorCode.CONFIG) from None
    secrets = shell.config.secrets
    records, summary = _turn_records(shell, secrets)  # before the doctor runs: its requests are not the turn's
    client = shell.session.client
    header = (client.trace_header if client is not None else None) or {
        "base_url": redact_url(shell.config.base_url), "proxy": redact_url(shell.config.proxy)
        if shell.config.proxy else None, "timeouts": {}}
    _open(path, header, secrets).close()  # a path that cannot take it is said before the doctor runs
    doctor = await _doctor(shell, on_step)
    writer = _open(path, header, secrets)
    try:
        writer.copy(report_record(shell, reason, doctor, summary))
        for record in records:
            writer.copy(record)
    finally:
        writer.close()
    return path
