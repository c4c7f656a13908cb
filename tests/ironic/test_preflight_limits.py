"""The Redfish pre-flight keeps to its timeout: a few tries, not sushy's default ten tries 3 s apart.

Against a real closed port on loopback (connection refused) with the real
sushy client: the number of attempts sushy logs is counted.
"""

from __future__ import annotations

import logging
import socket

from nodeforge.ironic import inventory, preflight
from nodeforge.ironic.errorkind import ErrorKind


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]          # closed again when the socket is


def test_an_unreachable_redfish_bmc_is_tried_a_few_times_then_reported(tmp_path, bmc_password, caplog):
    port = _closed_port()
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nnodes:\n  - name: rf-gone\n    bmc:\n"
                   f"      address: redfish+http://127.0.0.1:{port}/redfish/v1/Systems/x\n"
                   "      username: nf\n      password: env:NF_TEST_BMC_PASSWORD\n")
    [spec] = inventory.load(inv).nodes
    caplog.set_level(logging.WARNING, logger="sushy")
    check = preflight.check_redfish(spec, timeout=4.0)
    assert not check.ok and check.failure is ErrorKind.NETWORK, check
    tries = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage()]
    assert len(tries) == preflight.REDFISH_TRIES - 1, tries        # the last failure is raised, not logged
    assert all(f"/{preflight.REDFISH_TRIES}" in t for t in tries), tries
    assert bmc_password not in caplog.text and bmc_password not in check.detail


def test_the_limits_follow_the_timeout():
    assert preflight.redfish_limits(10.0) == {"server_side_retries": 3, "server_side_retries_delay": 1,
                                              "read_timeout": 10.0, "connect_timeout": 10.0 / 3}
    assert preflight.redfish_limits(1.0)["connect_timeout"] == 1.0
