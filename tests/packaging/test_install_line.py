"""The install line dsh prints for a missing extra matches how dsh was installed (llm/_version.py): pipx adds
packages to its venv by name, so a pipx install is told ``pipx inject``; the names are pyproject.toml's."""

from __future__ import annotations

import tomllib
from pathlib import Path

from dsh.llm._version import DISTRIBUTION, EXTRA_PACKAGES, install_line

REPO = Path(__file__).resolve().parents[2]


def test_a_pipx_install_is_told_to_inject_the_extras_packages(tmp_path: Path) -> None:
    (tmp_path / "pipx_metadata.json").write_text("{}", encoding="utf-8")
    assert install_line("acp", prefix=str(tmp_path)) == "pipx inject dsh-agent agent-client-protocol"
    assert install_line("claude", prefix=str(tmp_path)) == "pipx inject dsh-agent claude-agent-sdk"
    assert install_line(prefix=str(tmp_path)) == "pipx install dsh-agent"


def test_a_pip_install_is_told_pip_install_with_the_extra(tmp_path: Path) -> None:
    assert install_line("mcp", prefix=str(tmp_path)) == "pip install 'dsh-agent[mcp]'"
    assert install_line(prefix=str(tmp_path)) == "pip install dsh-agent"


def test_the_packages_pipx_injects_are_the_extras_in_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    extras = project["optional-dependencies"]
    for extra, packages in EXTRA_PACKAGES.items():
        names = tuple(requirement.split(">")[0].split("<")[0].split("=")[0].strip() for requirement in extras[extra])
        assert names == packages, extra
