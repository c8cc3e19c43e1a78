"""The project config, ``.dsh/config.toml`` at the repository root: the keys a repository may set for you.

A cloned repository chose what is in it, so the file is read as ``AGENTS.md`` is (agent_loop/extension_files.py:
never through a symlink out of the tree, only a regular file, at most 64 KiB), and it carries only keys a hostile
repository cannot turn against the user (:data:`PROJECT_KEYS`; docs/configuration.md, "Project config"). The
rest are ignored with one line each. What would run a program (hooks, MCP servers, subagents) is held back
until the user trusts this file's content (:mod:`dsh.repl.trust`). It ranks above the user's config file and
below the environment and the flags; in a table of tables (``[mcp_servers.NAME]``) the user's own entry wins.
A file that cannot be read or checked is left out whole, with one line: a repository never stops dsh.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from dsh.agent_loop.git_root import find_git_dir
from dsh.agent_loop.settings import SettingsError
from dsh.repl.lazy import entry, module
from dsh.repl.profiles import cap_profiles

__all__ = ["IGNORED_KEYS", "PROJECT_FILE", "PROJECT_KEYS", "TRUSTED_KEYS", "ProjectConfig", "merge_project",
           "project_file", "project_layer", "read_project", "shown_path"]

PROJECT_FILE = ".dsh/config.toml"
# Keys the project file may set: what model and how it thinks, timeouts, the prompt, continuation and compaction.
PROJECT_KEYS = frozenset({
    "model", "models", "thinking", "reasoning_effort", "max_tokens", "stream_idle_timeout", "first_token_timeout",
    "max_retries", "system_prompt", "system_prompt_append", "report_ring_bytes", "auto_compact", "markdown",
    "dialect", "max_continuations", "auto_continue", "max_cost", "subagents", "mcp_servers", "hooks", "profiles",
})
# Keys whose entries run a program: held back until the file is trusted (dsh.repl.trust).
TRUSTED_KEYS = ("hooks", "mcp_servers", "subagents")
# Keys ignored here, with why in one line: where requests go, the key, what may run without asking, where data is
# written, which programs run on their own.
IGNORED_KEYS = frozenset({
    "api_key", "base_url", "proxy", "sandbox", "sandbox_network", "permission_mode", "allow_edits", "approve",
    "record", "claude_settings", "prompt_hook", "max_parallel", "web", "web_allow", "keep_images",
})
_PRICES = ("input_cache_hit", "input_cache_miss", "output")  # a repository must not make spending look cheaper
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

Check = Callable[[str, object, str], Any]


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """The project file that was read, and what of it needs trust. ``held``: the entries that would run a program
    (by key), left out of the config until the file is trusted; ``items``: them in closed words for a line."""

    path: Path
    shown: str  # the path as lines spell it: ``~/repo/.dsh/config.toml``
    root: Path  # the repository's real path: the trust store's key
    content: str = field(repr=False)  # its text: the trust store keeps its sha256, so a change asks again
    items: tuple[str, ...] = ()
    held: dict[str, Any] = field(default_factory=dict)
    trusted: bool = False

    @property
    def where(self) -> str:
        return f"project config {self.shown}"


def shown_path(path: Path, env: Mapping[str, str]) -> str:
    """``path`` with the home directory as ``~`` (a line names the file the way the user would type it)."""
    home = env.get("HOME", "")
    text = str(path)
    if home and home != "/" and (text == home or text.startswith(home.rstrip("/") + "/")):
        return "~" + text[len(home.rstrip("/")):]
    return text


def project_file(cwd: Path) -> tuple[Path, Path]:
    """(the project file's path, the repository root) for ``cwd``: the git work tree holding it, else ``cwd``, found
    as AGENTS.md's discovery finds it (agent_loop/git_root.py)."""
    found = find_git_dir(cwd)
    root = found[0] if found is not None else cwd
    return root / PROJECT_FILE, root


def read_project(cwd: Path | None, env: Mapping[str, str], warnings: list[str],
                 tomllib: Callable[[], ModuleType]) -> tuple[dict[str, Any], ProjectConfig] | None:
    """The project file's TOML and its facts for ``cwd`` (default: this process's); None when there is none (the
    ``lstat`` calls of the walk up to ``.git`` and one more) or it is left out (a line in ``warnings``)."""
    try:
        path, root = project_file(cwd if cwd is not None else Path.cwd())
    except OSError:  # the working directory was removed: no project
        return None
    if not os.path.lexists(path):
        return None
    shown = shown_path(path, env)
    toml = tomllib()  # only with a project file: the parser costs the first prompt ~10 ms
    # and so does the reader of a hostile tree's files (repl/lazy.py)
    files = module("dsh.agent_loop.extension_files")
    left_out: type[Exception] = files.LeftOut
    try:
        text = files.read_inside(path, files.Folder(path.parent, root, "the repository", "project"))
        if text is None:
            return None
        if "\ufffd" in text:  # not UTF-8 (the hash is of the text: two byte strings must not read alike)
            raise left_out("it is not valid UTF-8")
        raw = toml.loads(text)
    except left_out as why:
        warnings.append(f"project config {shown} left out: {why}")
        return None
    except toml.TOMLDecodeError as exc:
        warnings.append(f"project config {shown} left out: it is not valid TOML ({str(exc)[:120]})")
        return None
    return raw, ProjectConfig(path, shown, Path(os.path.realpath(root)), text)


def merge_project(raw: Mapping[str, Any], project: ProjectConfig, checks: Mapping[str, Check],
                  user: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str], list[str], ProjectConfig]:
    """The project file's values checked and ranked over ``user`` (the user's file), the sources of those it set,
    its lines, and its facts with what needs trust. A bad value leaves the whole file out (one line)."""
    lines: list[str] = []
    values: dict[str, Any] = {}
    try:
        for key, value in raw.items():
            if key in IGNORED_KEYS or _names_a_program(key):
                lines.append(f"{project.where}: {key} is ignored here (set it in your own config.toml)")
            elif key not in PROJECT_KEYS or key not in checks:
                lines.append(f"{project.where}: unknown key {key!r} ignored")
            else:
                values[key] = _checked(key, value, project, checks, lines)
    except SettingsError as exc:
        return {}, {}, [*lines, f"{project.where} left out: {str(exc).removeprefix(project.where + ': ')}"], project
    cap = user.get("max_cost")
    if "max_cost" in values and cap is not None and values["max_cost"] > cap:
        lines.append(f"{project.where}: max_cost is ignored here: it may lower your cap, not raise it")
        del values["max_cost"]
    if "profiles" in values:  # the same rule for each profile's max_cost; the user's own profile of a name wins
        values["profiles"] = cap_profiles(values["profiles"], user, project.where, lines)
    held = {key: values.pop(key) for key in TRUSTED_KEYS if values.get(key)}
    for key in ("mcp_servers", "subagents"):  # the user's own entry of a name wins over the repository's
        if key in held:
            held[key] = {name: entry for name, entry in held[key].items() if name not in user.get(key, {})}
    if "models" in values:
        values["models"] = {**values["models"], **user.get("models", {})}
    held = {key: value for key, value in held.items() if value}
    sources = {key: f"{key} in {project.where}" for key in values}
    facts = ProjectConfig(project.path, project.shown, project.root, project.content, _items(held), held)
    return values, sources, lines, facts


def project_layer(read: tuple[dict[str, Any], ProjectConfig] | None, checks: Mapping[str, Check],
                  values: dict[str, Any], sources: dict[str, str], warnings: list[str]) -> ProjectConfig | None:
    """The project file's values put over the user's file's in ``values`` (its sources and lines too)."""
    if read is None:
        return None
    shared, shared_sources, lines, project = merge_project(*read, checks, values)
    values.update(shared)
    sources.update(shared_sources)
    warnings.extend(lines)
    return project


def _names_a_program(key: str) -> bool:
    return "proxy" in key or key.endswith(("_hook", "_command", "_url", "_path"))


def _checked(key: str, value: object, project: ProjectConfig, checks: Mapping[str, Check], lines: list[str]) -> Any:
    if key == "hooks":  # parsed with the file's real path: /hooks names each one's line
        return entry("dsh.agent_loop.hooks", "parse_hooks")(value, project.where, project.path)  # with hooks only
    if key == "models" and isinstance(value, Mapping):
        value = {name: _unpriced(name, table, project, lines) for name, table in value.items()}
    return checks[key](key, value, project.where)


def _unpriced(name: str, table: object, project: ProjectConfig, lines: list[str]) -> object:
    """A ``[models.NAME]`` table without its prices: a repository pricing a model at 0 would defeat max_cost."""
    if not isinstance(table, Mapping) or not any(price in table for price in _PRICES):
        return table
    lines.append(f"{project.where}: models.{_safe(name)} prices are ignored here (set them in your own config.toml)")
    return {key: value for key, value in table.items() if key not in _PRICES}


def _safe(name: object) -> str:
    return _UNSAFE.sub("_", str(name))[:40] or "_"


def _program(argv: object) -> str:
    first = argv[0] if isinstance(argv, (list, tuple)) and argv else argv if isinstance(argv, str) else ""
    return _safe(os.path.basename(str(first).split()[0].rstrip("/"))) if str(first).strip() else ""


def _items(held: Mapping[str, Any]) -> tuple[str, ...]:
    """What the held entries would run, in closed words: kinds, names and programs' basenames, never arguments."""
    items: list[str] = []
    for spec in held.get("hooks", ()):  # HookSpec (agent_loop/hooks.py)
        items.append(f"hook {spec.event} ({spec.name})")
    for name, server in held.get("mcp_servers", {}).items():
        what = _program(server.command) if server.command else "http"
        items.append(f"MCP server {_safe(name)} ({what or 'stdio'})")
    for name, table in held.get("subagents", {}).items():
        program = _program(table.get("command") or table.get("cli_path") or "")
        items.append(f"subagent {_safe(name)} ({program or _safe(table.get('provider', 'dsh'))})")
    return tuple(items)
