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


_NSSWITCH = "hosts: files\n"
# In a new user, network and mount namespace: only loopback exists, and the resolver reads /etc/hosts
# alone, so a name that is not there fails at once ("Name or service not known") and no query leaves.
_ENTER = 'mount --bind "$0" /etc/nsswitch.conf && exec "$@"'


def isolated_resolver(directory: os.PathLike[str] | str) -> list[str]:
    """A command prefix that runs a command where no DNS query can leave the machine.

    Missing ``unshare`` (util-linux) or namespaces the kernel refuses skip the test (fail under CI).
    """
    import shutil
    import subprocess
    from pathlib import Path

    unshare = shutil.which("unshare")
    if unshare is None:
        missing("unshare (util-linux)", "apt-get install util-linux")
    nsswitch = Path(directory) / "nsswitch.conf"
    nsswitch.write_text(_NSSWITCH, encoding="utf-8")
    prefix = [unshare, "--user", "--map-root-user", "--net", "--mount", "--", "sh", "-c", _ENTER, str(nsswitch)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False, timeout=30)
    if probe.returncode != 0:
        missing(
            "a loopback-only network namespace (unshare --user --net --mount)",
            "run as root, or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)",
        )
    return prefix


# The same namespace with a loopback DNS server (tests/loopback_dns.py) as the only resolver: /etc/resolv.conf
# names 127.0.0.1, one try of one second, so a silent server fails in about a second. A new PID namespace
# ends the server with the command (its first process).
_RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
_ENTER_DNS = ('mount --bind "$0" /etc/nsswitch.conf && mount --bind "$1" /etc/resolv.conf && '
              '"$2" "$3" "$4" && shift 5 && "$@"')


def loopback_resolver(directory: os.PathLike[str] | str, answer: str) -> list[str]:
    """A command prefix that runs a command whose DNS is a loopback server answering every query with
    ``answer``: ``nxdomain``, ``servfail``, ``silent`` or ``rebind``. No query leaves the machine."""
    import sys
    from pathlib import Path

    unshare = isolated_resolver(directory)[0]  # the same checks (and skip) as the plain namespace
    nsswitch, resolv = Path(directory) / "nsswitch.conf", Path(directory) / "resolv.conf"
    nsswitch.write_text("hosts: files dns\n", encoding="utf-8")
    resolv.write_text(_RESOLV_CONF, encoding="utf-8")
    server = str(Path(__file__).with_name("loopback_dns.py"))
    return [unshare, "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--", "sh", "-c",
            _ENTER_DNS, str(nsswitch), str(resolv), sys.executable, server, answer, "--"]
