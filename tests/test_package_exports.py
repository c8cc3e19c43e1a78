"""The package roots (``dsh.llm``, ``dsh.agent_loop``, ``dsh.agent_loop.mcp``): every name they export resolves, lazily.

Each root lists its names twice on purpose: ``__all__`` (read by the type checker and ``import *``) and
``_EXPORTS`` (module -> names, read at run time so that a name is imported only when first used). These
tests hold the two to each other, and run in a fresh interpreter where laziness is under test.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

ROOTS = ["dsh.llm", "dsh.agent_loop", "dsh.agent_loop.mcp"]


@pytest.mark.parametrize("root", ROOTS)
def test_every_name_in_all_is_listed_once_with_the_module_that_defines_it(root: str) -> None:
    package = importlib.import_module(root)
    listed = [name for names in package._EXPORTS.values() for name in names.split()]
    assert len(listed) == len(set(listed))
    assert sorted(set(package.__all__) - {"__version__"}) == sorted(listed)
    for module_name, names in package._EXPORTS.items():
        module = importlib.import_module(module_name)
        for name in names.split():
            assert name in module.__all__, (module_name, name)
            assert getattr(package, name) is getattr(module, name)


@pytest.mark.parametrize("root", ROOTS)
def test_a_name_the_root_does_not_export_is_an_attribute_error(root: str) -> None:
    package = importlib.import_module(root)
    with pytest.raises(AttributeError, match=f"module '{root}' has no attribute 'NotExported'"):
        package.NotExported  # noqa: B018


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_importing_an_error_class_from_dsh_llm_does_not_load_the_http_client() -> None:
    assert _fresh("import sys; from dsh.llm import LlmError, ToolCall; print('httpx' in sys.modules)") == "False\n"


def test_httpx_through_dsh_leaves_its_command_line_and_what_that_needs_unloaded() -> None:
    # rich and click are in the test environment (as the mcp extra brings them): plain httpx would load them.
    code = ("import sys, importlib.util; import dsh.llm, httpx; "
            "print(importlib.util.find_spec('rich') is not None, importlib.util.find_spec('click') is not None, "
            "[name for name in ('rich', 'click') if name in sys.modules])")
    assert _fresh(code) == "True True []\n"
    done = subprocess.run([sys.executable, "-c", "import dsh.llm, httpx; httpx.main()"], capture_output=True,
                          text=True, check=False)
    assert (done.returncode, done.stderr) == (1, "httpx's command line is not loaded inside dsh: run httpx from a "
                                                 "shell\n")


def test_importing_the_session_log_from_dsh_agent_loop_does_not_load_the_agent() -> None:
    code = "import sys; from dsh.agent_loop import SessionLog; print('dsh.agent_loop.agent' in sys.modules)"
    assert _fresh(code) == "False\n"


def test_star_import_of_a_root_brings_every_exported_name() -> None:
    code = "from dsh.agent_loop import *; from dsh.llm import *; print(Agent.__name__, DeepSeekClient.__name__)"
    assert _fresh(code) == "Agent DeepSeekClient\n"
