"""Trusting a project config: what ``.dsh/config.toml`` would run (hooks, MCP servers, subagents) runs only after
the user said yes to this file's content in this repository (docs/configuration.md, "Project config").

The answers live in ``$XDG_STATE_HOME/dsh/trust.json`` (0600), keyed by the repository's real path and holding
the file's sha256, so a changed file asks again. The interactive REPL asks once, before the first prompt; ``-p``,
piped runs and ``dsh acp`` never ask: they leave those parts out with one line saying how to trust them
(``dsh trust``, :func:`main`, which shows what the file configures and records its hash).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from dsh.agent_loop.safe_open import open_parent, read_regular, replace_in
from dsh.repl.config import Config, ConfigError, load_config, state_dir
from dsh.repl.project_config import ProjectConfig
from dsh.repl.sanitize import sanitize

__all__ = ["ask_terminal", "gate", "main", "question", "remember", "stored_answer", "trust_file", "untrusted_line",
           "with_held"]

TRUST_FILE = "trust.json"
_STORE_LIMIT = 4 << 20  # a trust file larger than this is not dsh's: read as empty
TRUSTED, DECLINED = "trusted", "declined"


def trust_file(env: Mapping[str, str]) -> Path:
    return state_dir(env) / TRUST_FILE


def _store(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The remembered answers by repository; empty when there are none or the file is not dsh's (never an error:
    an unreadable store asks again, it never trusts)."""
    try:
        data = json.loads(read_regular(trust_file(env), _STORE_LIMIT))
    except (OSError, ValueError, RecursionError):
        return {}
    repositories = data.get("repositories") if isinstance(data, dict) else None
    if not isinstance(repositories, dict):
        return {}
    return {key: value for key, value in repositories.items() if isinstance(value, dict)}


def digest(project: ProjectConfig) -> str:
    """The sha256 of the file's text (read as UTF-8 only, so two byte strings never read alike)."""
    return hashlib.sha256(project.content.encode("utf-8", "surrogatepass")).hexdigest()


def stored_answer(project: ProjectConfig, env: Mapping[str, str]) -> str | None:
    """``trusted`` or ``declined`` for this repository and this content of the file; None: not asked yet."""
    entry = _store(env).get(str(project.root), {})
    answer = entry.get("answer")
    return answer if entry.get("sha256") == digest(project) and answer in (TRUSTED, DECLINED) else None


def remember(project: ProjectConfig, env: Mapping[str, str], answer: str | None) -> None:
    """Record ``answer`` for this content of the file (None: forget the repository), written whole, 0600."""
    repositories = _store(env)
    repositories.pop(str(project.root), None)
    if answer is not None:
        repositories[str(project.root)] = {"sha256": digest(project), "answer": answer}
    path = trust_file(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = json.dumps({"version": 1, "repositories": repositories}, indent=1, sort_keys=True) + "\n"
    directory = open_parent(Path(os.path.realpath(path.parent)) / TRUST_FILE, create=False)
    try:
        replace_in(directory, TRUST_FILE, data.encode(), mode=0o600)
    finally:
        os.close(directory)


def _runs(project: ProjectConfig, limit: int = 6) -> str:
    shown = list(project.items[:limit])
    if len(project.items) > limit:
        shown.append(f"and {len(project.items) - limit} more")
    return ", ".join(shown)


def question(project: ProjectConfig) -> str:
    return f"project config {project.shown} would run: {_runs(project)}. Trust it? [y/N] "


def untrusted_line(project: ProjectConfig) -> str:
    return f"project config {project.shown} is not trusted: {_runs(project)} not run (dsh trust trusts it)"


def with_held(config: Config, env: Mapping[str, str]) -> Config:
    """``config`` with what the trusted project file runs: its hooks after the user's, its servers and subagents
    beside the user's (a name the user's file has was left out when it was read)."""
    project = config.project
    assert project is not None
    held = project.held
    servers = held.get("mcp_servers", {})
    headers = tuple(value for server in servers.values() for value in server.header_secrets(env))
    return dataclasses.replace(
        config, hooks=(*config.hooks, *held.get("hooks", ())), mcp_servers={**config.mcp_servers, **servers},
        subagents={**config.subagents, **held.get("subagents", {})},
        environment_secrets=(*config.environment_secrets, *headers),
        project=dataclasses.replace(project, trusted=True))


def gate(config: Config, env: Mapping[str, str], ask: Callable[[str], bool] | None) -> tuple[Config, list[str]]:
    """``config`` with the project file's programs when the file is trusted (or ``ask`` says yes now: asked once
    per content), and the lines to show; without ``ask`` (``-p``, piped, acp) nothing is asked."""
    project = config.project
    if project is None or not project.held:
        return config, []
    answer = stored_answer(project, env)
    if answer is None and ask is not None:
        answer = TRUSTED if ask(question(project)) else DECLINED
        try:
            remember(project, env, answer)
        except OSError as exc:  # the answer holds for this run; the next one asks again
            return _answered(config, env, answer, [f"the trust answer cannot be saved: {exc.strerror}"])
    return _answered(config, env, answer, [])


def _answered(config: Config, env: Mapping[str, str], answer: str | None, lines: list[str]) -> tuple[Config, list[str]]:
    if answer == TRUSTED:
        return with_held(config, env), lines
    assert config.project is not None
    return config, [*lines, untrusted_line(config.project)]


def ask_terminal(prompt: str) -> bool:
    """The REPL's one question, on the terminal before the first prompt: yes only for y or yes."""
    sys.stdout.write(sanitize(prompt))
    sys.stdout.flush()
    try:
        reply = sys.stdin.readline(64)
    except (OSError, ValueError, KeyboardInterrupt):
        reply = ""
    if not reply.endswith("\n"):
        sys.stdout.write("\n")
    return reply.strip().lower() in ("y", "yes")


# --- dsh trust ---------------------------------------------------------------------------------------------------


def main(args: list[str], env: dict[str, str]) -> int:
    """``dsh trust [--revoke]``: show what this repository's project config sets and runs, and trust it (or not)."""
    parser = argparse.ArgumentParser(prog="dsh trust", description="Trust this repository's .dsh/config.toml: "
                                     "its hooks, MCP servers and subagents run (docs/configuration.md).")
    parser.add_argument("--revoke", action="store_true", help="forget the trust: they no longer run")
    parser.add_argument("--config", metavar="PATH", help="your config file (default $XDG_CONFIG_HOME/dsh/config.toml)")
    options = parser.parse_args(args)
    try:
        config = load_config({}, env, require_key=False, config_path=Path(options.config) if options.config else None)
    except ConfigError as exc:
        _err(f"dsh trust: {exc}")
        return 2
    for warning in config.warnings:
        _err(f"dsh: warning: {warning}")
    project = config.project
    if project is None:
        _err(f"dsh trust: no project config here to trust ({PROJECT_HINT})")
        return 1
    if options.revoke:
        remember(project, env, None)
        _out(f"project config {project.shown}: trust revoked; what it runs no longer runs")
        return 0
    sets = sorted(key for key, source in config.sources.items() if source.endswith(project.where))
    _out(f"project config {project.shown} (sha256 {digest(project)[:12]})")
    _out(f"  sets: {', '.join(sets) or 'nothing'}")
    _out(f"  runs: {_runs(project, limit=50) or 'nothing'}")
    remember(project, env, TRUSTED)
    _out("trusted: what it runs will run in this repository until the file changes (dsh trust --revoke undoes it)")
    return 0


PROJECT_HINT = "the repository's .dsh/config.toml"


def _out(line: str) -> None:
    sys.stdout.write(sanitize(line) + "\n")
    sys.stdout.flush()


def _err(line: str) -> None:
    sys.stderr.write(sanitize(line) + "\n")
    sys.stderr.flush()

