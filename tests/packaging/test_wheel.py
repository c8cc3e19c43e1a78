"""The wheel as a new user gets it: built from the source tree, installed into a fresh venv beside
``llm`` (simonw's CLI) and ``fixtures`` (testing-cabal) from PyPI, with no extras.

One wheel and one venv serve the module (building and installing is most of the cost); every check is
its own test. The venv is created without pip (``pip --python`` installs into it) and with
``--no-compile``; the dsh runs may write bytecode, so only the first run of a module compiles it.

Without PyPI the module skips with one line; under ``CI=true`` that is a failure instead.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh.llm._version import DISTRIBUTION, __version__
from dsh.repl.demo.catalogue import SCENARIOS
from dsh.repl.demo.delegation import DELEGATION_SCENARIOS, all_delegation_tables
from dsh.repl.demo.product_delegation import PRODUCT_SCENARIOS, all_product_tables
from tests.interrupted_child import run_interrupted
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("llm", "agent_loop", "repl")  # the folders whose modules install as dsh.<folder>
TEST_ONLY = ("fixtures", "tests", "bench")
HELLO = "Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1.\n"
# The extras the fresh venv does not have, by provider kind. (The Codex scenarios name their fake
# app-server as `command`, so they need no bundled binary.)
MISSING_EXTRAS = {"acp": "acp", "claude-code": "claude"}
_NETWORK_FAILURES = re.compile(
    r"Failed to establish a new connection|Name or service not known|Temporary failure in name resolution"
    r"|Network is unreachable|ConnectTimeoutError|ReadTimeoutError|ProxyError|\(from versions: none\)"
)
TOP = "dsh_top"  # the folder of dsh/py.typed, the one file of dsh/ itself
# all a build may read: no fixtures/, tests/, bench/
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", TOP, *LAYERS)


def _unavailable(what: str, output: str) -> None:
    """PyPI cannot be reached: skip with one line, but not under CI, where the check must run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: PyPI is unreachable, and CI must run the packaging tests\n{output[-2000:]}")
    pytest.skip(f"PyPI is unreachable here ({what}); the packaging tests need it")


def _run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 300, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


def _build_env() -> dict[str, str]:
    env = dict(os.environ)
    # With PYTHONDONTWRITEBYTECODE set, setuptools logs "warning: byte-compiling is disabled": a message
    # about this machine, not about the project; a user's build does not print it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


@dataclass(frozen=True)
class Built:
    wheel: Path
    output: str  # everything `python -m build` printed

    def names(self) -> list[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.namelist()


@dataclass(frozen=True)
class FreshVenv:
    root: Path
    home: Path

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.home),
            "XDG_STATE_HOME": str(self.home / "state"),
            "XDG_CONFIG_HOME": str(self.home / "config"),
            "LANG": "C.UTF-8",
        }

    def run(self, *argv: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return _run([self.bin(argv[0]), *argv[1:]], cwd=cwd or self.home, env=self.env(), timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel, built by `python -m build` (isolated, as a user's build is) from a copy of the product."""
    root = tmp_path_factory.mktemp("wheel-build")
    source = root / "src"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    result = _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(root / "dist"), str(source)],
                  env=_build_env())
    output = result.stdout + result.stderr
    if result.returncode != 0:
        if _NETWORK_FAILURES.search(output):
            _unavailable("installing the build backend", output)
        pytest.fail(f"python -m build failed ({result.returncode})\n{output[-4000:]}")
    (wheel,) = (root / "dist").glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl")
    return Built(wheel, output)


@pytest.fixture(scope="module")
def fresh_venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> FreshVenv:
    """A venv holding the wheel (no extras), `llm` and `fixtures`, installed together by one pip call."""
    root = tmp_path_factory.mktemp("fresh-venv")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
               "--no-compile", "--disable-pip-version-check", "--retries", "1", "--timeout", "30",
               str(built.wheel), "llm", "fixtures"]
    result = _run(install)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        if _NETWORK_FAILURES.search(output):
            _unavailable("pip install llm fixtures", output)
        pytest.fail(f"pip install failed ({result.returncode})\n{output[-4000:]}")
    home = root / "home"
    for folder in ("state", "config", "work"):
        (home / folder).mkdir(parents=True)
    return FreshVenv(venv, home)


# --- the build and the wheel ------------------------------------------------------------------------


def test_the_build_prints_no_warning(built: Built) -> None:
    warnings = [line for line in built.output.splitlines() if re.search(r"warn|deprecat", line, re.IGNORECASE)]
    assert warnings == []


DIST_INFO = f"{DISTRIBUTION.replace('-', '_')}-{__version__}.dist-info"  # the distribution's name, not dsh's


def test_the_wheel_takes_no_top_level_name_but_dsh(built: Built) -> None:
    top_level = {name.split("/", 1)[0] for name in built.names()}
    assert top_level == {"dsh", DIST_INFO}
    with zipfile.ZipFile(built.wheel) as archive:
        record = archive.read(f"{DIST_INFO}/RECORD").decode()
    recorded = {line.split(",", 1)[0].split("/", 1)[0] for line in record.splitlines() if line}
    assert recorded == top_level


def test_the_wheel_holds_every_product_module_and_nothing_else(built: Built) -> None:
    expected = {
        f"dsh/{path.relative_to(REPO).as_posix()}"
        for layer in LAYERS
        for path in (REPO / layer).rglob("*.py")
        if "__pycache__" not in path.parts
    } | {"dsh/py.typed"}
    shipped = {name for name in built.names() if name.startswith("dsh/")}
    assert shipped == expected
    assert "dsh/llm/loopback/fault_server.py" in shipped  # the demo's runtime ships ...
    assert not any(name.split("/")[1] in TEST_ONLY for name in shipped)  # ... test-only fixtures do not
    assert not any(Path(name).name in {"fake_anthropic.py", "fake_responses.py"} for name in built.names())


def test_the_wheel_declares_the_extras(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as archive:
        metadata = archive.read(f"{DIST_INFO}/METADATA").decode()
        licence = archive.read(f"{DIST_INFO}/licenses/LICENSE").decode()
    extras = sorted(line.removeprefix("Provides-Extra: ") for line in metadata.splitlines()
                    if line.startswith("Provides-Extra: "))
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert extras == sorted(project["optional-dependencies"]) == ["acp", "bench", "claude", "codex", "mcp", "test"]
    assert {"License-Expression: MIT", "License-File: LICENSE", f"Name: {DISTRIBUTION}"} <= set(metadata.splitlines())
    assert licence.startswith("MIT License\n") and "Copyright (c) 2026 the dsh authors" in licence


# --- beside llm and fixtures ----------------------------------------------------------------------


def _installed_version(venv: FreshVenv, distribution: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    return venv.run("python", "-c", code).stdout.strip()


def test_llm_still_runs(fresh_venv: FreshVenv) -> None:
    result = fresh_venv.run("llm", "--version")
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"llm, version {_installed_version(fresh_venv, 'llm')}\n", ""
    )


def test_fixtures_still_imports(fresh_venv: FreshVenv) -> None:
    result = fresh_venv.run("python", "-c", "import fixtures; fixtures.Fixture")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_dsh_prints_its_version(fresh_venv: FreshVenv) -> None:
    result = fresh_venv.run("dsh", "--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"dsh {__version__}\n", "")


def test_dsh_agent_is_the_same_program(fresh_venv: FreshVenv) -> None:
    """The second name (DeepSeek's own harness installs a `dsh` too): the same version and the same demo answer."""
    assert fresh_venv.run("dsh-agent", "--version").stdout == f"dsh {__version__}\n"
    result = fresh_venv.run("dsh-agent", "--demo", "-p", "hello")
    assert (result.returncode, result.stdout, result.stderr) == (0, HELLO, "")


def test_the_demo_answers_a_prompt(fresh_venv: FreshVenv) -> None:
    result = fresh_venv.run("dsh", "--demo", "-p", "hello")
    assert (result.returncode, result.stdout, result.stderr) == (0, HELLO, "")


def test_nothing_imports_from_the_source_tree(fresh_venv: FreshVenv) -> None:
    code = "import dsh.repl.demo.catalogue as c, dsh.llm as l; print(c.__file__); print(l.__file__)"
    result = fresh_venv.run("python", "-c", code)
    assert result.returncode == 0, result.stderr
    for path in result.stdout.split():
        assert Path(path).is_relative_to(fresh_venv.root), path


def test_uninstall_leaves_nothing_behind(built: Built, tmp_path: Path) -> None:
    """pip removes only the folders that hold a file it installed: dsh/ holds py.typed for that."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    installed = _run([*pip, "install", "--quiet", "--no-compile", "--no-deps", str(built.wheel)])
    assert installed.returncode == 0, installed.stderr
    (site,) = (venv / "lib").glob("python3*/site-packages")
    before = set(site.iterdir())
    # A run writes bytecode beside the modules it imports, as a user's first run does.
    ran = _run([str(venv / "bin" / "dsh"), "--version"], env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert (ran.returncode, ran.stdout) == (0, f"dsh {__version__}\n"), ran.stderr
    assert any((site / "dsh").rglob("*.pyc"))
    removed = _run([*pip, "uninstall", "--yes", DISTRIBUTION])
    assert removed.returncode == 0, removed.stderr
    assert sorted(path.name for path in before - set(site.iterdir())) == ["dsh", DIST_INFO]
    assert not (site / "dsh").exists()
    assert not (venv / "bin" / "dsh").exists() and not (venv / "bin" / "dsh-agent").exists()


def _readme_block(heading: str) -> list[str]:
    """The command lines of the first ```sh block under ``heading`` in README.md, comments dropped."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_uninstall_removes_what_its_install_made(built: Built, tmp_path: Path) -> None:
    """The venv install, run as written (the wheel for `.`, with no dependencies), then its uninstall."""
    install = _readme_block("## Install")
    assert install[1] == "~/.local/share/dsh-venv/bin/pip install ."
    install[1] = f"~/.local/share/dsh-venv/bin/pip install --quiet --no-deps {built.wheel}"
    uninstall = [line for line in _readme_block("### Uninstall") if not line.startswith("pipx ")]
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)  # where it is on PATH, it exists
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    made = _run(["sh", "-ec", "\n".join(install)], env=env, cwd=home)
    assert made.returncode == 0, made.stderr
    links = {path.name: os.readlink(path) for path in (home / ".local" / "bin").iterdir()}
    assert links == {name: f"{home}/.local/share/dsh-venv/bin/{name}" for name in ("dsh", "dsh-agent")}
    assert _run([str(home / ".local" / "bin" / "dsh-agent"), "--version"], env=env).stdout == f"dsh {__version__}\n"
    (home / ".local" / "bin" / "other").symlink_to("/bin/true")  # a link of someone else's stays
    removed = _run(["sh", "-ec", "\n".join(uninstall)], env=env, cwd=home)
    assert removed.returncode == 0, removed.stderr
    assert sorted(path.relative_to(home).as_posix() for path in home.rglob("*")) == [
        ".local", ".local/bin", ".local/bin/other", ".local/share"
    ]


# --- every demo scenario without the extras --------------------------------------------------------


def _provider_kinds() -> dict[str, tuple[str, str]]:
    """scenario name -> (subagent table name, provider kind), for the delegation scenarios."""
    tables = {**all_delegation_tables(), **all_product_tables()}
    return {s.name: (s.provider, tables[s.provider].get("provider", "dsh"))
            for s in (*DELEGATION_SCENARIOS, *PRODUCT_SCENARIOS)}


PROVIDERS = _provider_kinds()
BACKGROUND = {s.name for s in DELEGATION_SCENARIOS if s.background}


def _exit_code(expect: str) -> int:
    """The `dsh -p` exit status for a scenario whose turn prints ``expect`` (a fix line follows a failure)."""
    for prefix, code in (("[turn failed ", 1), ("  fix: ", 1), ("[turn rejected]", 3),
                         ("[turn hit the output-token limit]", 4), ("[turn stopped BUDGET]", 5),
                         ("[turn aborted]", 130)):
        if expect.startswith(prefix):
            return code
    return 0


def _session_started(home: Path) -> bool:
    return any('"step/start"' in path.read_text(encoding="utf-8")
               for path in (home / "state").rglob("*.jsonl"))


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    """The scenario's HOME and working directory, with its own session logs."""
    (tmp_path / "state").mkdir()
    return tmp_path


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_demo_scenario_works_or_names_the_extra_to_install(
    fresh_venv: FreshVenv, scenario_dir: Path, name: str
) -> None:
    scenario = SCENARIOS[name]
    assert scenario.expect is not None
    table, kind = PROVIDERS.get(name, (None, None))
    extra = MISSING_EXTRAS.get(kind or "")
    env = {**fresh_venv.env(), "HOME": str(scenario_dir), "XDG_STATE_HOME": str(scenario_dir / "state")}
    command = [fresh_venv.bin("dsh"), "--demo", "--scenario", name]
    if scenario.cancel:
        # a scenario that waits for Ctrl-C: SIGINT once its turn has started
        turn_started = functools.partial(wait_until, lambda: _session_started(scenario_dir), 30, "the turn to start")
        returncode, stdout, stderr = run_interrupted([*command, "-p", "hi"], scenario_dir, env, turn_started)
    elif name in BACKGROUND:
        # `dsh -p` ends with its turn and does not wait for a background job; the piped REPL does, so
        # the job's completion notice (the scenario's line) arrives before it exits.
        result = _run(command, cwd=scenario_dir, env=env, timeout=60, stdin="hi\n")
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    else:
        result = _run([*command, "-p", "hi"], cwd=scenario_dir, env=env, timeout=60)
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    if extra is not None:
        hint = f"subagent {table} ({kind}) needs the {extra} extra: pip install 'dsh-agent[{extra}]'"
        # A failed turn, not an answer: nothing on stdout, the turn-end line on stderr, exit status 1.
        assert (returncode, stdout, stderr) == (1, "", f"[turn failed CONFIG] {hint}\n")
        return
    # -p: the scenario's line is the answer (stdout) or one of the turn's diagnostics (stderr).
    lines = (stdout + stderr).splitlines()
    assert any(line.startswith(scenario.expect) for line in lines), (stdout, stderr)
    assert "pip install 'dsh-agent[" not in stdout + stderr
    # No warning or start-up line, but the budget's own 80 % line (the budget-stop scenario passes it).
    assert not any(line.startswith(("dsh: ", "Traceback")) and not line.startswith("dsh: budget: ")
                   for line in stderr.splitlines()), stderr
    assert returncode == _exit_code(scenario.expect)
