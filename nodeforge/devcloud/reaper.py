"""The watcher that stops a local cloud once the process that owns it is gone.

The test session's cloud is stopped by the session's own teardown; but a
session can be cut short (on Ctrl-C pytest-xdist gives its workers ten
seconds before it kills them, and a service's SIGTERM grace is up to
fifteen), and a killed owner runs no teardown at all.
:meth:`Supervisor.tether <nodeforge.devcloud.process.Supervisor.tether>`
starts this module as a detached process whose standard input is a pipe only
the owner holds open. When the owner exits, by any means, the pipe ends, and
the watcher stops every service recorded in the cloud's pidfiles (the same
pid-and-start-time check as ``devcloud down``, so nothing else is touched).

``devcloud up`` from the command line is not tethered: its cloud is meant to
outlive the command.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nodeforge.devcloud.process import Supervisor


def reap(run_dir: Path, log_dir: Path) -> list[str]:
    """Stop every service that has a live pidfile in ``run_dir``; returns their names."""
    names = sorted(p.stem for p in run_dir.glob("*.pid")) if run_dir.is_dir() else []
    return Supervisor(run_dir, log_dir).stop_all(names)


def main(argv: list[str]) -> int:
    run_dir, log_dir = Path(argv[0]), Path(argv[1])
    while os.read(0, 4096):        # b"" once every write end is closed: the owner is gone
        pass
    stopped = reap(run_dir, log_dir)
    if stopped:
        print(f"owner gone; stopped {', '.join(stopped)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
