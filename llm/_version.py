"""The version and the distribution's name: the only two facts about the package itself.

``dsh`` is the command and the import package, but not the name on PyPI (``dsh`` there is another
project): ``pip install`` takes :data:`DISTRIBUTION`. Every install line dsh prints is built by
:func:`install_line`, so the name is written once (README.md, "Install").
"""

import os
import sys

__version__ = "0.1.0"  # pyproject.toml reads it ([tool.setuptools.dynamic]); the metadata carries it
DISTRIBUTION = "dsh-agent"  # [project] name in pyproject.toml; tests/test_docs_claims.py holds them equal


# What each extra installs ([project.optional-dependencies]; tests/packaging holds them equal): pipx adds
# packages to dsh's own venv by name (``pipx inject``), not by extra.
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "acp": ("agent-client-protocol",),
    "claude": ("claude-agent-sdk",),
    "codex": ("openai-codex-cli-bin",),
    "mcp": ("mcp",),
}


def install_line(extra: str | None = None, *, prefix: str | None = None) -> str:
    """The command that adds ``extra`` to *this* installation (``prefix``: ``sys.prefix``): ``pipx inject dsh-agent
    agent-client-protocol`` in a pipx venv, else ``pip install 'dsh-agent[acp]'`` (or the bare distribution)."""
    prefix = sys.prefix if prefix is None else prefix
    target = f"'{DISTRIBUTION}[{extra}]'" if extra else DISTRIBUTION
    if os.path.isfile(os.path.join(prefix, "pipx_metadata.json")):  # pipx writes it in each venv it makes
        packages = EXTRA_PACKAGES.get(extra or "")
        if packages:
            return f"pipx inject {DISTRIBUTION} {' '.join(packages)}"
        return f"pipx runpip {DISTRIBUTION} install {target}" if extra else f"pipx install {DISTRIBUTION}"
    return f"pip install {target}"
