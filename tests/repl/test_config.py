"""Config precedence (flags > env > file > defaults), XDG paths, and clear errors that hide secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.llm import error_chain
from dsh.repl.config import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    ConfigError,
    config_file_path,
    history_path,
    load_config,
    state_dir,
)

KEY = "sk-testConfigKey000111222333"


def write_config(home: Path, text: str) -> dict[str, str]:
    path = home / "config" / "dsh" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return {"XDG_CONFIG_HOME": str(home / "config"), "HOME": str(home)}


def test_defaults(tmp_path: Path) -> None:
    config = load_config({}, {"HOME": str(tmp_path), "DEEPSEEK_API_KEY": KEY})
    assert config.base_url == DEFAULT_BASE_URL == "https://api.deepseek.com"
    assert config.model == DEFAULT_MODEL == "deepseek-flash"
    assert config.api_key == KEY and config.secrets == (KEY,)
    assert config.stream_idle_timeout == 300.0 and config.first_token_timeout == 600.0
    assert config.max_tokens is None and config.thinking is None and config.subagents == {}
    assert config.config_path is None


def test_xdg_paths(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": "/x/conf", "XDG_STATE_HOME": "/x/state"}
    assert config_file_path(env) == Path("/x/conf/dsh/config.toml")
    assert state_dir(env) == Path("/x/state/dsh")
    assert history_path(env) == Path("/x/state/dsh/history")
    relative = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": "rel", "XDG_STATE_HOME": ""}  # ignored per XDG
    assert config_file_path(relative) == tmp_path / ".config/dsh/config.toml"
    assert history_path(relative) == tmp_path / ".local/state/dsh/history"


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    env = write_config(
        tmp_path,
        """
api_key = "sk-fromFileKey0000000000000"
base_url = "http://127.0.0.1:9/v1"
model = "file-model"
max_tokens = 512
thinking = true
reasoning_effort = "high"
stream_idle_timeout = 30
first_token_timeout = 60.5
prompt_hook = ["/bin/true"]
max_retries = 0

[subagents.probe]
provider = "acp"
command = "python"
args = ["-m", "dsh.repl.demo.acp_agent"]
env = { A = "1" }
""",
    )
    config = load_config({}, env)
    assert config.api_key == "sk-fromFileKey0000000000000"
    assert (config.base_url, config.model, config.max_tokens) == ("http://127.0.0.1:9/v1", "file-model", 512)
    assert (config.thinking, config.reasoning_effort) == (True, "high")
    assert (config.stream_idle_timeout, config.first_token_timeout) == (30.0, 60.5)
    assert config.prompt_hook == ["/bin/true"] and config.max_retries == 0
    assert config.subagents == {
        "probe": {"provider": "acp", "command": "python", "args": ["-m", "dsh.repl.demo.acp_agent"], "env": {"A": "1"}}
    }
    assert config.config_path == tmp_path / "config/dsh/config.toml"

    env |= {"DEEPSEEK_API_KEY": KEY, "DEEPSEEK_BASE_URL": "https://env.example/v1", "DSH_MODEL": "env-model"}
    config = load_config({}, env)
    assert (config.api_key, config.base_url, config.model) == (KEY, "https://env.example/v1", "env-model")

    config = load_config({"model": "flag-model", "base_url": "http://127.0.0.1:1", "max_tokens": 9,
                          "thinking": "disabled", "reasoning_effort": "max"}, env)
    assert (config.model, config.base_url, config.max_tokens) == ("flag-model", "http://127.0.0.1:1", 9)
    assert (config.thinking, config.reasoning_effort) == (False, "max")


def test_empty_env_values_count_as_unset(tmp_path: Path) -> None:
    env = write_config(tmp_path, 'api_key = "sk-fileKey00000000000000000"\nmodel = "m"\n')
    config = load_config({}, env | {"DEEPSEEK_API_KEY": " ", "DSH_MODEL": ""})
    assert config.api_key == "sk-fileKey00000000000000000" and config.model == "m"


def test_missing_key_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({}, {"HOME": str(tmp_path)})
    assert caught.value.code == "CONFIG"
    assert "DEEPSEEK_API_KEY" in str(caught.value) and "dsh --demo" in str(caught.value)
    assert load_config({}, {"HOME": str(tmp_path)}, require_key=False).api_key is None


def test_bad_toml_is_one_clear_line(tmp_path: Path) -> None:
    env = write_config(tmp_path, "model = \n")
    with pytest.raises(ConfigError) as caught:
        load_config({}, env, require_key=False)
    path = tmp_path / "config/dsh/config.toml"
    # The parser's words once, after the line's own (they were said twice: in the message and as its cause).
    assert error_chain(caught.value) == f"config file {path} is not valid TOML: Invalid value (at line 1, column 9)"


def test_not_utf8(tmp_path: Path) -> None:
    env = write_config(tmp_path, "")
    (tmp_path / "config/dsh/config.toml").write_bytes(b'model = "\xff"\n')
    with pytest.raises(ConfigError, match="not valid"):
        load_config({}, env, require_key=False)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("max_tokens = -1", "max_tokens must be a positive integer, got -1"),
        ("max_tokens = true", "max_tokens must be a positive integer"),
        ('thinking = "maybe"', "thinking must be true/false"),
        ('reasoning_effort = "medium"', "reasoning_effort must be one of low, high, max"),
        ("stream_idle_timeout = 0", "stream_idle_timeout must be a positive number of seconds"),
        ("first_token_timeout = nan", "first_token_timeout must be a positive number of seconds"),
        ('base_url = "ftp://x"', "base_url must be an http:// or https:// URL"),
        ('model = ""', "model must be a non-empty string"),
        ("subagents = 3", "[subagents] must be a table"),
        ("[subagents]\nprobe = 3", "[subagents.probe] must be a table"),
        ("max_retries = 11", "max_retries must be an integer from 0 to 10"),
        ("prompt_hook = []", "prompt_hook must be a command string or a non-empty list"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, text: str, fragment: str) -> None:
    env = write_config(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config({}, env, require_key=False)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(f"config file {tmp_path / 'config/dsh/config.toml'}: ")


def test_bad_url_error_does_not_echo_credentials(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "DEEPSEEK_BASE_URL": "ftp://user:hunter2pw@host/v1?key=hunter3q"}
    with pytest.raises(ConfigError) as caught:
        load_config({}, env, require_key=False)
    assert "hunter2pw" not in str(caught.value) and "hunter3q" not in str(caught.value)
    assert "DEEPSEEK_BASE_URL" in str(caught.value)


def test_a_bad_api_key_value_is_never_echoed(tmp_path: Path) -> None:
    env = write_config(tmp_path, "api_key = 12345678901234")
    with pytest.raises(ConfigError) as caught:
        load_config({}, env)
    assert "12345678901234" not in str(caught.value) and "api_key" in str(caught.value)


def test_unknown_keys_warn(tmp_path: Path) -> None:
    env = write_config(tmp_path, 'modle = "typo"\n')
    config = load_config({}, env, require_key=False)
    assert config.warnings == (f"config file {tmp_path / 'config/dsh/config.toml'}: unknown key 'modle' ignored",)


def test_explicit_config_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({}, {"HOME": str(tmp_path)}, require_key=False, config_path=tmp_path / "nope.toml")
    other = tmp_path / "other.toml"
    other.write_text('model = "other"\n')
    assert load_config({}, {"HOME": str(tmp_path)}, require_key=False, config_path=other).model == "other"


def test_an_out_of_range_port_is_named_as_the_problem(tmp_path) -> None:
    from dsh.repl.config import ConfigError, _check_url

    with pytest.raises(ConfigError) as caught:
        _check_url("base_url", "http://u:pw@127.0.0.1:99999/v1?k=secretvalue", "command line")
    assert str(caught.value) == (
        "command line: base_url has an invalid port (use 1-65535), got 'http://***@127.0.0.1:99999/v1'"
    )


def test_auto_compact_and_markdown_switches(tmp_path: Path) -> None:
    defaults = load_config({}, {"HOME": str(tmp_path)}, require_key=False)
    assert (defaults.auto_compact, defaults.markdown) == (False, True)
    env = write_config(tmp_path, 'auto_compact = true\nmarkdown = "off"\n')
    config = load_config({}, env, require_key=False)
    assert (config.auto_compact, config.markdown) == (True, False)
    (tmp_path / "config/dsh/config.toml").write_text("auto_compact = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config({}, env, require_key=False)
    assert "auto_compact must be true/false" in str(caught.value)


def test_mcp_secrets_are_known_at_load_including_header_variables_of_any_name(tmp_path: Path) -> None:
    """dsh.log's filter is built from the config's secrets before any server starts: a bearer token taken from
    a variable whose name does not look secret is among them, and so are the tables' literal values."""
    token, literal = "plainNamedHeaderValue42", "literalEnvValue0000"
    env = write_config(tmp_path, '[mcp_servers.h]\nurl = "http://127.0.0.1:9/mcp"\n'
                                 'headers = { Authorization = "Bearer ${MY_HEADER}" }\n'
                                 '[mcp_servers.s]\ncommand = "true"\nenv = { NOTE = "literalEnvValue0000" }\n')
    config = load_config({}, {**env, "MY_HEADER": token, "UNUSED": "notReferencedAnywhere"}, require_key=False)
    assert token in config.secrets and literal in config.secrets
    assert "notReferencedAnywhere" not in config.secrets
