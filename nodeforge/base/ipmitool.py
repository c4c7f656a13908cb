"""``ipmitool -I lanplus``: the one place nodeforge runs it (preflight's
power-status probe, the local cloud's BMC checks). The password travels in
the environment (``IPMI_PASSWORD`` with ``-E``), never on the command line."""

from __future__ import annotations

import os

from nodeforge.base import runner
from nodeforge.redact import Secret

TOOL = "ipmitool"


def ipmitool(host: str, port: int, username: str, password: Secret | None, *args: str,
             cipher_suite: int | None = None, retries: int = 1, timeout_per_try: int = 2,
             timeout: float = 30.0) -> runner.CompletedProcess:
    """Run ``ipmitool -I lanplus [-C suite] -H host -p port -U user -E -R retries
    -N timeout_per_try ARGS``; returns the completed process (stdout and stderr
    apart; exit status not checked). A tool that does not finish within
    ``timeout`` raises :class:`~nodeforge.base.runner.CommandTimeout`."""
    exe = runner.require(TOOL)[TOOL]
    env = {**os.environ, "IPMI_PASSWORD": password.reveal() if password else ""}
    argv = [exe, "-I", "lanplus", *(["-C", str(cipher_suite)] if cipher_suite is not None else []),
            "-H", host, "-p", str(port), "-U", username or "", "-E", "-R", str(retries), "-N", str(timeout_per_try),
            *args]
    return runner.run(argv, env=env, timeout=timeout, check=False, merge=False)
