"""The version and the distribution's name: the only two facts about the package itself.

``dsh`` is the command and the import package, but not the name on PyPI (``dsh`` there is another
project): ``pip install`` takes :data:`DISTRIBUTION`. Every install line dsh prints is built by
:func:`install_line`, so the name is written once (README.md, "Install").
"""

__version__ = "0.1.0"  # pyproject.toml reads it ([tool.setuptools.dynamic]); the metadata carries it
DISTRIBUTION = "dsh-agent"  # [project] name in pyproject.toml; tests/test_docs_claims.py holds them equal


def install_line(extra: str | None = None) -> str:
    """``pip install 'dsh-agent[acp]'`` (or the bare distribution without ``extra``)."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
