"""``allow_edits``: the config key and the ``--allow-edits`` flag (flags win, a bad value is exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.repl.config import ConfigError, load_config


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_allow_edits_is_off_by_default_and_read_from_the_file_and_the_flag(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert load_config({}, env, require_key=False).allow_edits is False
    on = load_config({}, env, require_key=False, config_path=_config(tmp_path, "allow_edits = true\n"))
    assert on.allow_edits is True and not on.warnings
    flag = load_config({"allow_edits": True}, env, require_key=False,
                       config_path=_config(tmp_path, "allow_edits = false\n"))
    assert flag.allow_edits is True and flag.sources["allow_edits"] == "--allow-edits (flag)"


def test_a_bad_allow_edits_value_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = _config(tmp_path, 'allow_edits = "yes"\n')
    with pytest.raises(ConfigError) as caught:
        load_config({}, {"HOME": str(tmp_path)}, require_key=False, config_path=path)
    assert str(caught.value) == f"config file {path}: allow_edits must be true or false, got 'yes'"
