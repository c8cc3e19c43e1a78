"""One rule for tests whose real part (a Debian package, an npm agent, root) is missing.

Locally such a test skips with one line saying how to install the part; under ``CI=true`` the same
absence is a failure, because CI installs every real part (see ``.ci/run``) and must run them all.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(what: str, how_to_install: str) -> NoReturn:
    """Skip (or, under CI, fail) because ``what`` is not here; ``how_to_install`` is the one-line fix."""
    line = f"{what} is not installed: {how_to_install}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{line} (CI must run this test: .ci/run installs it)", pytrace=False)
    pytest.skip(line)
