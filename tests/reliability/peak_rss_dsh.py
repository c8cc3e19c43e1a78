"""``python -m tests.reliability.peak_rss_dsh ARGS``: the real dsh, which writes its peak RSS on exit.

The figure is ``VmHWM`` from /proc/self/status (not ``ru_maxrss``, which on Linux survives ``execve``
and so starts at the parent's peak), in MB, written to ``$DSH_PEAK_RSS_FILE`` at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import sys


def _write_peak() -> None:
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    with open(os.environ["DSH_PEAK_RSS_FILE"], "w") as out:
        out.write(f"{kb / 1024:.1f}\n")


if __name__ == "__main__":
    atexit.register(_write_peak)
    from dsh.repl.cli import main

    sys.argv[0] = "dsh"
    main()
