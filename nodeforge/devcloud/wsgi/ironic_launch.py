"""Ironic's all-in-one process (API + conductor) for the local cloud, with
sushy's per-request retries set from the environment.

Runs inside the OpenStack virtualenv (not nodeforge's): it must not import
nodeforge. sushy retries a request whose connection fails
``server_side_retries`` times (default 10), ``server_side_retries_delay``
seconds apart (default 3), and Ironic repeats that whole cycle
``[redfish] connection_attempts`` times: verifying a node whose BMC does not
answer took ~83 s here. Ironic has no option for sushy's two values, so this
entry sets their defaults from ``NODEFORGE_SUSHY_RETRIES`` and
``NODEFORGE_SUSHY_RETRY_DELAY`` (whole seconds; sushy treats 0 as "its own
default"), then runs Ironic's ``ironic`` command unchanged. The conductor is
forked from this process, so it inherits the setting.
"""

import os
import sys

import sushy
from sushy import main as sushy_main

_RETRIES = int(os.environ.get("NODEFORGE_SUSHY_RETRIES", "10"))
_DELAY = int(os.environ.get("NODEFORGE_SUSHY_RETRY_DELAY", "3"))


class Sushy(sushy_main.Sushy):
    """sushy's root object with the local cloud's retry defaults (an explicit argument still wins)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("server_side_retries", _RETRIES)
        kwargs.setdefault("server_side_retries_delay", _DELAY)
        super().__init__(*args, **kwargs)


# Ironic calls ``sushy.Sushy(...)`` (looked up at call time).
sushy.Sushy = Sushy
sushy_main.Sushy = Sushy

if __name__ == "__main__":
    from ironic.command.singleprocess import main

    sys.argv[0] = "ironic"
    sys.exit(main())
