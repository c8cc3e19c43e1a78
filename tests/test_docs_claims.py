"""The prose claims of README.md and docs/ that can be checked against the code (issue 27 item 4).

The transcripts and tables are checked by tests/test_docs.py (they are regenerated from real runs); these
are the sentences written by hand that state a fact the code decides: the codes that are retried, the
documents there are, the name ``pip install`` takes, the subcommands dsh has.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dsh.agent_loop.retry import RETRYABLE_CODES
from dsh.llm._version import DISTRIBUTION, install_line

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = sorted((REPO / "docs").glob("*.md"))
PRODUCT = [path for layer in ("llm", "agent_loop", "repl") for path in (REPO / layer).rglob("*.py")]

# `pip install X`, `pipx install X`, `pip uninstall X` (flags skipped); X as written, quotes included.
_INSTALL = re.compile(r"\bpipx? +(?:un)?install +(?:-[-\w]+ +)*('[^']*'|\"[^\"]*\"|[^\s`'\")]+)")


def _name(spec: str) -> str:
    """The distribution a spec names: quotes, extras and a version bound dropped."""
    return re.split(r"[\[<>=~! ]", spec.strip("'\""), maxsplit=1)[0]


def test_the_readme_lists_exactly_the_retried_codes() -> None:
    match = re.search(r"Transient failures \(([^)]*)\) are retried", README)
    assert match is not None, "README.md: the sentence that lists the retried codes is gone"
    listed = re.findall(r"`([A-Z_]+)`", match.group(1))
    assert sorted(listed) == sorted(RETRYABLE_CODES)


def test_the_readme_links_every_document() -> None:
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)(?:#[\w-]+)?\)", README))
    assert linked == {f"docs/{path.name}" for path in DOCS}
    table = README.split("## Read more", 1)[1]
    in_table = set(re.findall(r"^\| \[(docs/[\w-]+\.md)\]", table, re.MULTILINE))
    assert in_table == linked  # and each has its row in the table of documents


def test_the_distribution_is_named_once() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    assert install_line("acp") == f"pip install '{DISTRIBUTION}[acp]'"
    assert install_line() == f"pip install {DISTRIBUTION}"


@pytest.mark.parametrize("path", [REPO / "README.md", *DOCS, *PRODUCT], ids=lambda path: str(path.relative_to(REPO)))
def test_every_install_line_names_the_distribution(path: Path) -> None:
    """No `pip install dsh` (PyPI's dsh is another project): dsh's own name is DISTRIBUTION or the clone (`.`)."""
    text = path.read_text(encoding="utf-8")
    ours = [spec for spec in _INSTALL.findall(text) if re.fullmatch(r"dsh([-_.]\w+)*", _name(spec))]
    assert [spec for spec in ours if _name(spec) != DISTRIBUTION] == []
    assert not re.search(r"\bdsh\[\w+\]", text.replace(f"{DISTRIBUTION}[", "")), "an extra of the wrong name"


def test_the_readme_installs_with_a_venv_and_pipx_and_says_how_to_uninstall() -> None:
    assert "python3 -m venv " in README and "pipx install ." in README
    assert f"pipx uninstall {DISTRIBUTION}" in README and f"pip uninstall {DISTRIBUTION}" in README


def _readme_subcommands() -> set[str]:
    """Every ``dsh WORD`` in the README's code (blocks and spans) whose WORD is not a flag or a prompt."""
    code = re.findall(r"```[a-z]*\n(.*?)```", README, re.DOTALL) + re.findall(r"`([^`\n]+)`", README)
    found = set()
    for chunk in code:
        for match in re.finditer(r"(?:^|\$ |\| |&& )dsh ([a-z][a-z-]*)\b", chunk, re.MULTILINE):
            found.add(match.group(1))
    return found


def test_the_readme_names_subcommands() -> None:
    assert {"doctor", "sessions", "serve", "replay-server"} <= _readme_subcommands()


@pytest.mark.parametrize("subcommand", sorted(_readme_subcommands()))
def test_every_subcommand_the_readme_names_exists(subcommand: str) -> None:
    result = subprocess.run([sys.executable, "-m", "dsh.repl", subcommand, "--help"], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr[-600:]
    assert result.stdout.startswith(f"usage: dsh {subcommand}"), result.stdout[:200]


def test_the_licence_is_the_one_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    licence = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert licence.startswith("MIT License\n\nCopyright (c) 2026 the dsh authors\n")


def test_the_failure_kit_marks_every_scenario_that_needs_an_extra() -> None:
    from dsh.repl.demo.catalogue import SCENARIOS

    kit = (REPO / "docs" / "failure-kit.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w-]+)` \| (.*)$", kit, re.MULTILINE))
    for scenario in SCENARIOS.values():
        marked = f"(needs the `{scenario.extra}` extra)" in rows[scenario.name]
        assert marked == (scenario.extra is not None), scenario.name


def test_the_example_config_of_docs_configuration_is_a_config_dsh_accepts(tmp_path: Path) -> None:
    from dsh.repl.config import load_config

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", text, re.S)
    assert example is not None, "docs/configuration.md: the example config is gone"
    path = tmp_path / "config.toml"
    path.write_text(example.group(1), encoding="utf-8")
    config = load_config({}, {"HOME": str(tmp_path)}, config_path=path)  # every key known, every value valid
    assert config.record and config.sandbox == "bwrap" and "files" in config.mcp_servers
