"""The one family of settings readers (agent_loop/settings.py): each reader's check, and the one error form
``<source>: [<table>] <key> <problem>`` that every table's problem takes (docs/configuration.md)."""

from __future__ import annotations

import pytest

from dsh.agent_loop import settings
from dsh.agent_loop.mcp.config import parse_servers
from dsh.agent_loop.settings import At, SettingsError
from dsh.agent_loop.subagent import SubagentConfigError, build_provider, config_number
from dsh.llm.codes import ErrorCode

FILE = At("config file /home/u/.config/dsh/config.toml", "mcp_servers.fx")


def _said(call: object) -> str:
    assert callable(call)
    with pytest.raises(SettingsError) as caught:
        call()
    assert caught.value.code == ErrorCode.CONFIG
    return str(caught.value)


def test_the_error_names_the_file_the_table_and_the_key() -> None:
    assert _said(lambda: settings.number(FILE, "startup_timeout", "ten", what="a number of seconds above 0",
                                         above=0)) == (
        "config file /home/u/.config/dsh/config.toml: [mcp_servers.fx] startup_timeout must be a number of "
        "seconds above 0, got 'ten'")
    said = _said(lambda: settings.boolean(At("environment"), "X", "yes"))
    assert said == "environment: X must be true or false, got 'yes'"
    assert _said(lambda: settings.table(At(table="models.m"), None, 3)) == "[models.m] must be a table"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (float("nan"), "must be a positive integer, got nan"),
        (float("inf"), "must be a positive integer, got inf"),
        (True, "must be a positive integer, got True"),
        (1.5, "must be a positive integer, got 1.5"),
        (0, "must be a positive integer, got 0"),
        ("x" * 100, "must be a positive integer, got '" + "x" * 39),  # a value is cut at 40 characters
    ],
)
def test_a_number_is_finite_of_its_kind_and_in_range(value: object, problem: str) -> None:
    said = _said(lambda: settings.number(At(), "n", value, what="a positive integer", at_least=1, integer=True))
    assert said == f"n {problem}"


def test_each_reader_returns_the_typed_value() -> None:
    at = At()
    assert settings.number(at, "n", 3, what="x", at_least=1, at_most=3, integer=True) == 3
    assert settings.string(at, "s", "  v ", strip=True) == "v"
    assert settings.enum(at, "e", "b", ("a", "b", "c")) == "b"
    assert settings.string_list(at, "l", ["a", "b"]) == ("a", "b")
    assert settings.argv(at, "c", ["prog", "-x"]) == ("prog", "-x")
    assert settings.string_map(at, "env", {"K": "v"}) == {"K": "v"}


def test_strings_and_map_values_are_never_echoed() -> None:
    secret = "sk-aVerySecretValue0000000"
    for call in (lambda: settings.string(At(), "api_key", ""),
                 lambda: settings.string_map(At(), "env", {"TOKEN": secret + "\n"}),
                 lambda: settings.string_list(At(), "args", [secret, 3])):
        assert secret not in _said(call)
    assert _said(lambda: settings.string_map(At(), "env", {"TOKEN": secret + "\n"})) == (
        "env.TOKEN must be a string (no NUL or newline)")


def test_choices_are_said_as_a_pair_or_a_list() -> None:
    assert _said(lambda: settings.enum(At(), "approve", "yes", ("ask", "auto"))) == (
        "approve must be \"ask\" or \"auto\", got 'yes'")
    assert _said(lambda: settings.enum(At(), "effort", 3, ("low", "high", "max"))) == (
        "effort must be one of low, high, max, got 3")


def test_a_subagent_table_says_the_same_form_without_its_values() -> None:
    """A subagent's problem becomes its runs' result, which the model reads: no value is echoed there."""
    with pytest.raises(SubagentConfigError) as caught:
        config_number("probe", {"timeout": "sk-notANumberButSecret000"}, "timeout", None)
    assert str(caught.value) == "[subagents.probe] timeout must be a positive number"
    assert isinstance(caught.value, SettingsError)
    provider = build_provider("probe", {"provider": "acp", "command": "x", "permission": "sometimes"})
    assert provider.problem == '[subagents.probe] permission must be "allow" or "reject"'


def test_the_mcp_error_is_the_one_settings_error() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_servers({"x": {"command": "a", "enabled": "yes"}})
    assert caught.value.code == ErrorCode.CONFIG
