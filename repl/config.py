"""Settings from flags, then the environment, then ``$XDG_CONFIG_HOME/dsh/config.toml``.

Every problem is a :class:`ConfigError` (exit 2) whose message names the file and the key and
never echoes a secret. Unknown keys are warnings, not errors, so that a newer config file still
starts an older dsh.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dsh.agent_loop import settings
from dsh.agent_loop.settings import At, SettingsError
from dsh.llm.defaults import (
    DEFAULT_BASE_URL,
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_MAX_CONTINUATIONS,
    DEFAULT_MODEL,
    DEFAULT_STREAM_IDLE_TIMEOUT,
)
from dsh.llm.endpoint import DIALECTS, default_dialect, endpoint_for_url
from dsh.llm.exchange_ring import DEFAULT_RING_BYTES, MAX_RING_BYTES
from dsh.llm.network import environment_proxy
from dsh.llm.redact import MIN_SECRET_CHARS, environment_secrets, redact_url, url_secrets
from dsh.repl.lazy import entry
from dsh.repl.profiles import check_profiles, select_profile
from dsh.repl.project_config import ProjectConfig, project_layer, read_project

if TYPE_CHECKING:
    from dsh.agent_loop.hooks import HookSpec
    from dsh.agent_loop.mcp.config import McpServerConfig  # read only with servers configured (_check_mcp_servers)
    from dsh.llm.models import ModelSettings  # read only with [models] tables (repl/model_tables.py)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "KNOWN_KEYS",
    "Config",
    "ConfigError",
    "add_endpoint_flags",
    "check_sandbox",
    "config_file_path",
    "history_path",
    "load_config",
    "state_dir",
]

REASONING_EFFORTS = ("low", "high", "max")

KNOWN_KEYS = frozenset(
    {
        "api_key",
        "base_url",
        "model",
        "max_tokens",
        "thinking",
        "reasoning_effort",
        "stream_idle_timeout",
        "first_token_timeout",
        "prompt_hook",
        "max_retries",
        "proxy",
        "subagents",
        "mcp_servers",
        "system_prompt",
        "system_prompt_append",
        "models",
        "allow_edits",
        "record",
        "report_ring_bytes",
        "auto_compact",
        "markdown",
        "sandbox",
        "sandbox_network",
        "permission_mode",
        "dialect",
        "max_parallel",
        "max_cost",
        "hooks",
        "claude_settings",
        "auto_continue",
        "max_continuations",
        "vi_mode",
        "keep_images",
        "profiles",
        "web", "web_allow",
    }
)


# A usage or configuration problem: the process exits 2 with one clear line. It is the one settings error, which
# the readers of every table raise (agent_loop/settings.py), so a bad [mcp_servers.NAME] stops dsh the same way.
ConfigError = SettingsError


@dataclass(frozen=True, slots=True)
class Config:
    api_key: str | None = None
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    max_tokens: int | None = None
    thinking: bool | None = None
    reasoning_effort: str | None = None
    stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT
    first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT
    prompt_hook: str | list[str] | None = None
    max_retries: int | None = None  # retries of transient failures per request (None: the policy's default)
    # ``[subagents.NAME]`` tables, passed through untouched for the subagent registry.
    subagents: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ``[mcp_servers.NAME]`` tables, read at load (agent_loop/mcp/config.py; docs/mcp.md).
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    system_prompt: str | None = None  # replaces the built-in system prompt (docs/configuration.md)
    system_prompt_append: str | None = None  # follows the project instructions
    models: dict[str, ModelSettings] = field(default_factory=dict)  # per-model context window and prices
    allow_edits: bool = False  # piped and -p runs may write files in the working tree without asking
    auto_compact: bool = False  # CONTEXT_WINDOW_EXCEEDED: one compaction and one retry (docs/compaction.md)
    markdown: bool = True  # render assistant markdown on a colour terminal (docs/markdown.md)
    proxy: str | None = None  # the proxy that carries requests: --proxy, HTTPS_PROXY & co, or the file
    sandbox: str | None = None  # "bwrap": run_shell under bubblewrap; dsh will not start without it working
    sandbox_network: bool = False  # the sandbox keeps the network (docs/safety.md)
    permission_mode: str = "default"  # default | plan | accept-edits | auto (docs/safety.md, "Permission modes")
    record: str | None = None  # write a masked wire trace of every model exchange here (docs/record-replay.md)
    report_ring_bytes: int = DEFAULT_RING_BYTES  # the last exchanges kept for /report (docs/reporting.md); 0: off
    dialect: str = DIALECTS[0]  # deepseek | openai; unset: by base_url's host (docs/endpoints.md, "Dialects")
    max_parallel: int = 0  # model requests one dsh and its child dsh subagents run at once; 0: no bound
    max_cost: float | None = None  # US dollars one -p run or session may spend (agent_loop/budget.py); None: no cap
    hooks: tuple[HookSpec, ...] = ()  # [[hooks.EVENT]] tables, checked at load (docs/hooks.md)
    claude_settings: bool = False  # the project's .claude/settings.json hooks run too (docs/hooks.md)
    # A reply cut after its text is continued by prefix completion, at most this often a step (deepseek dialect;
    # agent_loop/continuation.py); auto_continue: a reply stopped at the output-token limit is continued too.
    max_continuations: int = DEFAULT_MAX_CONTINUATIONS
    auto_continue: bool = False
    vi_mode: bool = False  # vi key bindings at the prompt; /vim toggles them (docs/prompt.md)
    web: bool = False  # the model gets web_fetch (docs/tools.md, "The web: web_fetch and web_search")
    web_allow: tuple[str, ...] = ()  # hosts web_fetch fetches without asking, private addresses included
    keep_images: bool = False  # an image's bytes go into the session log and a report, not only its hash
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # [profiles.NAME] (repl/profiles.py)
    profile: str | None = None  # the one --profile or DSH_PROFILE picked; /profile NAME changes it
    config_path: Path | None = None  # the file that was read, if any
    project: ProjectConfig | None = None  # the project's .dsh/config.toml, if read (dsh.repl.project_config)
    warnings: tuple[str, ...] = ()
    # Where base_url, api_key and proxy came from, in words a fix line can name (docs/reliability.md).
    sources: dict[str, str] = field(default_factory=dict)
    # Values of this process's environment whose variable names look secret (GITHUB_TOKEN, ...), and those an
    # MCP server's headers name (``${NAME}``).
    environment_secrets: tuple[str, ...] = ()

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every value masked wherever dsh shows, logs or hands on text (docs/architecture.md, "Redaction")."""
        proxy = url_secrets(self.proxy) if self.proxy else ()
        own = ((self.api_key,) if self.api_key else ()) + url_secrets(self.base_url) + proxy
        children: list[str] = []
        for table in self.subagents.values():
            env = table.get("env") if isinstance(table, Mapping) else None
            if isinstance(env, Mapping):
                children.extend(environment_secrets(env, min_chars=MIN_SECRET_CHARS))
        for server in self.mcp_servers.values():  # a server's env and literal header values: never shown
            children.extend(value for value in (*server.env.values(), *server.headers.values())
                            if len(value) >= MIN_SECRET_CHARS and "${" not in value)
        return tuple(dict.fromkeys((*own, *children, *self.environment_secrets)))


def _xdg(env: Mapping[str, str], variable: str, fallback: str) -> Path:
    value = env.get(variable, "")
    # The XDG spec says relative values are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path(env.get("HOME") or os.path.expanduser("~")) / fallback


def config_file_path(env: Mapping[str, str]) -> Path:
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / "dsh" / "config.toml"


def state_dir(env: Mapping[str, str]) -> Path:
    return _xdg(env, "XDG_STATE_HOME", ".local/state") / "dsh"


def history_path(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "history"


# --- value checks: the readers of agent_loop/settings.py (the messages name the key and never print a secret) ---


def _check_str(key: str, value: object, where: str) -> str:
    return settings.string(At(where), key, value, strip=True)


def _check_url(key: str, value: object, where: str) -> str:
    url = _check_str(key, value, where)
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise At(where).error(key, f"must be an http:// or https:// URL, got {redact_url(url)!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
        port_ok = True
    except ValueError:
        port_ok = False
    if not port_ok:  # raised outside the handler, so the chain is this one line
        raise At(where).error(key, f"has an invalid port (use 1-65535), got {redact_url(url)!r}")
    return url


_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


def _check_proxy(key: str, value: object, where: str) -> str:
    url = _check_str(key, value, where)
    if "://" not in url:
        url = "http://" + url  # httpx reads a bare host:port so
    try:
        parts = urlsplit(url)
        ok = parts.scheme in _PROXY_SCHEMES and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a bad port
        port_ok = True
    except ValueError:
        ok, port_ok = True, False
    if not port_ok:
        raise At(where).error(key, f"is a proxy URL with an invalid port (use 1-65535), got {redact_url(url)!r}")
    if not ok:
        raise At(where).error(key, f"must be a proxy URL (http, https, socks5 or socks5h), got {redact_url(url)!r}")
    return url


def _check_positive_int(key: str, value: object, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():  # from the environment or a flag
        value = int(value.strip())
    return int(settings.number(At(where), key, value, what="a positive integer", at_least=1, integer=True))


def _check_retries(key: str, value: object, where: str) -> int:
    return int(settings.number(At(where), key, value, what="an integer from 0 to 10", at_least=0, at_most=10,
                               integer=True))


def _check_ring_bytes(key: str, value: object, where: str) -> int:
    return int(settings.number(At(where), key, value, what=f"an integer from 0 to {MAX_RING_BYTES} (64 MiB)",
                               at_least=0, at_most=MAX_RING_BYTES, integer=True))


def _check_seconds(key: str, value: object, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    return float(settings.number(At(where), key, value, what="a positive number of seconds", above=0))


def _check_thinking(key: str, value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("enabled", "disabled", "true", "false", "on", "off"):
        return value.lower() in ("enabled", "true", "on")
    raise At(where).error(key, f"must be true/false (or enabled/disabled), got {value!r:.40}")


def _check_bool(key: str, value: object, where: str) -> bool:
    return settings.boolean(At(where), key, value)


def _check_effort(key: str, value: object, where: str) -> str:
    return settings.enum(At(where), key, value, REASONING_EFFORTS)


def _check_hook(key: str, value: object, where: str) -> str | list[str]:
    """A shell command string, or an argv list of strings."""
    if isinstance(value, list) and value and all(isinstance(item, str) and item for item in value):
        return list(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise At(where).error(key, "must be a command string or a non-empty list of strings")


def _check_subagents(key: str, value: object, where: str) -> dict[str, dict[str, Any]]:
    """A table of ``[key.NAME]`` tables, each passed on as it is (the subagent providers read them)."""
    if not isinstance(value, Mapping):
        raise At(where).error(f"[{key}]", f"must be a table of [{key}.NAME] tables")
    return {str(name): dict(settings.table(At(where, f"{key}.{name}"), None, table)) for name, table in value.items()}


def _check_mcp_servers(key: str, value: object, where: str) -> dict[str, McpServerConfig]:
    """``[mcp_servers.NAME]`` tables, read as the session's MCP manager uses them, so a bad one names the file it
    is in (docs/mcp.md)."""
    tables = _check_subagents(key, value, where)
    if not tables:
        return {}
    from dsh.agent_loop.mcp.config import parse_servers  # only with servers configured; loads no manager, no SDK

    return parse_servers(tables, where)


def _models() -> ModuleType:
    import dsh.llm.models  # only with a cap: the usage module costs the first prompt

    return dsh.llm.models


def _check_models(key: str, value: object, where: str) -> dict[str, ModelSettings]:
    """``[models."NAME"]`` tables (repl/model_tables.py, loaded only with such tables: repl/lazy.py)."""
    return entry("dsh.repl.model_tables", "check_models")(key, _check_subagents(key, value, where), where)


def _check_text(key: str, value: object, where: str) -> str:
    if not isinstance(value, str):
        raise At(where).error(key, "must be a string")
    return value


def _check_sandbox(key: str, value: object, where: str) -> str | None:
    """``sandbox``: "bwrap" or "none" (docs/safety.md); whether bwrap works here is checked at start-up."""
    return None if settings.enum(At(where), key, value, ("bwrap", "none")) == "none" else "bwrap"


PERMISSION_MODES = ("default", "plan", "accept-edits", "auto")  # dsh.agent_loop.permissions.Mode's values


def _check_permission_mode(key: str, value: object, where: str) -> str:
    """``permission_mode`` (docs/safety.md); that auto has a sandbox is checked once every value is known."""
    return settings.enum(At(where), key, value, PERMISSION_MODES)


def _check_auto_has_sandbox(values: Mapping[str, Any], sources: Mapping[str, str], path: Path) -> None:
    """auto runs commands without asking only because they run sandboxed: without a sandbox configured dsh does
    not start (never a silent unsandboxed auto; docs/safety.md). Whether the sandbox works is checked after."""
    if values.get("permission_mode") != "auto" or values.get("sandbox") is not None:
        return
    if sources.get("permission_mode", "").endswith("(flag)"):
        raise ConfigError(f'--permission-mode auto needs a sandbox: set sandbox = "bwrap" in {path} (docs/safety.md)')
    raise ConfigError(f'config file {path}: permission_mode = "auto" needs a sandbox: set sandbox = "bwrap" in it '
                      "(docs/safety.md)")


def check_sandbox(config: Config) -> None:
    """The configured sandbox works here, or dsh does not start: never a silent unsandboxed run (docs/safety.md)."""
    from dsh.agent_loop.sandbox import sandbox_problem  # only with a sandbox configured: one test run of bwrap

    problem = sandbox_problem()
    if problem is not None:
        raise ConfigError(f"config file {config.config_path}: {problem}")


def _check_dialect(key: str, value: object, where: str) -> str:
    """``dialect``: how dsh speaks to the endpoint (docs/endpoints.md, "Dialects")."""
    return settings.enum(At(where), key, value.strip().lower() if isinstance(value, str) else value, DIALECTS)


def _check_max_parallel(key: str, value: object, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():  # from the environment
        value = int(value.strip())
    return int(settings.number(At(where), key, value, what="an integer from 0 (no bound) to 10000", at_least=0,
                               at_most=10000, integer=True))


def _check_max_continuations(key: str, value: object, where: str) -> int:
    return int(settings.number(At(where), key, value, what="an integer from 0 (never) to 10", at_least=0,
                               at_most=10, integer=True))


def _check_hooks(key: str, value: object, where: str) -> tuple[HookSpec, ...]:
    """``[[hooks.EVENT]]`` tables (docs/hooks.md); /hooks names each one's line in the file."""
    parse_hooks = entry("dsh.agent_loop.hooks", "parse_hooks")  # only with hooks configured (repl/lazy.py)
    return parse_hooks(value, where, Path(where.removeprefix("config file ")) if where.startswith("config") else None)


def _check_max_cost(key: str, value: object, where: str) -> float:
    """``max_cost``: US dollars (``0.50``; ``$0.50`` from a flag or the environment)."""
    if isinstance(value, str):
        try:
            value = float(value.strip().removeprefix("$"))
        except ValueError:
            pass
    return float(settings.number(At(where), key, value, what="an amount of US dollars above 0 (at most 1000000)",
                                 above=0, at_most=1_000_000))


def _check_cap_priced(values: Mapping[str, Any], sources: Mapping[str, str], path: Path) -> None:
    """A cap holds only with a price for the model: without one dsh does not start (never an unenforced cap)."""
    cap = values.get("max_cost")
    model = str(values.get("model", DEFAULT_MODEL))[:100]
    info = None if cap is None else _models().model_info(model, values.get("models"))
    if cap is None or (info is not None and info.peak is not None):
        return
    where = sources.get("model", "the default")
    raise ConfigError(f"{sources['max_cost']} caps spending, but model {model} (set by {where}) has no known price: "
                      f'set input_cache_hit, input_cache_miss and output in [models."{model}"] in {path}')


def _check_record(key: str, value: object, where: str) -> str:
    """A trace path; ``{time}`` (UTC) and ``{pid}`` make one file per run, so two sessions never share one."""
    path = os.path.expanduser(_check_str(key, value, where))
    return path.replace("{time}", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())).replace("{pid}", str(os.getpid()))


_CHECKS = {
    "api_key": _check_str,
    "base_url": _check_url,
    "model": _check_str,
    "max_tokens": _check_positive_int,
    "thinking": _check_thinking,
    "reasoning_effort": _check_effort,
    "stream_idle_timeout": _check_seconds,
    "first_token_timeout": _check_seconds,
    "prompt_hook": _check_hook,
    "max_retries": _check_retries,
    "proxy": _check_proxy,
    "subagents": _check_subagents,
    "mcp_servers": _check_mcp_servers,
    "system_prompt": _check_text,
    "system_prompt_append": _check_text,
    "models": _check_models,
    "allow_edits": _check_bool,
    "record": _check_record,
    "report_ring_bytes": _check_ring_bytes,
    "auto_compact": _check_thinking,  # the same true/false (or enabled/disabled) switch
    "markdown": _check_thinking,
    "sandbox": _check_sandbox,
    "sandbox_network": _check_bool,
    "permission_mode": _check_permission_mode,
    "dialect": _check_dialect,
    "max_parallel": _check_max_parallel,
    "max_cost": _check_max_cost,
    "hooks": _check_hooks,
    "claude_settings": _check_bool,
    "auto_continue": _check_bool,
    "max_continuations": _check_max_continuations,
    "vi_mode": _check_bool,
    "web": _check_thinking,  # the same true/false switch
    "web_allow": lambda key, value, where: settings.string_list(At(where), key, value, non_empty=True),
    "keep_images": _check_bool,
}
_CHECKS["profiles"] = partial(check_profiles, checks=_CHECKS)  # each value checked as its top-level key is


# The settings the environment gives, by variable: above the file, below the flags.
_ENVIRONMENT = (("DEEPSEEK_API_KEY", "api_key"), ("DEEPSEEK_BASE_URL", "base_url"), ("DSH_MODEL", "model"),
                ("DSH_DIALECT", "dialect"), ("DSH_MAX_PARALLEL", "max_parallel"), ("DSH_MAX_COST", "max_cost"),
                ("DSH_WEB", "web"))


def _tomllib() -> ModuleType:
    import tomllib  # only when there is a file (the user's or the project's): the parser costs ~10 ms

    return tomllib


def _read_file(path: Path) -> dict[str, Any]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or type(exc).__name__}")
    tomllib = _tomllib()
    try:
        with handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML") from exc  # the chain adds the parser's words
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not valid UTF-8")
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or type(exc).__name__}")


def _readable_by_others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & 0o044)
    except OSError:
        return False


def add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that pick the endpoint and the model, one way for every command that talks to one (the REPL and
    ``-p``, ``dsh acp``); :func:`load_config` ranks what they give over the environment and the file."""
    parser.add_argument("--model", help=f"model name (default {DEFAULT_MODEL})")
    parser.add_argument("--base-url", dest="base_url", metavar="URL", help="API base URL")
    parser.add_argument("--proxy", metavar="URL", help="proxy for API requests (default: HTTPS_PROXY & co)")
    parser.add_argument("--config", metavar="PATH", help="config file (default $XDG_CONFIG_HOME/dsh/config.toml)")
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, metavar="N", help="output-token cap per step")
    parser.add_argument("--thinking", choices=("enabled", "disabled"), help="DeepSeek thinking mode")
    parser.add_argument("--reasoning-effort", dest="reasoning_effort", choices=("low", "high", "max"))
    parser.add_argument("--profile", metavar="NAME", help="a [profiles.NAME] table of config.toml (or DSH_PROFILE)")
    parser.add_argument("--dialect", choices=DIALECTS,
                        help="deepseek (DeepSeek's extensions and answers) or openai (default: by the host)")


def load_config(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    require_key: bool = True,
    config_path: Path | None = None,
    cwd: Path | None = None,
) -> Config:
    """Merge flags > env > project file (of ``cwd``'s repository) > file > defaults; ``flags``: those given."""
    explicit_path = config_path is not None
    path = config_path if config_path is not None else config_file_path(env)
    if explicit_path and not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    raw = _read_file(path)
    where = f"config file {path}"
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    warnings: list[str] = []
    for key, value in raw.items():
        check = _CHECKS.get(key)
        if check is None:
            warnings.append(f"{where}: unknown key {key!r} ignored")
            continue
        values[key] = check(key, value, where)
        sources[key] = f"{key} in {path}"
    if "api_key" in raw and _readable_by_others(path):
        # The key in plain text is the user's choice; a key others can read is a mistake to point out.
        warnings.append(f"{path} holds api_key and is readable by others; chmod 600 {path}")
    project = project_layer(read_project(cwd, env, warnings, _tomllib), _CHECKS, values, sources, warnings)
    select_profile(flags.get("profile"), env, values, sources, path)  # above the files, below env and flags
    for variable, key in _ENVIRONMENT:
        value = env.get(variable, "")
        if value.strip():
            values[key] = _CHECKS[key](variable, value, "environment")
            sources[key] = f"{variable} (environment)"
    for key, value in flags.items():
        if value is not None and key in _CHECKS:
            values[key] = _CHECKS[key](key, value, "command line")
            sources[key] = f"--{key.replace('_', '-')} (flag)"
    if "proxy" not in flags or flags.get("proxy") is None:
        # The proxy variables httpx would honour for this base URL; they beat the file, as env does.
        found = environment_proxy(values.get("base_url", DEFAULT_BASE_URL), env)
        if found is not None:
            values["proxy"] = _check_proxy(found[1], found[0], "environment")
            sources["proxy"] = f"{found[1]} (environment)"
    _check_auto_has_sandbox(values, sources, path)
    _check_cap(values, sources, path, project, warnings)
    values.setdefault("dialect", default_dialect(values.get("base_url", DEFAULT_BASE_URL)))  # by the host
    if require_key and not values.get("api_key"):
        endpoint = endpoint_for_url(values.get("base_url", DEFAULT_BASE_URL))
        which = "DeepSeek API key" if endpoint.is_deepseek else f"API key for {endpoint}"
        raise ConfigError(f"no {which}: set DEEPSEEK_API_KEY (or api_key in {path}), or try `dsh --demo`")
    return Config(
        **values,
        config_path=path if raw else None,
        project=project,
        warnings=(*warnings, *_web_lines(values)),
        sources=sources,
        environment_secrets=(*environment_secrets(env), *_header_variables(values.get("mcp_servers"), env)),
    )


def _web_lines(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The start line of ``web = true`` on an endpoint without DeepSeek's search (docs/tools.md, "The web")."""
    if not values.get("web") or values.get("dialect") == DIALECTS[0]:  # DeepSeek's search: tools/web_deepseek.py
        return ()
    return ("web_search: this endpoint has no server-side search; web_fetch only",)


def _check_cap(values: dict[str, Any], sources: dict[str, str], path: Path, project: ProjectConfig | None,
               warnings: list[str]) -> None:
    try:
        _check_cap_priced(values, sources, path)
    except ConfigError:
        if project is None or sources.get("max_cost") != f"max_cost in {project.where}":
            raise
        del values["max_cost"], sources["max_cost"]  # a repository's cap on an unpriced model must not stop dsh
        warnings.append(f"{project.where}: max_cost is ignored: the model has no known price")


def _header_variables(servers: Mapping[str, McpServerConfig] | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The values of the variables MCP header values name (``${NAME}``), whatever the names: a server's
    bearer token from ``$MY_HEADER`` is masked in dsh.log from the start, like every other secret."""
    if not servers:
        return ()
    return tuple(value for server in servers.values() for value in server.header_secrets(env))
